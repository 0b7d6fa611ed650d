"""Every strategy on real backends (transformers and vLLM) with the tiny Llama: it runs, and the same
seed on the same backend gives the same tree. vLLM is the session's shared engine (conftest.py: one
takes ~30 s to start)."""

from __future__ import annotations

import pytest

from planner.policy import load_policy
from planner.solve import solve
from planner.strategies import STRATEGIES

SMALL = {
    "best_of_n": dict(n=3, max_tokens=12),
    "beam": dict(num_beams=4, beam_width=2, max_step_tokens=6, max_steps=2),
    "dvts": dict(num_beams=4, beam_width=2, max_step_tokens=6, max_steps=2),
    "mcts": dict(num_simulations=4, leaves_per_round=2, num_candidates=2, max_step_tokens=6, max_steps=2),
    "budget_forcing": dict(n=2, min_thinking_tokens=8, max_thinking_tokens=12, max_answer_tokens=4,
                           end_of_thinking="\n"),
}


def first_digit(text: str) -> str | None:
    digits = [c for c in text if c.isdigit()]
    return digits[0] if digits else None


@pytest.fixture(scope="module", params=["hf", pytest.param("vllm", marks=pytest.mark.vllm)])
def policy(request, tiny_model_dir):
    if request.param == "vllm":
        yield request.getfixturevalue("tiny_vllm")
        return
    engine = load_policy(tiny_model_dir, backend="hf", seed=0)
    yield engine
    engine.close()


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_strategy_runs_and_repeats_its_tree(policy, name):
    one = solve("Add 2 and 3.", policy, name, seed=7, temperature=1.0, extract=first_digit, **SMALL[name])
    two = solve("Add 2 and 3.", policy, name, seed=7, temperature=1.0, extract=first_digit, **SMALL[name])
    assert one.tree.to_dict() == two.tree.to_dict()
    assert (one.answer, one.text, one.leaf) == (two.answer, two.text, two.leaf)
    tree = one.tree
    assert len(tree) > 1 and one.compute.generated_tokens > 0 and one.compute.flops > 0
    # token ids flow from the engine into the tree: each child's ids extend its parent's prefix, and
    # each node's text is the decoding of its ids
    for i in range(1, len(tree)):
        assert tree.prefix_ids(i) == tree.prefix_ids(tree[i].parent) + tree[i].token_ids
        assert tree[i].text == policy.decode(tree[i].token_ids)
        assert len(tree[i].logprobs) == len(tree[i].token_ids)
    assert one.text == tree.response_text(one.leaf)
    different = solve("Add 2 and 3.", policy, name, seed=8, temperature=1.0, extract=first_digit, **SMALL[name])
    assert different.tree.to_dict() != one.tree.to_dict()


def test_beam_with_a_value_model_counts_scorer_flops(tiny_model_dir):
    import torch
    from transformers import AutoModelForTokenClassification

    from planner.scorers import ModelScorer

    torch.manual_seed(0)
    scorer = ModelScorer(AutoModelForTokenClassification.from_pretrained(tiny_model_dir, num_labels=1))
    policy = load_policy(tiny_model_dir, backend="hf", seed=0)
    solution = solve("Add 2 and 3.", policy, "beam", scorer=scorer, seed=1, extract=first_digit, **SMALL["beam"])
    compute = solution.compute
    assert compute.scorer_calls == 2 and compute.scorer_tokens > 0  # one scorer call per round
    assert compute.scorer_flops == 2 * scorer.num_parameters * compute.scorer_tokens
    assert compute.flops == compute.policy_flops + compute.scorer_flops
    scored = [i for i in range(1, len(solution.tree)) if solution.tree[i].score is not None]
    assert len(scored) == len(solution.tree) - 1
