"""The comparison's pieces: reranking picks by hand, the intervals on hand-made arrays, and a tiny end-to-end
run of scripts/compare_trainers.py (every arm, CSV, PNG, summary)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lab.comparison_report import difference_interval, seed_problem_interval
from lab.reranking import rerank_samples
from planner.policy.types import Sample
from planner.scorers import Scorer
from verifiers.arithmetic import VERIFIER, make_problem

REPO = Path(__file__).resolve().parents[1]


class ByIds(Scorer):
    def __init__(self, values):
        super().__init__()
        self.values = values

    def _score(self, prefixes, prompt_len, finished):
        return [self.values[tuple(p[prompt_len:])] for p in prefixes]


def test_rerank_picks_by_hand():
    # answers 7 (right), 8, 8, 7 scored 0.2, 0.9, 0.1, 0.3.
    # N=4: majority ties 2-2, the first group (7) wins, its best-scored member is sample 3: right;
    #      best score is sample 1 (8): wrong; weighted: 7 has 0.5, 8 has 1.0: wrong.
    # N=2: majority ties 1-1, 7 first: right; best and weighted pick sample 1 (8): wrong.
    problem = make_problem(3, "+", 4)
    texts, scores = ["</think>7", "</think>8", "</think>8 ", "</think>7 "], [0.2, 0.9, 0.1, 0.3]
    group = [Sample(token_ids=[10 + k], logprobs=[-0.1], text=t, finish_reason="stop") for k, t in enumerate(texts)]
    scorer = ByIds({(10 + k,): s for k, s in enumerate(scores)})
    out = rerank_samples([group], [problem], scorer, VERIFIER.reward, VERIFIER.extract, VERIFIER.equivalent,
                         prompts=[[1, 2]], sizes=[2, 4])
    assert {k: v.tolist() for k, v in out.items()} == {
        ("pass@1", 2): [0.5], ("pass@N", 2): [1.0], ("majority", 2): [1.0], ("reward_model_best", 2): [0.0],
        ("reward_model_weighted", 2): [0.0],
        ("pass@1", 4): [0.5], ("pass@N", 4): [1.0], ("majority", 4): [1.0], ("reward_model_best", 4): [0.0],
        ("reward_model_weighted", 4): [0.0]}


def test_intervals_on_hand_made_arrays():
    assert seed_problem_interval(np.full((3, 50), 0.25)) == (0.25, 0.25)
    assert difference_interval(np.ones((3, 40)), np.zeros((2, 40))) == (1.0, 1.0)
    # two seeds that disagree completely: over problems alone the seed mean is 0.5 everywhere (no width);
    # resampling the seeds too gives all-0, mixed and all-1 draws
    split = np.array([[1.0] * 30, [0.0] * 30])
    from planner.scaling_report import bootstrap_interval
    assert bootstrap_interval(split) == (0.5, 0.5)
    assert seed_problem_interval(split) == (0.0, 1.0)


@pytest.mark.slow
def test_tiny_comparison_end_to_end(tmp_path):
    from planner.policy.local_models import build_tiny_llama
    from verifiers.arithmetic import ARITHMETIC_ALPHABET

    model = build_tiny_llama(tmp_path / "cold", alphabet=ARITHMETIC_ALPHABET, seed=0)
    out = tmp_path / "cmp"
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "compare_trainers.py"), "--tiny", "--backend", "hf",
                             "--cold_start_dir", str(model), "--output_dir", str(out), "--reward_model", "false"],
                            capture_output=True, text=True, timeout=900, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["arms"]) == {"dpo", "rs_sft", "grpo"}
    for arm, s in summary["arms"].items():
        assert s["generated_tokens"] >= 2500 and s["flops"] > 0, arm
        assert (out / "runs" / f"{arm}_seed0" / "trees.jsonl").stat().st_size > 0
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    header = (out / "curves.csv").read_text().splitlines()[0]
    assert header.startswith("arm,seed,iteration,generated_tokens") and "pass@1" in header
    assert "| grpo |" in result.stdout



@pytest.mark.slow
def test_tiny_rl_variant_arms_end_to_end(tmp_path):
    """The RL variants run through the same comparison: flat GRPO grows best-of-N groups (every response
    a child of the root) where TreeRL and PPO grow MCTS trees, and PPO's FLOPs carry its critic: per
    parameter, 2 per generated or computed prompt token and 6 (learner) + 8 (critic) per trained token."""
    from planner.policy.local_models import build_tiny_llama
    from transformers import AutoModelForCausalLM

    from lab.comparison import ComparisonConfig
    from verifiers.arithmetic import ARITHMETIC_ALPHABET

    model = build_tiny_llama(tmp_path / "cold", alphabet=ARITHMETIC_ALPHABET, seed=0)
    out = tmp_path / "cmp"
    arms = ["grpo_flat", "treerl", "ppo"]
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "compare_trainers.py"), "--tiny", "--backend", "hf",
                             "--cold_start_dir", str(model), "--output_dir", str(out), "--reward_model", "false",
                             "--arms", *arms], capture_output=True, text=True, timeout=900, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    assert set(json.loads((out / "summary.json").read_text())["arms"]) == set(arms)

    params = AutoModelForCausalLM.from_pretrained(model).num_parameters()
    rows = [r for r in csv.DictReader((out / "curves.csv").open()) if float(r["trained_tokens"]) > 0]
    assert {r["arm"] for r in rows} == set(arms)
    for row in rows:
        per_trained = 6 + (8 if row["arm"] == "ppo" else 0)
        expected = params * (2 * (float(row["generated_tokens"]) + float(row["computed_prompt_tokens"]))
                             + per_trained * float(row["trained_tokens"]))
        assert float(row["flops"]) == pytest.approx(expected, rel=1e-9), row["arm"]

    def trees(arm):
        lines = (out / "runs" / f"{arm}_seed0" / "trees.jsonl").read_text().splitlines()
        return [json.loads(line)["tree"] for line in lines]
    for tree in trees("grpo_flat"):
        assert tree["meta"]["strategy"] == "best_of_n"
        assert len(tree["nodes"][0]["children"]) == ComparisonConfig().flat_samples
        assert all(node["depth"] <= 1 for node in tree["nodes"])
    assert {tree["meta"]["strategy"] for tree in trees("treerl") + trees("ppo")} == {"mcts"}
    assert max(node["depth"] for tree in trees("treerl") for node in tree["nodes"]) > 1
