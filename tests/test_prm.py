"""The process reward model (rl/prm.py) and the self-correction traces of the cold start."""

from __future__ import annotations

import math
import random

import pytest
import torch

from rl.prm import PRMConfig, ProcessRewardModel, StepExample
from verifiers.arithmetic import (REDO_PASSES, STEP_DELIMITER, THINK_CLOSE, THINK_OPEN, WAIT, check_steps,
                                  make_problem, self_correction_solution)


def test_a_self_correction_trace_redoes_whole_passes_after_wait():
    problem = make_problem(347, "+", 589)
    gold = ["7+9=16", "4+8+1=13", "3+5+1=9"]  # the written algorithm by hand; answer 936
    earlier_counts, slipped_passes, clean_passes = set(), 0, 0
    for seed in range(60):
        trace = self_correction_solution(problem, random.Random(seed))
        assert trace.startswith(THINK_OPEN) and trace.endswith(THINK_CLOSE + "936")
        *earlier, last = trace[len(THINK_OPEN):].split(WAIT + STEP_DELIMITER)
        assert last == "".join(s + STEP_DELIMITER for s in gold) + THINK_CLOSE + "936"
        assert 1 <= len(earlier) <= REDO_PASSES
        earlier_counts.add(len(earlier))
        for one_pass in earlier:
            lines = one_pass.split(STEP_DELIMITER)
            assert lines[-1] == "" and len(lines[:-1]) == len(gold)  # a whole pass, each step ended
            wrong = [(line, right) for line, right in zip(lines, gold) if line != right]
            assert len(wrong) <= 1
            for line, right in wrong:  # the same columns, another result
                assert line.rsplit("=", 1)[0] == right.rsplit("=", 1)[0] and line != right
                assert check_steps(problem, THINK_OPEN + one_pass).count(False) == 1
            slipped_passes += bool(wrong)
            clean_passes += not wrong
    assert earlier_counts == {1, 2, 3} and slipped_passes > 10 and clean_passes > 10


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory):
    from planner.policy.local_models import build_tiny_llama
    return build_tiny_llama(tmp_path_factory.mktemp("prm-tiny"), init_std=0.1, seed=2)


def examples() -> list[StepExample]:
    """Sibling pairs whose right step is 'a' and wrong step 'b', after prefixes of several lengths."""
    out = []
    for g in range(12):
        stem = [40 + (g % 5)] * (1 + g % 3)
        out.append(StepExample(stem + [60, 61], [-0.2, -0.3], 1.0, g))
        out.append(StepExample(stem + [62, 61], [-0.9, -0.3], 0.0, g))
    return out


def test_a_fresh_prm_says_one_half_and_reads_the_confidence(policy_dir):
    prm = ProcessRewardModel.from_policy(policy_dir)
    values = prm.score([[40, 60, 61]], step_logprobs=[[-0.2, -0.3]])
    assert values == pytest.approx([0.5])  # head at zero, confidence weights at zero
    with torch.no_grad():
        prm.confidence_weights.copy_(torch.tensor([1.0, 2.0, 0.5]))
    # logit = 0 (head) + 1 * mean(-0.2, -0.3) + 2 * min(...) + 0.5 = -0.25 - 0.6 + 0.5
    assert prm.score([[40, 60, 61]], step_logprobs=[[-0.2, -0.3]]) == pytest.approx([1 / (1 + math.exp(0.35))])


@pytest.mark.parametrize("read", ["last", "mean", "min"])
def test_the_prm_learns_to_rank_siblings_and_its_folder_reproduces_its_values(policy_dir, tmp_path, read):
    prm = ProcessRewardModel.from_policy(policy_dir, PRMConfig(read=read, confidence=False, epochs=30, lr=3e-3))
    losses = prm.fit(examples())
    assert losses[-1] < 0.5 * losses[0]
    data = examples()
    values = prm.score([e.prefix for e in data], step_logprobs=[e.step_logprobs for e in data])
    assert all(values[k] > values[k + 1] for k in range(0, len(data), 2))  # every right sibling above its wrong one
    prm.save_pretrained(tmp_path / "prm")
    again = ProcessRewardModel.load(tmp_path / "prm")
    assert again.config == prm.config
    assert again.score([e.prefix for e in data], step_logprobs=[e.step_logprobs for e in data]) == pytest.approx(
        values, abs=1e-6)


def test_prm_bad_input(policy_dir, tmp_path):
    with pytest.raises(ValueError, match="read must be one of"):
        PRMConfig(read="max")
    with pytest.raises(FileNotFoundError, match="no process reward model"):
        ProcessRewardModel.load(tmp_path)
    with pytest.raises(ValueError, match="at least one labelled step"):
        ProcessRewardModel.from_policy(policy_dir).fit([])
