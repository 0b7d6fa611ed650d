"""Best-of-N voting, budget forcing, and token-id flow, on the scripted policy."""

from __future__ import annotations

import re
from collections import defaultdict

import pytest

from planner.strategies import CONFIGS, STRATEGIES, BestOfNConfig, BudgetForcingConfig, make_config
from planner.strategies.best_of_n import best_of_n
from planner.strategies.budget_forcing import budget_forcing
from planner.tree import ROOT


def last_number(text: str) -> str | None:
    found = re.findall(r"\d+", text)
    return found[-1] if found else None


VOTE_TABLE = {"Q": [("x=1", -0.1, "stop"), ("x=2", -0.1, "stop"), ("x=2", -0.1, "stop"), ("x=3", -0.1, "stop"),
                    ("x=1", -0.1, "stop")]}
# scores in sample order: x=1 .5, x=2 .4, x=2 .45, x=3 .75, x=1 .1


@pytest.mark.parametrize("final, answer, leaf", [
    ("majority", "1", 1),  # groups 1:{#1,#5} 2:{#2,#3} 3:{#4}: 1 and 2 tie at two votes, 1 was seen first
    ("weighted", "2", 3),  # 1: .5+.1=.6, 2: .4+.45=.85, 3: .75 -> 2 (its best member: #3 with .45)
    ("best", "3", 4),      # the single highest score is .75
])
def test_best_of_n_votes(scripted_policy, final, answer, leaf):
    from planner.scorers import Scorer

    class ByPosition(Scorer):
        def _score(self, prefixes, prompt_len, finished):
            return [.5, .4, .45, .75, .1][:len(prefixes)]

    policy = scripted_policy(VOTE_TABLE)
    config = BestOfNConfig(n=5, final=final, batch_size=2, extract=last_number)
    result = best_of_n(policy.encode("Q"), policy, ByPosition(), None, config, seed=0)
    assert (result.answer, result.leaf) == (answer, leaf)
    assert result.compute.policy_calls == 3  # batches of 2, 2, 1
    assert len(result.tree[ROOT].children) == 5 and all(result.tree[c].terminal for c in result.tree[ROOT].children)


def test_best_of_n_needs_a_scorer_to_weigh():
    with pytest.raises(ValueError, match="final must be one of \\['best', 'majority', 'weighted'\\]; got 'mode'"):
        BestOfNConfig(final="mode")
    with pytest.raises(ValueError, match="needs a scorer"):
        best_of_n([1], None, None, None, BestOfNConfig(final="best"), 0)


FORCING_TABLE = {
    # thread 0 ends its thinking after 2 tokens (< min 10): the end is dropped, "Wait" appended
    "Q": [("ab</think>", -0.3, "step"), ("abcdefghijklmnopqrstuvwxyz", -0.3, "step")],
    "QabWait": [("cdef</think>", -0.3, "step")],  # 2 + 4 + 4 = 10 >= min: accepted, on to the answer
    "QabWaitcdef</think>": [("42", -0.1, "stop")],
    # thread 1 thinks without end and hits max 20: "</think>\nFinal Answer:" is appended
    "Qabcdefghijklmnopqrst</think>\nFinal Answer:": [(" 7", -0.1, "stop")],
}


def test_budget_forcing_waits_below_minimum_and_closes_at_maximum(scripted_policy):
    policy = scripted_policy(FORCING_TABLE)
    config = BudgetForcingConfig(n=2, min_thinking_tokens=10, max_thinking_tokens=20, max_answer_tokens=8,
                                 extract=last_number)
    result = budget_forcing(policy.encode("Q"), policy, None, None, config, seed=0)
    tree = result.tree
    chains = [[(tree[i].text, len(tree[i].token_ids), tree[i].forced) for i in t["nodes"]] for t in tree.meta["forcing"]]
    assert chains[0] == [("ab", 2, False), ("Wait", 4, True), ("cdef</think>", 12, False), ("42", 3, False)]
    assert chains[1] == [("abcdefghijklmnopqrst", 20, False), ("</think>\nFinal Answer:", 22, True), (" 7", 3, False)]
    assert [(t["waits"], t["thinking_tokens"], t["closed_by_force"]) for t in tree.meta["forcing"]] == [
        (1, 10, False), (0, 20, True)]
    # the "Wait" ids are the encoding of the literal text, and forced ids are masked for the learner
    wait = tree.meta["forcing"][0]["nodes"][1]
    assert tree[wait].token_ids == policy.encode("Wait")
    trajectory = tree.trajectory(tree.meta["forcing"][0]["nodes"][-1])
    assert trajectory.sampled_mask == [True] * 2 + [False] * 4 + [True] * 15
    # generated: round 1 both threads (10 + 20), round 2 thread 0 (12), round 3 both answers (3 + 3);
    # the suppressed "</think>" (8 ids) was generated and is counted, but is not in the tree
    assert result.compute.generated_tokens == 48 and result.compute.policy_calls == 3
    assert result.answer == "42" and result.text == "abWaitcdef</think>42"
    assert all(tree[t["nodes"][-1]].terminal for t in tree.meta["forcing"])


def test_budget_forcing_validation():
    with pytest.raises(ValueError, match="min_thinking_tokens must be <= max_thinking_tokens=5; got 9"):
        BudgetForcingConfig(min_thinking_tokens=9, max_thinking_tokens=5)


STEP_TABLE = {"Q": [("s\n\n", -0.5, "step"), ("t\n\n", -0.7, "step")],
              "Qs\n\n": [("1", -0.2, "stop")], "Qt\n\n": [("2", -0.3, "stop")]}
SMALL = {"best_of_n": dict(n=2, final="best"), "beam": dict(num_beams=2, beam_width=1, max_steps=3),
         "dvts": dict(num_beams=2, beam_width=1, max_steps=3), "mcts": dict(num_simulations=4, num_candidates=2, leaves_per_round=1),
         "budget_forcing": dict(n=2, min_thinking_tokens=0, max_thinking_tokens=8, final="best")}


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_tree_ids_are_the_sampled_ids_not_a_re_encoding(scripted_policy, table_scorer, name):
    special = 3  # "<|system|>": decoding drops it, so re-encoding the text can never give these ids back
    policy = scripted_policy(STEP_TABLE, inject_id=special)
    scorer = table_scorer(defaultdict(lambda: 0.5), policy)
    result = STRATEGIES[name](policy.encode("Q"), policy, scorer, None, make_config(name, extract=last_number,
                                                                                     **SMALL[name]), seed=0)
    tree = result.tree
    sampled = [i for i in range(1, len(tree)) if not tree[i].forced]
    assert sampled and all(tree[i].token_ids[0] == special for i in sampled)
    assert all(policy.encode(tree[i].text) != tree[i].token_ids for i in sampled)
    # every prompt the policy saw below the root is a tree prefix made of ids, the injected ones included
    deeper = [p for p in policy.seen_prompts if len(p) > 1]
    assert all(special in p for p in deeper) and all(p in map(tree.prefix_ids, range(len(tree))) for p in deeper)
    assert deeper or name == "best_of_n"  # best-of-N samples whole responses from the root only
    assert result.answer in {"1", "2"} or name == "best_of_n"  # its one-step responses hold no number


def test_every_strategy_has_a_config():
    assert set(CONFIGS) == set(STRATEGIES)
    with pytest.raises(ValueError, match="MCTSConfig has no option\\(s\\) \\['beams'\\]"):
        make_config("mcts", beams=3)
