"""Grading a scorer the way search uses it: hand-built cases with metrics computed by hand, the free
confidence scorer, and the collection of sibling sets from a scripted policy."""

from __future__ import annotations

import math

import pytest

from planner.scorers import ConfidenceScorer
from planner.value_eval import SiblingSet, ValueCases, collect_cases, grade

# prefixes are token ids; the prompt is [1, 2] for both problems
A, B, C, D, E, F = [1, 2, 10], [1, 2, 11], [1, 2, 10, 12], [1, 2, 10, 13], [1, 2, 14], [1, 2, 15, 16]
S00, S01, S10, S11 = [1, 2, 20], [1, 2, 21], [1, 2, 22], [1, 2, 23]
VALUES = {tuple(A): .9, tuple(B): .2, tuple(C): .5, tuple(D): .6, tuple(E): .7, tuple(F): .4,
          tuple(S00): .3, tuple(S01): .8, tuple(S10): .5, tuple(S11): .5}


def cases() -> ValueCases:
    return ValueCases(
        prompt_lengths=[2, 2],
        sets=[SiblingSet(0, 0, [A, B], [[-0.1], [-1.0]], [False, False], [1.0, 0.0]),
              SiblingSet(0, 1, [C, D], [[-0.2], [-0.3]], [True, True], [1.0, 1.0]),
              SiblingSet(1, 0, [E, F], [[-0.5], [-0.1, -0.3]], [False, False], [0.0, 1.0])],
        samples=[[S00, S01], [S10, S11]], sample_logprobs=[[[-0.1], [-2.0]], [[-0.4], [-0.4]]],
        sample_correct=[[1.0, 0.0], [0.0, 0.0]], sample_answers=[["7", "8"], ["1", "1"]])


def test_grade_by_hand(table_scorer):
    class Table(table_scorer):
        def _score(self, prefixes, prompt_len, finished):
            return [self.values[tuple(p)] for p in prefixes]

    report = grade(Table(VALUES, policy=None, num_parameters=10), cases())
    # mixed pairs: (A > B) right, (F > E) wrong (.4 < .7)
    assert report["sibling_accuracy"] == 0.5 and report["mixed_pairs"] == 2
    # depth 0: positives .9 (A), .4 (F); negatives .2 (B), .7 (E): 3 of 4 pairs ordered right; depth 1: one class
    assert report["step_auc_by_depth"] == {"0": 0.75} and report["step_auc"] == 0.75
    # reranking: problem 0 picks S01 (.8, wrong), problem 1 the first .5 (S10, wrong)
    assert report["rerank_accuracy"] == 0.0
    # majority: problem 0 ties 7 / 8, the first group wins (S00, right); problem 1 all "1" (wrong)
    assert report["majority_accuracy"] == 0.5 and report["random_pick_accuracy"] == 0.25
    # ECE over the six candidates, one per bin: |.2-0| + |.4-1| + |.5-1| + |.6-1| + |.7-0| + |.9-1|, / 6
    assert report["ece"] == pytest.approx(2.5 / 6)
    # FLOPs: 2 x 10 parameters x the tokens scored (3+3+4+4+3+4 candidates, 4 x 3 samples), per prefix (10)
    assert report["flops_per_prefix"] == pytest.approx(2 * 10 * (21 + 12) / 10)
    low, high = report["sibling_accuracy_interval"]
    assert 0.0 <= low <= 0.5 <= high <= 1.0


def test_a_rollout_scorer_is_charged_the_policy_flops_of_its_rollouts(table_scorer):
    from planner.policy.types import ComputeStats

    class Rollouts(table_scorer):  # spends like a Monte-Carlo scorer: per prefix 5 prompt tokens, 2 cached, 7 generated
        def _score(self, prefixes, prompt_len, finished):
            self.policy.stats += ComputeStats(prompt_tokens=5 * len(prefixes), cached_prompt_tokens=2 * len(prefixes),
                                              generated_tokens=7 * len(prefixes))
            return [VALUES[tuple(p)] for p in prefixes]

    class Policy:
        stats, num_parameters = ComputeStats(prompt_tokens=100, generated_tokens=100), 3  # spent before: not charged

    report = grade(Rollouts(VALUES, policy=Policy()), cases())
    assert report["flops_per_prefix"] == pytest.approx(2 * 3 * (5 - 2 + 7))


def test_the_confidence_scorer_reads_the_sampled_logprobs_and_costs_nothing():
    scorer = ConfidenceScorer()
    values = scorer.score([A, F], step_logprobs=[[-0.1], [-0.1, -0.3]])
    assert values == pytest.approx([math.exp(-0.1), math.exp(-0.2)])
    report = grade(ConfidenceScorer(), cases())
    # siblings: A exp(-.1) > B exp(-1) right; F exp(-.2) > E exp(-.5) right
    assert report["sibling_accuracy"] == 1.0 and report["flops_per_prefix"] == 0.0
    with pytest.raises(ValueError, match="pass step_logprobs"):
        scorer.score([A])


def test_the_least_token_confidence_sees_one_slip_that_the_mean_dilutes():
    # a step of four sure tokens and one slip against a step of two middling tokens
    slipped, middling = [-0.01, -0.01, -0.01, -0.01, -2.0], [-0.5, -0.5]
    mean_values = ConfidenceScorer().score([A, F], step_logprobs=[slipped, middling])
    min_values = ConfidenceScorer(reduce="min").score([A, F], step_logprobs=[slipped, middling])
    assert mean_values == pytest.approx([math.exp(-2.04 / 5), math.exp(-0.5)])  # 0.665 > 0.607
    assert min_values == pytest.approx([math.exp(-2.0), math.exp(-0.5)])  # 0.135 < 0.607: order flips
    assert ConfidenceScorer(reduce="min").score([A], step_logprobs=[[]]) == [0.5]
    with pytest.raises(ValueError, match="reduce must be one of"):
        ConfidenceScorer(reduce="max")


def test_collect_cases_walks_down_the_first_candidate(scripted_policy):
    table = {"Q\n": [("a\n", -0.1, "step"), ("b\n", -1.0, "step")],
             "Q\na\n": [("c", -0.2, "stop"), ("d", -0.3, "stop")]}
    policy = scripted_policy(table)

    class Problem:
        question = "Q"

    oracle = lambda problem, response: float("b" not in response and "d" not in response)  # noqa: E731
    found = collect_cases(policy, [Problem()], oracle, reward=lambda text, p: float("a" in text),
                          extract=lambda text: text.strip() or None, candidates=2, samples=2, max_steps=4)
    assert [(s.depth, s.labels, s.finished) for s in found.sets] == [(0, [1.0, 0.0], [False, False]),
                                                                     (1, [1.0, 0.0], [True, True])]
    assert [policy.decode(p[found.prompt_lengths[0]:]) for p in found.sets[1].prefixes] == ["a\nc", "a\nd"]
    assert found.sets[0].step_logprobs == [[-0.1, -0.1], [-1.0, -1.0]]
    assert found.sample_correct == [[1.0, 0.0]]  # the two samples draw "a\n" and "b\n" again
