"""Compute accounting (tokens, cache hits, FLOPs) and budgets that stop a search in time."""

from __future__ import annotations

import random
from collections import defaultdict

import pytest

from planner.budget import Budget, ComputeMeter, as_budget
from planner.policy.types import SamplingParams
from planner.strategies import STRATEGIES, make_config


class Endless(dict):
    """Every prefix continues with the same cycle of steps, so a search can go on as long as allowed."""

    def __missing__(self, key):
        return [("ab\n\n", -0.5, "step"), ("c\n\n", -0.7, "step"), ("d", -0.2, "stop"), ("efg\n\n", -0.9, "step")]


def test_meter_counts_tokens_cache_and_flops(scripted_policy, table_scorer):
    policy = scripted_policy(Endless(), cached_per_call=1)
    scorer = table_scorer(defaultdict(lambda: 0.5), policy, num_parameters=50)
    meter = ComputeMeter(policy, scorer)
    policy.generate([policy.encode("Qx")], SamplingParams(n=3, max_tokens=8))  # 4 + 3 + 2 generated
    scorer.score([[7, 8, 9]])
    record = meter.record()
    assert (record.generated_tokens, record.prompt_tokens, record.cached_prompt_tokens) == (9, 2, 1)
    assert (record.policy_calls, record.scorer_calls, record.scorer_tokens) == (1, 1, 3)
    # policy: 2 x 1000 params x (2 prompt - 1 cached + 9 generated); scorer: 2 x 50 x 3 tokens
    assert record.policy_flops == 2 * 1000 * 10 and record.scorer_flops == 2 * 50 * 3
    assert record.flops == 20_300 and record.to_dict()["flops"] == 20_300


def test_budget_values():
    assert as_budget(100) == Budget(generated_tokens=100) and as_budget(None) is None
    with pytest.raises(ValueError, match="generated_tokens must be an integer >= 1 or None; got 0"):
        Budget(generated_tokens=0)
    with pytest.raises(TypeError, match="budget must be"):
        as_budget("100")


# settings and the most tokens one expansion round can generate (the documented overshoot bound)
ROUNDS = {
    "best_of_n": (dict(n=64, batch_size=4, max_tokens=4), 4 * 4),
    "beam": (dict(num_beams=4, beam_width=2, max_step_tokens=4, max_steps=40), 4 * 4),
    "dvts": (dict(num_beams=4, beam_width=2, max_step_tokens=4, max_steps=40), 4 * 4),
    "mcts": (dict(num_simulations=400, leaves_per_round=3, num_candidates=2, max_step_tokens=4, max_steps=40),
             3 * 2 * 4),
    "budget_forcing": (dict(n=3, min_thinking_tokens=150, max_thinking_tokens=200, max_answer_tokens=4), 3 * 200),
}


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_twenty_random_budgets_are_never_overshot_by_more_than_one_round(scripted_policy, table_scorer, name):
    settings, one_round = ROUNDS[name]
    rng = random.Random(name)
    for budget in [rng.randint(1, 120) for _ in range(20)]:
        policy = scripted_policy(Endless())
        scorer = table_scorer(defaultdict(lambda: 0.5), policy)
        result = STRATEGIES[name](policy.encode("Q"), policy, scorer, Budget(generated_tokens=budget),
                                  make_config(name, extract=lambda text: None, **settings), seed=0)
        spent = result.compute.generated_tokens
        assert budget <= spent <= budget + one_round, (name, budget, spent)


def test_flop_budget_stops_the_search(scripted_policy, table_scorer):
    policy = scripted_policy(Endless())
    scorer = table_scorer(defaultdict(lambda: 0.5), policy, num_parameters=10)
    config = make_config("mcts", num_simulations=400, leaves_per_round=2, num_candidates=2, max_step_tokens=4,
                         max_steps=40, extract=lambda text: None)
    result = STRATEGIES["mcts"](policy.encode("Q"), policy, scorer, Budget(flops=1e6), config, seed=0)
    # one round: at most 4 samples x 4 tokens plus their prompts, each prompt at most 1 + 40 x 4 tokens
    one_round = 2 * 1000 * (2 * 161 + 16) + 2 * 10 * 4 * 165
    assert 1e6 <= result.compute.flops <= 1e6 + one_round
    assert result.compute.scorer_flops == 2 * 10 * result.compute.scorer_tokens
