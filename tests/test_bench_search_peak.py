"""A smoke run of scripts/bench_search_peak.py (transformers backend, two problems, a small grid)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_bench_search_peak_runs_and_states_the_target():
    out = subprocess.run([sys.executable, "scripts/bench_search_peak.py", "--backends", "hf", "--problems", "2",
                          "--live", "1", "--repeats", "1", "--shapes", "4x2x8", "8x2x8", "--no-doc"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    table = out.stdout
    assert "| mcts | hf | 2 (2) |" in table and "| beam | hf | 2 (1) (refilling) |" in table
    assert "| mcts | hf | 2, 1 at a time |" in table  # the same problems without refilling
    assert "met |" in table  # the target column is filled for the all-live rows
    assert "merged across searches" in table and "one per search" in table
    assert "written to" not in table  # --no-doc leaves docs/benchmarks.md alone
