"""planner.scaling (compute-scaling curves) and the scripts/scaling.py command line."""

from __future__ import annotations

import csv
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from planner.scaling import ScalingConfig, best_of_n_rows, run_scaling
from planner.scaling_report import (PROBLEM_COLUMNS, RESULT_COLUMNS, bootstrap_interval, compute_to_reach, curve,
                                    read_csv, read_results, summarize, write_outputs)
from planner.solve import solve
from planner.strategies.common import choose_answer
from verifiers.tasks import Problem

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "scaling.py"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def last_char(text: str) -> str | None:
    text = text.strip()
    return text[-1] if text else None


def grade(text: str, problem: Problem) -> float:
    """The toy task's verifier: the response's last character is the reference."""
    return float(last_char(text) == problem.reference)


# ---- best-of-N sub-sampling, worked by hand on a scripted policy --------------------------------------------
# Continuations in sampling order (each ends with EOS, so a text of k characters is k + 1 tokens).
SCRIPT_TABLE = {
    "P": [("x7", 0, "stop"), ("3", 0, "stop"), ("yy3", 0, "stop"), ("7", 0, "stop"),
          ("7", 0, "stop"), ("3", 0, "stop"), ("z3", 0, "stop"), ("3", 0, "stop")],
    "Q": [("5", 0, "stop"), ("2", 0, "stop"), ("ab2", 0, "stop"), ("5", 0, "stop"),
          ("5", 0, "stop"), ("5", 0, "stop"), ("2", 0, "stop"), ("9", 0, "stop")],
}
# P (reference 3): n=1 [7] -> 7 wrong; n=3 [7,3,3] -> 3 right; n=8 3 x5 vs 7 x3 -> 3 right.
# Q (reference 5): n=1 [5] -> 5 right; n=3 [5,2,2] -> 2 wrong; n=8 5 x4 vs 2 x3 -> 5 right.
# Generated tokens: P 3,2,4,2,2,2,3,2 and Q 2,2,4,2,2,2,2,2 -> first 1: 3+2, first 3: 9+8, all 8: 20+18.


def test_best_of_n_rows_subsample_one_pass_by_hand(scripted_policy):
    policy = scripted_policy(SCRIPT_TABLE)
    problems = [Problem("p", "P", "3", "toy"), Problem("q", "Q", "5", "toy")]
    rows = best_of_n_rows(problems, policy, grade, [8, 1, 3], seed=0, chat=False, extract=last_char)
    assert [r["size"] for r in rows] == [1, 3, 8]
    assert [r["accuracy"] for r in rows] == [0.5, 0.5, 1.0]
    assert [r["generated_tokens"] for r in rows] == [5, 17, 38]
    # per problem: P wrong at n=1, right at 3 and 8; Q right, wrong, right; tokens as worked out above
    assert [[(o["problem"], o["solved"], o["generated_tokens"]) for o in r["outcomes"]] for r in rows] == [
        [(0, 0, 3), (1, 1, 2)], [(0, 1, 9), (1, 0, 8)], [(0, 1, 20), (1, 1, 18)]]
    assert all(o["flops"] == 2 * policy.num_parameters * (1 + o["generated_tokens"]) for r in rows
               for o in r["outcomes"])
    assert policy.stats.calls == 2 and policy.stats.generated_tokens == 38  # one pass of N = 8 per problem
    for row in rows:  # the prompt is counted once per problem at every n, and one call each
        assert (row["prompt_tokens"], row["policy_calls"], row["problems"]) == (2, 2, 2)
        assert row["flops"] == 2 * policy.num_parameters * (2 + row["generated_tokens"])  # nothing cached
        assert row["generated_tokens_per_problem"] == row["generated_tokens"] / 2


def test_best_of_n_rows_weighted_vote_and_scorer_compute(scripted_policy, table_scorer):
    policy = scripted_policy(SCRIPT_TABLE)
    texts = {text for rows in SCRIPT_TABLE.values() for text, _, _ in rows}
    scorer = table_scorer({t: (0.9 if t in ("x7", "2") else 0.1) for t in texts}, policy, num_parameters=10)
    problems = [Problem("p", "P", "3", "toy"), Problem("q", "Q", "5", "toy")]
    rows = best_of_n_rows(problems, policy, grade, [1, 3, 8], seed=0, scorer=scorer, chat=False, extract=last_char,
                          final="weighted")
    # P: 7 weighs .9+.1+.1 (n=8) vs 3 x5 = .5 -> 7 wrong at every n; Q: n=1 5 right, n=3 2 (.9+.1) wrong,
    # n=8 2 (.9+.1+.1 = 1.1) vs 5 (4 x .1 = .4) wrong
    assert [r["accuracy"] for r in rows] == [0.5, 0.0, 0.0]
    # scorer FLOPs = 2 x 10 x the prompt + response tokens of the first n leaves (P: 4,3,5,3,3,3,4,3; Q: 3,3,5,3,...)
    assert [r["flops"] - 2 * policy.num_parameters * (2 + r["generated_tokens"]) for r in rows] == [
        2 * 10 * (4 + 3), 2 * 10 * (4 + 3 + 5 + 3 + 3 + 5), 2 * 10 * (2 * 8 + 38)]
    assert scorer.stats.calls == 2 and all(r["scorer_calls"] == 2 for r in rows)


def test_majority_votes_from_a_scored_pass_are_the_unscored_run(scripted_policy, table_scorer):
    """votes=["majority"] beside final="weighted": one pass gives both curves; the majority rows are the
    ones a run without a scorer gives (worked by hand in the first test: accuracy .5, .5, 1; tokens 5,
    17, 38; no scorer FLOPs), while the weighted rows are those of the test above."""
    policy = scripted_policy(SCRIPT_TABLE)
    texts = {text for rows in SCRIPT_TABLE.values() for text, _, _ in rows}
    scorer = table_scorer({t: (0.9 if t in ("x7", "2") else 0.1) for t in texts}, policy, num_parameters=10)
    problems = [Problem("p", "P", "3", "toy"), Problem("q", "Q", "5", "toy")]
    rows = best_of_n_rows(problems, policy, grade, [1, 3, 8], seed=0, scorer=scorer, chat=False, extract=last_char,
                          final="weighted", votes=["majority"])
    assert [r["strategy"] for r in rows] == ["best_of_n"] * 3 + ["best_of_n_majority"] * 3
    weighted, majority = rows[:3], rows[3:]
    assert [r["accuracy"] for r in weighted] == [0.5, 0.0, 0.0]
    assert [r["accuracy"] for r in majority] == [0.5, 0.5, 1.0]
    assert [r["generated_tokens"] for r in majority] == [5, 17, 38]
    assert [r["flops"] for r in majority] == [2 * policy.num_parameters * (2 + t) for t in (5, 17, 38)]
    assert all(r["scorer_calls"] == 0 for r in majority)
    assert {o["strategy"] for r in majority for o in r["outcomes"]} == {"best_of_n_majority"}
    assert policy.stats.calls == 2  # one sampling pass per problem for both curves
    with pytest.raises(ValueError, match=r"votes must be distinct rules of \['majority', 'weighted', 'best'\] "
                                         r"other than final='majority'; got \['majority'\]"):
        ScalingConfig(votes=["majority"])
    with pytest.raises(ValueError, match=r"votes=\['weighted'\] needs a scorer"):
        ScalingConfig(votes=["weighted"])


def test_best_of_n_subsample_matches_the_stored_samples(tiny_model_dir):
    """On a real (tiny) model: each n's row equals the first n samples of the one stored pass at N."""
    from planner.policy import load_policy

    policy = load_policy(tiny_model_dir, backend="hf", threads=1)
    problems = [Problem(f"t{i}", q, ref, "toy") for i, (q, ref) in enumerate([("ab", "a"), ("cd", "e")])]
    sizes, seed = [1, 2, 4], 3
    rows = best_of_n_rows(problems, policy, grade, sizes, seed, extract=last_char, max_tokens=12)
    assert policy.stats.calls == len(problems)  # one sampling pass, not one per size
    assert policy.stats.generated_tokens == rows[-1]["generated_tokens"]
    # the stored samples: the same search again (same seeds) gives the same tree
    config = {"n": 4, "max_tokens": 12, "extract": last_char}
    trees = [solve(p, policy, "best_of_n", seed=seed * 1_000_003 + i, **config).tree for i, p in enumerate(problems)]
    from planner.strategies import make_config

    settings = make_config("best_of_n", **config)
    for row, n in zip(rows, sizes):
        tokens = sum(len(t[leaf].token_ids) for t in trees for leaf in t[0].children[:n])
        solved = [grade(t.response_text(choose_answer(t, t[0].children[:n], "majority", None, settings)[0]), p)
                  for t, p in zip(trees, problems)]
        assert row["generated_tokens"] == tokens
        assert row["accuracy"] == sum(solved) / len(problems)
    assert rows[0]["generated_tokens"] < rows[1]["generated_tokens"] < rows[2]["generated_tokens"]


def test_batched_run_merges_the_problems_calls(tiny_model_dir):
    """batched=True: one engine call per round for all problems (solve_batch), the same rows otherwise."""
    from planner.policy import load_policy

    policy = load_policy(tiny_model_dir, backend="hf", threads=1)
    problems = [Problem(f"t{i}", q, ref, "toy") for i, (q, ref) in enumerate([("ab", "a"), ("cd", "e"), ("x", "1")])]
    rows = best_of_n_rows(problems, policy, grade, [1, 4], seed=0, batched=True, extract=last_char, max_tokens=8)
    assert policy.stats.calls == 1  # three problems' N = 4 samples in one merged generate call
    assert rows[-1]["generated_tokens"] == policy.stats.generated_tokens
    assert rows[-1]["prompt_tokens"] == policy.stats.prompt_tokens and rows[-1]["policy_calls"] == 3
    assert rows[0]["wall_seconds"] == pytest.approx(rows[-1]["wall_seconds"] / 4)
    config = ScalingConfig(model=str(tiny_model_dir), strategies=["budget_forcing"], sizes={"budget_forcing": [4]},
                           seeds=[0], max_tokens=4, batched=True, progress=False)
    before = policy.stats.calls
    (row,) = run_scaling(config, policy, problems, grade, extract=last_char)
    assert row["problems"] == 3 and policy.stats.calls - before < row["policy_calls"]  # calls were merged


def test_confidence_scorer_guides_beam_for_no_flops(tiny_model_dir):
    """scorer="confidence": beam is scored by the sampled steps' log-probabilities (scorer calls happen)
    and the scorer adds no FLOPs, so the rows' FLOPs are the policy's alone (2 x parameters x tokens)."""
    from planner.policy import load_policy
    from planner.scaling import make_scorer
    from planner.scorers import ConfidenceScorer

    policy = load_policy(tiny_model_dir, backend="hf", threads=1)
    assert isinstance(make_scorer("confidence", policy), ConfidenceScorer)
    problems = [Problem(f"t{i}", q, ref, "toy") for i, (q, ref) in enumerate([("ab", "a"), ("cd", "e")])]
    config = ScalingConfig(model=str(tiny_model_dir), strategies=["beam"], sizes={"beam": [2]}, seeds=[0],
                           scorer="confidence", options={"beam": {"max_steps": 2, "max_step_tokens": 4,
                                                                  "beam_width": 2}}, progress=False)
    (row,) = run_scaling(config, policy, problems, grade, extract=last_char)
    assert row["scorer_calls"] > 0
    uncached = row["prompt_tokens"] - row["cached_prompt_tokens"]
    assert row["flops"] == pytest.approx(2 * policy.num_parameters * (uncached + row["generated_tokens"]), rel=1e-9)


def test_a_folder_with_a_scorer_note_loads_as_its_format_and_arithmetic_draws_past_its_split(tiny_model_dir, tmp_path):
    import json
    import shutil

    from planner.likelihood import LikelihoodVerifier
    from planner.policy import load_policy
    from planner.scaling import load_inputs, make_scorer
    from verifiers.tasks import load_task

    folder = tmp_path / "verifier"
    shutil.copytree(tiny_model_dir, folder)
    (folder / "scorer.json").write_text(json.dumps({"format": "likelihood", "reduce": "mean"}))
    scorer = make_scorer(str(folder), load_policy(tiny_model_dir, backend="hf", threads=1))
    assert isinstance(scorer, LikelihoodVerifier) and scorer.reduce == "mean"
    split = load_task("arithmetic").problems
    _, _, problems = load_inputs(ScalingConfig(model=str(tiny_model_dir), task="arithmetic", offset=100, limit=100))
    assert len(problems) == 100 and [p.question for p in problems[:len(split) - 100]] == \
        [p.question for p in split[100:]]  # the split's own first, then the held-out draw goes on
    assert len({p.question for p in split} | {p.question for p in problems}) == 200


# ---- a whole run: CSV, PNGs, summary --------------------------------------------------------------------------
def test_run_writes_csv_pngs_and_a_summary_of_means(tiny_model_dir, tmp_path):
    from planner.policy import load_policy

    policy = load_policy(tiny_model_dir, backend="hf", threads=1)
    problems = [Problem(f"t{i}", q, ref, "toy") for i, (q, ref) in enumerate([("ab", "a"), ("cd", "e"), ("x", "1")])]
    config = ScalingConfig(model=str(tiny_model_dir), strategies=["best_of_n", "budget_forcing", "beam"],
                           sizes={"best_of_n": [1, 2, 4], "budget_forcing": [4, 8], "beam": [2]}, seeds=[0, 1],
                           max_tokens=8, options={"budget_forcing": {"max_answer_tokens": 4},
                                                  "beam": {"max_steps": 2, "max_step_tokens": 4}}, progress=False)
    rows = run_scaling(config, policy, problems, grade, extract=last_char)
    paths = write_outputs(rows, tmp_path / "out", config)

    with open(paths["csv"], newline="") as f:
        table = list(csv.DictReader(f))
    assert tuple(table[0]) == RESULT_COLUMNS
    assert len(table) == (3 + 2 + 1) * 2  # strategies x sizes x seeds
    assert {(r["strategy"], int(r["size"]), int(r["seed"])) for r in table} == {
        (s, b, seed) for s, bs in config.sizes.items() for b in bs for seed in (0, 1)}
    problems_table = read_csv(paths["problems_csv"])
    assert tuple(problems_table[0]) == PROBLEM_COLUMNS and len(problems_table) == len(table) * 3
    for row in read_csv(paths["csv"]):  # each row's totals are the sums over its problems
        mine = [o for o in problems_table if (o["strategy"], o["size"], o["seed"]) ==
                (row["strategy"], row["size"], row["seed"])]
        assert sorted(o["problem"] for o in mine) == [0, 1, 2]
        assert row["accuracy"] == pytest.approx(sum(o["solved"] for o in mine) / 3)
        assert row["generated_tokens"] == sum(o["generated_tokens"] for o in mine)
        assert row["flops"] == pytest.approx(sum(o["flops"] for o in mine))
    assert all(int(r["problems"]) == 3 for r in table)
    for name in ("accuracy_vs_tokens.png", "accuracy_vs_flops.png"):
        data = (tmp_path / "out" / name).read_bytes()
        assert len(data) > 1000 and data.startswith(PNG_MAGIC)

    summary = json.loads(paths["summary"].read_text())
    parsed = read_results(tmp_path / "out")
    for strategy, points in summary["curves"].items():
        assert curve(parsed, strategy) == [{**p, "x_mean": p["generated_tokens_per_problem_mean"]} for p in points]
        for point in points:
            assert point["accuracy_low"] <= point["accuracy_mean"] <= point["accuracy_high"]
            group = [r for r in parsed if r["strategy"] == strategy and r["size"] == point["size"]]
            assert len(group) == 2
            assert point["accuracy_mean"] == pytest.approx(sum(r["accuracy"] for r in group) / 2)
            assert point["generated_tokens_per_problem_mean"] == pytest.approx(
                sum(r["generated_tokens_per_problem"] for r in group) / 2)
            assert point["flops_per_problem_mean"] == pytest.approx(sum(r["flops_per_problem"] for r in group) / 2)
    best = max(p["accuracy_mean"] for p in summary["curves"]["best_of_n"])
    assert summary["best_of_n_best_accuracy"] == best
    assert summary["tokens_to_reach_best_of_n_best"]["best_of_n"] == compute_to_reach(parsed, "best_of_n", best)
    assert summary["flops_to_reach_best_of_n_best"]["best_of_n"] == compute_to_reach(parsed, "best_of_n", best,
                                                                                      "flops_per_problem")
    assert summary["config"]["sizes"] == config.sizes


# ---- compute to reach an accuracy, and accuracy intervals, on hand-made tables ----------------------------------
def _rows(strategy, points, problems=10):
    """Rows of (size, seed, accuracy, tokens per problem); the first round(accuracy x problems) problems solved."""
    return [{"strategy": strategy, "size": b, "seed": s, "problems": problems, "accuracy": a,
             "generated_tokens_per_problem": t, "flops_per_problem": 2.0 * t, "wall_seconds": 1.0,
             "outcomes": [{"problem": i, "solved": int(i < round(a * problems))} for i in range(problems)]}
            for b, s, a, t in points]


HAND = (_rows("bon", [(1, 0, 0.1, 90), (1, 1, 0.3, 110),      # mean 0.2 at 100 tokens
                      (4, 0, 0.6, 400), (4, 1, 0.6, 400),     # mean 0.6 at 400 tokens
                      (8, 0, 0.5, 800), (8, 1, 0.7, 800)])    # mean 0.6 at 800 tokens
        + _rows("bf", [(64, 0, 0.0, 70), (64, 1, 0.0, 70), (128, 0, 0.1, 140), (128, 1, 0.1, 140)]))


def test_compute_to_reach_on_a_hand_made_table():
    assert compute_to_reach(HAND, "bon", 0.2) == pytest.approx(100.0)  # the smallest size already reaches it
    assert compute_to_reach(HAND, "bon", 0.1) == pytest.approx(100.0)
    # 0.4 is halfway from 0.2 (100 tokens) to 0.6 (400 tokens): log-linear -> sqrt(100 * 400) = 200
    assert compute_to_reach(HAND, "bon", 0.4) == pytest.approx(200.0)
    assert compute_to_reach(HAND, "bon", 0.4, "flops_per_problem") == pytest.approx(400.0)  # FLOPs = 2 x tokens
    assert compute_to_reach(HAND, "bon", 0.6) == pytest.approx(400.0)  # the first size that reaches it
    assert compute_to_reach(HAND, "bon", 0.61) is None
    assert compute_to_reach(HAND, "bf", 0.2) is None
    assert compute_to_reach(HAND, "missing", 0.1) is None
    points = curve(HAND, "bon")
    assert [(p["size"], p["accuracy_mean"], p["accuracy_min"], p["accuracy_max"]) for p in points] == [
        (1, pytest.approx(0.2), 0.1, 0.3), (4, 0.6, 0.6, 0.6), (8, pytest.approx(0.6), 0.5, 0.7)]
    assert "best_of_n_best_accuracy" not in summarize(HAND)  # no best-of-N curve to compare against
    renamed = [{**r, "strategy": "best_of_n" if r["strategy"] == "bon" else r["strategy"]} for r in HAND]
    summary = summarize(renamed)
    assert summary["best_of_n_best_accuracy"] == pytest.approx(0.6)
    assert summary["tokens_to_reach_best_of_n_best"] == {"best_of_n": pytest.approx(400.0), "bf": None}
    assert summary["flops_to_reach_best_of_n_best"] == {"best_of_n": pytest.approx(800.0), "bf": None}


def test_accuracy_intervals_by_hand_and_by_plain_numpy():
    # every problem solved under every seed: every resample has accuracy 1 -> [1, 1]; none solved -> [0, 0]
    assert bootstrap_interval(np.ones((2, 5))) == (1.0, 1.0)
    assert bootstrap_interval(np.zeros((3, 4))) == (0.0, 0.0)
    # one problem solved under one of two seeds: every resample is that problem at rate 1/2 -> [.5, .5]
    assert bootstrap_interval(np.array([[1], [0]])) == (0.5, 0.5)
    # 2 seeds x 4 problems: solved rates over seeds per problem (1, 0, .5, 1), seed mean .625. The
    # interval, recomputed here with plain numpy: 2000 resamples of 4 indices drawn by default_rng(0),
    # each resample's mean rate, and the 2.5th and 97.5th percentiles of those means
    solved = np.array([[1, 0, 1, 1],
                       [1, 0, 0, 1]])
    rates = np.array([1.0, 0.0, 0.5, 1.0])
    means = rates[np.random.default_rng(0).integers(0, 4, size=(2000, 4))].mean(axis=1)
    expected = tuple(np.percentile(means, [2.5, 97.5]))
    assert bootstrap_interval(solved) == pytest.approx(expected)
    # a resample's mean is a multiple of 1/8 in [0, 1]; with 4 problems the interval is wide
    assert expected[0] <= 0.25 and expected[1] == 1.0
    rows = [{"strategy": "s", "size": 1, "seed": seed, "problems": 4, "accuracy": row.mean(),
             "generated_tokens_per_problem": 1.0, "flops_per_problem": 1.0, "wall_seconds": 0.0,
             "outcomes": [{"problem": i, "solved": int(v)} for i, v in enumerate(row)][::-1]}  # any order
            for seed, row in enumerate(solved)]
    (point,) = curve(rows, "s")
    assert (point["accuracy_mean"], point["accuracy_low"], point["accuracy_high"]) == (
        0.625, pytest.approx(expected[0]), pytest.approx(expected[1]))
    with pytest.raises(ValueError, match="rows without per-problem outcomes"):
        curve([{k: v for k, v in r.items() if k != "outcomes"} for r in rows], "s")


def test_config_rejects_bad_values_with_the_allowed_ones():
    with pytest.raises(ValueError, match="strategies must be a non-empty list of .*'best_of_n'.*got \\['bogus'\\]"):
        ScalingConfig(strategies=["bogus"])
    with pytest.raises(ValueError, match="sizes given for strategies not run: \\['beam'\\]"):
        ScalingConfig(sizes={"beam": [2]})
    with pytest.raises(ValueError, match="sizes for best_of_n must be integers >= 1; got \\[0, 2\\]"):
        ScalingConfig(sizes={"best_of_n": [0, 2]})
    with pytest.raises(ValueError, match="BestOfNConfig has no option\\(s\\) \\['nope'\\]"):
        ScalingConfig(options={"best_of_n": {"nope": 1}})
    with pytest.raises(ValueError, match="BeamConfig.num_beams must be a multiple of beam_width=4; got 6"):
        ScalingConfig(strategies=["beam"], sizes={"beam": [4, 6, 8]}, options={"beam": {"beam_width": 4}})
    with pytest.raises(ValueError, match="needs a scorer"):
        ScalingConfig(final="best")
    beam = ScalingConfig(strategies=["beam"], sizes={"beam": [2, 6, 8]})
    assert [beam.strategy_config("beam", b)["beam_width"] for b in (2, 6, 8)] == [2, 2, 4]
    forcing = ScalingConfig(strategies=["budget_forcing"], forcing_min_fraction=0.25)
    assert forcing.strategy_config("budget_forcing", 128)["min_thinking_tokens"] == 32


# ---- the command line -----------------------------------------------------------------------------------------
def _cli(capsys, monkeypatch, *args: str) -> subprocess.CompletedProcess:
    """`scripts/scaling.py args` by its main(argv) in this process (no process of its own to import torch
    again): exit status, stdout, stderr. An exception other than the parser's exit fails the test, as a
    traceback would. COLUMNS=80 gives argparse the width it has in a process whose output is a pipe."""
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.chdir(REPO)
    capsys.readouterr()
    try:
        code = _script().main(list(args))
    except SystemExit as done:
        code = done.code
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess([str(SCRIPT), *args], 0 if code is None else code, out, err)


def test_cli_help_all_lists_every_option(capsys, monkeypatch):
    result = _cli(capsys, monkeypatch, "--help-all")
    assert result.returncode == 0, result.stderr
    from dataclasses import fields

    skipped = {"sizes", "options", "progress", "task_options"}
    for name in [f.name for f in fields(ScalingConfig) if f.name not in skipped] + [
            "out", "sizes", "size", "set", "band", "quiet", "question_field", "answer_field", "answer_kind"]:
        assert f"--{name} " in result.stdout or f"--{name}\n" in result.stdout, name
    assert "best_of_n: n, default 1,2,4,8,16" in result.stdout


def test_cli_errors_are_one_clear_line(tmp_path, tiny_model_dir, capsys, monkeypatch):
    missing = _cli(capsys, monkeypatch, "--model", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o"))
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert "no model folder at" in missing.stderr and "nowhere" in missing.stderr
    bogus = _cli(capsys, monkeypatch, "--model", str(tiny_model_dir), "--strategies", "best_of_n", "bogus", "--out",
                 str(tmp_path / "o"))
    assert bogus.returncode == 2 and "Traceback" not in bogus.stderr
    assert "strategies must be a non-empty list of" in bogus.stderr and "'bogus'" in bogus.stderr
    assert not (tmp_path / "o").exists()


def _script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("scaling_script", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_cli_smoke_run_on_a_task_file(tiny_model_dir, tmp_path, capsys):
    data = tmp_path / "toy.jsonl"
    lines = [json.dumps({"question": q, "answer": f"#### {a}"}) for q, a in [("1+1", 2), ("2+2", 4)]]
    data.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    assert _script().main(["--model", str(tiny_model_dir), "--task", "gsm8k", "--task_path", str(data), "--offset", "1",
                           "--size", "best_of_n=1,2", "--seeds", "0", "3", "--max_tokens", "4", "--band", "std",
                           "--quiet", "--out", str(out)]) == 0
    rows = read_csv(out / "results.csv")
    assert [(r["size"], r["seed"], r["problems"]) for r in rows] == [(1, 0, 1), (2, 0, 1), (1, 3, 1), (2, 3, 1)]
    assert len(read_csv(out / "problems.csv")) == 4
    assert json.loads((out / "summary.json").read_text())["config"]["offset"] == 1
    assert (out / "accuracy_vs_flops.png").read_bytes().startswith(PNG_MAGIC)
    assert "best_of_n       2" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["--task_path", "{tmp}/gone.jsonl"], "does not exist"),
    (["--size", "best_of_n=1,x"], "--size expects STRATEGY=S1,S2,... with integer sizes; got 'best_of_n=1,x'"),
    (["--set", "n=4"], "--set expects STRATEGY.NAME=VALUE; got 'n=4'"),
    (["--set", "best_of_n.bogus=1"], "BestOfNConfig has no option(s) ['bogus']"),
    (["--limit", "2", "--offset", "5000"], "no problems left with offset=5000, limit=2 (the task has 1319)"),
    (["--scorer", "{tmp}/no-critic"], "scorer must be 'mc', 'confidence' or a critic / PRM folder with a config.json"),
    (["--set", "beam.beam_width=2"], "options given for strategies not run: ['beam']"),
])
def test_cli_rejects_bad_options_before_loading_a_model(tiny_model_dir, tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        _script().main(["--model", str(tiny_model_dir), "--out", str(tmp_path / "o"),
                     *[a.format(tmp=tmp_path) for a in args]])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_combine_joins_problem_slices_and_stacks_strategies(tiny_model_dir, tmp_path, monkeypatch):
    """scripts/combine_scaling.py: two slices of one strategy become one row over all their problems."""
    from planner.policy import load_policy
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    from combine_scaling import combine, main

    policy = load_policy(tiny_model_dir, backend="hf", threads=1)
    problems = [Problem(f"t{i}", q, ref, "toy") for i, (q, ref) in enumerate([("ab", "a"), ("cd", "e"), ("x", "1")])]
    slices = {}
    for offset, limit in ((0, 2), (2, 1)):
        config = ScalingConfig(model=str(tiny_model_dir), strategies=["best_of_n"], sizes={"best_of_n": [1, 2]},
                               seeds=[0], max_tokens=6, offset=offset, limit=limit, progress=False)
        rows = run_scaling(config, policy, problems[offset:offset + limit], grade, extract=last_char)
        write_outputs(rows, tmp_path / f"slice{offset}", config)
        slices[offset] = rows
    combined = combine([tmp_path / "slice0", tmp_path / "slice2"])
    assert [(r["strategy"], r["size"], r["problems"]) for r in combined] == [("best_of_n", 1, 3), ("best_of_n", 2, 3)]
    for row, first, second in zip(combined, slices[0], slices[2]):
        assert sorted(o["problem"] for o in row["outcomes"]) == [0, 1, 2]
        assert row["generated_tokens"] == first["generated_tokens"] + second["generated_tokens"]
        assert row["accuracy"] == pytest.approx((2 * first["accuracy"] + second["accuracy"]) / 3)
        assert row["flops_per_problem"] == pytest.approx((first["flops"] + second["flops"]) / 3)
    with pytest.raises(ValueError, match="repeats problems"):
        combine([tmp_path / "slice0", tmp_path / "slice0"])
    assert main(["--runs", str(tmp_path / "slice0"), str(tmp_path / "slice2"), "--out", str(tmp_path / "all"),
                 "--rename", "best_of_n=bon"]) == 0
    assert {r["strategy"] for r in read_results(tmp_path / "all")} == {"bon"}
    assert (tmp_path / "all" / "accuracy_vs_flops.png").is_file()
    # one strategy over the same problems twice (say, under two scorers): renamed per run, two curves
    twice = combine([tmp_path / "slice0", tmp_path / "all"], {"all/bon": "bon_other", "slice0/bon": "never"})
    assert sorted({(r["strategy"], r["problems"]) for r in twice}) == [("best_of_n", 2), ("bon_other", 3)]
