"""The demo pipeline at a tiny size: every stage runs and every artifact agrees with the CSVs."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from lab.recipe import TINY, VALUES, run_demo
from planner.scaling_report import read_results
from rl.metrics import read_metrics

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    return out, run_demo(replace(TINY, output_dir=str(out), backend="hf"))


def test_every_artifact_exists(demo):
    out, summary = demo
    for name in ("report.md", "summary.json", "accuracy_vs_compute_before_after.png", "sft/config.json",
                 "verifier/config.json", "verifier/scorer.json",
                 "rl/metrics.csv", "rl/checkpoint/policy/config.json", "rl/checkpoint/critic/config.json"):
        assert (out / name).is_file(), name
    for phase in ("before_rl", "after_rl"):
        for name in ("results.csv", "problems.csv", "accuracy_vs_tokens.png", "accuracy_vs_flops.png"):
            path = out / f"scaling_{phase}" / name
            assert path.is_file() and path.stat().st_size > 0, path
    assert (out / "accuracy_vs_compute_before_after.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((out / "summary.json").read_text()) == json.loads(json.dumps(summary))


def test_report_numbers_equal_the_csvs(demo):
    out, summary = demo
    for phase in ("before_rl", "after_rl"):
        rows = read_results(out / f"scaling_{phase}")
        table = summary[f"scaling_{phase}"]
        assert {r["strategy"] for r in rows} == set(table) == {"best_of_n", "budget_forcing", "beam", "mcts"}
        for r in rows:  # one seed in TINY: the table holds the CSV's numbers exactly
            cell = table[r["strategy"]][str(r["size"])]
            assert cell["accuracy"] == pytest.approx(float(r["accuracy"]))
            low, high = cell["accuracy_interval"]
            assert low <= cell["accuracy"] <= high
            assert cell["tokens_per_problem"] == pytest.approx(float(r["generated_tokens_per_problem"]))
            assert cell["flops_per_problem"] == pytest.approx(float(r["flops_per_problem"]))
    report = (out / "report.md").read_text()
    low, high = summary["pass@1_interval_before_rl"]
    assert f"| pass@1 | {summary['pass@1_before_rl']:.3f} [{low:.3f}, {high:.3f}] |" in report
    bon = summary["scaling_before_rl"]["best_of_n"]["2"]
    low, high = bon["accuracy_interval"]
    assert (f"| best_of_n | 2 | {bon['accuracy']:.3f} [{low:.3f}, {high:.3f}] | {bon['tokens_per_problem']:.0f} | "
            f"{bon['flops_per_problem']:.2e} |") in report
    history = read_metrics(out / "rl")
    assert [m["reward_mean"] for m in history] == [m["reward_mean"] for m in summary["rl_history"]]
    for key in VALUES:  # the values graded against the oracle, in the report as in the summary
        value = summary[f"{key}_sibling_accuracy"]
        assert value is None or 0.0 <= value <= 1.0
        assert summary[f"{key}_step_auc"] is None or 0.0 <= summary[f"{key}_step_auc"] <= 1.0
    for row in ("the generative verifier (guides the searches)",
                "the critic trained in the loop (on the verifier's trunk)", "the policy's step confidence"):
        assert f"| {row} | " in report, row
    verifier = summary["verifier"]  # the verifier guided the RL searches: its FLOPs are in every iteration's metrics
    assert verifier["parameters"] > 0 and verifier["steps"] > 0
    assert all(m["scorer_flops"] > 0 and m["scorer_flops"] % (2 * verifier["parameters"]) == 0 for m in history)


BAD_OPTIONS = """
import contextlib, io, json, sys
sys.path.insert(0, sys.argv[1])  # scripts/, as for a script run directly
import demo
replies = []
for argv in json.loads(sys.argv[2]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = demo.main(argv)
        except SystemExit as exit:
            code = exit.code
    replies.append([code, err.getvalue()])
print(json.dumps(replies))
"""


def test_demo_help_and_bad_option():
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "demo.py"), "--help"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0 and "--rl_iterations" in result.stdout and "--tiny" in result.stdout
    bad = {"--no_such_option": "unrecognized arguments: --no_such_option",  # each refused before any work
           "--rl_candidates=0": "DemoConfig.rl_candidates must be an integer >= 1; got 0",
           "--rl_temperature=0": "DemoConfig.rl_temperature must be a number in [0.01, inf]; got 0.0",
           "--rl_critic=value": "DemoConfig.rl_critic must be one of ['policy', 'verifier']; got 'value'"}
    result = subprocess.run([sys.executable, "-c", BAD_OPTIONS, str(REPO / "scripts"), json.dumps([[a] for a in bad])],
                            capture_output=True, text=True, timeout=120)  # one process: the imports are paid once
    assert result.returncode == 0, result.stderr[-2000:]
    for (code, err), message in zip(json.loads(result.stdout.splitlines()[-1]), bad.values()):
        assert code == 2 and message in err, (message, err)
