"""The demo pipeline at a tiny size: every stage runs and every artifact agrees with the CSVs."""

from __future__ import annotations

import importlib
import inspect
import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from lab.recipe import TINY, run_demo
from planner.prm_scorers import load_scorer
from planner.scaling_report import read_results
from rl.metrics import read_metrics
from verifiers import arithmetic

REPO = Path(__file__).resolve().parents[1]
GRADER = str(REPO / "planner" / "value_eval.py")
"""The only file allowed to call the process oracle: the graders."""


def _guard_oracle(monkeypatch) -> list[str]:
    """Replace the process oracle (`check_steps`, and `step_value` which reads it) wherever a module holds it
    with a copy that raises unless the grader is on the call stack; returns the list its calls append to."""
    calls = []
    for name in ("check_steps", "step_value"):
        real = getattr(arithmetic, name)

        def guarded(*args, _real=real, _name=name):
            stack = [frame.filename for frame in inspect.stack(0)]
            if GRADER not in stack:
                raise AssertionError(f"the process oracle ({_name}) was called outside the graders, from "
                                     f"{[f for f in stack if str(REPO) in f][:6]}")
            calls.append(_name)
            return _real(*args)

        for module in list(sys.modules.values()):
            if getattr(module, "__dict__", {}).get(name) is real:  # (no __getattr__: lazy modules would import)
                monkeypatch.setattr(module, name, guarded)
    return calls


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The RLVR demo at the smoke size, with the oracle guarded: training and search never reach it."""
    out = tmp_path_factory.mktemp("demo")
    with pytest.MonkeyPatch.context() as monkeypatch:
        calls = _guard_oracle(monkeypatch)
        summary = run_demo(replace(TINY, output_dir=str(out), backend="hf"))
    return out, summary, calls


def test_the_oracle_only_grades(demo, monkeypatch):
    _, _, calls = demo
    assert "check_steps" in calls  # the graders did use it, through the guard
    _guard_oracle(monkeypatch)
    problem = arithmetic.arithmetic_task(1, "easy", seed=0)[0]
    with pytest.raises(AssertionError, match="outside the graders"):  # the guard itself bites
        arithmetic.step_value(problem, problem.meta["solution"])


def test_every_artifact_exists(demo):
    out, summary, _ = demo
    for name in ("report.md", "summary.json", "accuracy_vs_compute_before_after.png", "value_during_rl.png",
                 "sft/config.json", "value_start/config.json", "value_start/scorer.json", "rl/metrics.csv"):
        assert (out / name).is_file(), name
    for phase in ("before_rl", "after_rl"):
        for name in ("results.csv", "problems.csv", "accuracy_vs_tokens.png", "accuracy_vs_flops.png"):
            path = out / f"scaling_{phase}" / name
            assert path.is_file() and path.stat().st_size > 0, path
    assert (out / "accuracy_vs_compute_before_after.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((out / "summary.json").read_text()) == json.loads(json.dumps(summary))
    assert (summary["value_source"], summary["gold_traces"]) == ("loop", TINY.gold_problems)
    assert (Path(summary["policy_dir"]) / "config.json").is_file()
    value = load_scorer(summary["loop_value_dir"], decode=lambda ids: "".join(map(str, ids)))
    assert value.num_parameters == summary["value_start"]["parameters"]
    iterations = [row["iteration"] for row in summary["loop_value_history"]]
    assert iterations == list(range(TINY.rl_iterations + 1))  # graded before RL and after every iteration
    for key in ("loop_value", "value_start", "confidence"):
        accuracy = summary[f"{key}_sibling_accuracy"]
        assert accuracy is None or 0.0 <= accuracy <= 1.0


def test_report_numbers_equal_the_csvs(demo):
    out, summary, _ = demo
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
    for row in ("the loop value after RL (guides the searches)", "its start, frozen (the gold budget only)",
                "the policy's step confidence"):
        assert f"| {row} | " in report, row
    assert "TEACHER" not in report and summary["teacher_dir"] is None
    # the loop value guided the RL searches: its FLOPs are in every iteration's metrics
    parameters = summary["value_start"]["parameters"]
    assert all(m["scorer_flops"] > 0 and m["scorer_flops"] % (2 * parameters) == 0 for m in history)
    assert all(m["loop_value_correct"] >= 0 for m in history)


def run_demo_script(capsys, argv: list[str]) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `scripts/demo.py argv` by its main(argv) in this process: the
    command lines here end at the parser (help, or a refused option) and need no process of their own. An
    exception other than the parser's exit fails the test, as a traceback would."""
    script = importlib.import_module("demo")  # scripts/demo.py (this module's `demo` is the fixture)
    capsys.readouterr()
    try:
        code = script.main(argv)
    except SystemExit as done:
        code = done.code
    out, err = capsys.readouterr()
    return 0 if code is None else code, out, err


def test_demo_help_and_bad_option(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # argparse's width in a process whose output is a pipe
    code, out, _ = run_demo_script(capsys, ["--help"])
    assert code == 0 and "--rl_iterations" in out and "--tiny" in out
    bad = {"--no_such_option": "unrecognized arguments: --no_such_option",  # each refused before any work
           "--rl_candidates=0": "DemoConfig.rl_candidates must be an integer >= 1; got 0",
           "--rl_temperature=0": "DemoConfig.rl_temperature must be a number in [0.01, inf]; got 0.0",
           "--value=oracle": "DemoConfig.value must be one of ['loop', 'teacher']; got 'oracle'",
           "--gold_problems=5000": "DemoConfig.gold_problems must be at most 2000"}
    for option, message in bad.items():
        code, _, err = run_demo_script(capsys, [option])
        assert code == 2 and message in err, (message, err)


def test_demo_seeds_summarises_runs(demo, tmp_path):
    import demo_seeds

    mean, low, high = demo_seeds.t_interval([1.0, 2.0, 3.0])  # by hand: sd 1, half-width 4.303 / sqrt(3)
    assert (mean, low, high) == pytest.approx((2.0, 2.0 - 2.4844, 2.0 + 2.4844), abs=1e-4)
    assert demo_seeds.t_interval([5.0])[1:] == (None, None)
    out, summary, _ = demo
    assert demo_seeds.main(["--runs", str(out), "--out", str(tmp_path / "seeds")]) == 0
    rows = (tmp_path / "seeds" / "seeds.csv").read_text().splitlines()
    assert len(rows) == 2 and rows[1].startswith(f"{TINY.seed},loop,{TINY.gold_problems},")
    assert f"Mean RL gain over 1 runs: {summary['rl_gain_points']:+.1f} points" in (tmp_path / "seeds" / "seeds.md").read_text()
    for name in ("pass_at_1_per_seed.png", "value_during_rl.png"):
        assert (tmp_path / "seeds" / name).read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(SystemExit):
        demo_seeds.main(["--runs", str(tmp_path), "--out", str(tmp_path / "x")])  # no summary.json there
