"""The value study (scripts/lab/study.py, scripts/lab/study_report.py): its verdicts on hand-made curves, and every stage at
a smoke-test size."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from lab.study_report import _beats_at_equal_flops, _rising


def curves(**points):
    return {"curves": {name: [{"size": k + 1, "flops_per_problem_mean": x, "accuracy_mean": y}
                              for k, (x, y) in enumerate(pts)] for name, pts in points.items()}}


def test_equal_flops_compares_with_the_baseline_interpolated_at_the_same_flops():
    base = [(1e8, 0.3), (2e8, 0.5)]  # at 1.5e8 FLOPs best-of-N would reach 0.4 (linear between its points)
    assert _beats_at_equal_flops(curves(best_of_n=base, beam=[(1.5e8, 0.41)]), "beam") is True
    assert _beats_at_equal_flops(curves(best_of_n=base, beam=[(1.5e8, 0.39)]), "beam") is False
    assert _beats_at_equal_flops(curves(best_of_n=base, beam=[(1.5e8, 0.41), (2e8, 0.45)]), "beam") is False
    assert _beats_at_equal_flops(curves(best_of_n=base, beam=[(5e7, 0.31)]), "beam") is True  # below: its first point
    assert _beats_at_equal_flops(curves(best_of_n=base, beam=[(3e8, 0.9)]), "beam") is None  # nothing to compare


def test_rising_needs_three_budgets_each_above_the_last():
    def points(*ys):
        return [{"size": 16 * (k + 1), "accuracy_mean": y} for k, y in enumerate(ys)]
    assert _rising(points(0.1, 0.2, 0.3))
    assert not _rising(points(0.1, 0.3, 0.3))
    assert not _rising(points(0.1, 0.2))


@pytest.mark.slow
def test_the_study_runs_every_stage_and_its_prm_loads_back(tmp_path):
    from rl.prm import ProcessRewardModel
    from lab.study import TINY_STUDY, run_study

    # Each cold start trains 6 s here (sft_minutes=0.1) instead of TINY_STUDY's 18 s: this test checks that
    # every stage runs and what it writes, not how skilled the cold starts are (after 18 s on a 2-core
    # machine their PRM labels were all 0 as well). run_study alone measured 80 s -> 50 s there.
    summary = run_study(replace(TINY_STUDY, output_dir=str(tmp_path), sft_minutes=0.1))
    assert json.loads((tmp_path / "summary.json").read_text()) == json.loads(json.dumps(summary))
    assert set(summary["values"]) == {"random", "confidence", "mc2", "prm", "verifier"}
    assert set(summary["search"]["curves"]) == {"best_of_n", "beam_confidence", "beam_prm", "beam_verifier"}
    assert set(summary["forcing"]["curves"]) == {"budget_forcing_plain", "budget_forcing_self_correction"}
    from planner.scaling_report import read_results, summarize
    # problems.csv names each curve, so the folder reads back whole. Exact equality holds on any CPU: the CSV
    # writes floats as repr (which round-trips every bit) and one function summarizes the same numbers
    for stage in ("search", "forcing"):
        assert summarize(read_results(tmp_path / stage))["curves"] == summary[stage]["curves"]
    for name in ("values/values.csv", "values/sibling_accuracy.png", "search/results.csv",
                 "forcing/accuracy_vs_tokens.png", "prm/prm.json", "verifier/scorer.json"):
        assert (tmp_path / name).is_file(), name
    assert summary["prm"]["examples"] > 0 and 0.0 <= summary["prm"]["label_mean"] <= 1.0
    prm = ProcessRewardModel.load(tmp_path / "prm")
    assert prm.num_parameters > 0
    # the results section states each learned value's targets with its own numbers
    from lab.study_report import section_body

    body = section_body(summary, "python scripts/study.py", "a machine", "artifacts")
    verifier = summary["values"]["verifier"]
    assert "- The generative verifier: sibling-ranking accuracy >= 0.95" in body and "- The PRM: " in body
    assert f"({verifier['rerank_accuracy']:.3f} against {verifier['majority_accuracy']:.3f})" in body
    assert f"{summary['verifier']['parameters']:,} parameters" in body
