"""MCTS against hand-worked examples on a scripted policy and a table scorer.

The tree (prompt "Q", steps end with "\\n\\n", two steps at most):

    root "Q" --a (step lp -0.1/token, score 0.6)-- x (EOS, 0.3) | y (EOS, 0.1)
             \\-b (step lp -0.5/token, score 0.4)-- z (EOS, 1.0) | w (EOS, 0.8)

Priors of a, b: softmax(-0.1, -0.5) = (0.598688, 0.401312) (mean token log-probability per step;
every token of a step has the same log-probability). x, y and z, w share log-probabilities: 0.5 each.
Node indices follow creation order: root 0, a 1, b 2, then the children of whichever expands next.
"""

from __future__ import annotations

import math

import pytest

from planner.strategies import STRATEGIES, MCTSConfig
from planner.strategies.mcts import mcts
from planner.tree import ROOT

TABLE = {
    "Q": [("a\n\n", -0.1, "step"), ("b\n\n", -0.5, "step")],
    "Qa\n\n": [("x", -0.2, "stop"), ("y", -0.2, "stop")],
    "Qb\n\n": [("z", -0.2, "stop"), ("w", -0.2, "stop")],
}
SCORES = {"a\n\n": 0.6, "b\n\n": 0.4, "a\n\nx": 0.3, "a\n\ny": 0.1, "b\n\nz": 1.0, "b\n\nw": 0.8}


def last_char(text: str) -> str | None:
    return text.strip()[-1:] or None


def run(scripted_policy, table_scorer, **overrides):
    policy = scripted_policy(TABLE)
    config = MCTSConfig(num_candidates=2, c_puct=1.0, widening_c=0.0, max_steps=2, extract=last_char,
                        **overrides)
    return mcts(policy.encode("Q"), policy, table_scorer(SCORES, policy), None, config, seed=0)


def stats(tree):
    return {tree.response_text(i) or "root": (tree[i].visits, round(tree[i].value_sum, 6)) for i in range(len(tree))}


def test_registry_holds_mcts():
    assert STRATEGIES["mcts"] is mcts


def test_sequential_mcts_matches_hand_computation(scripted_policy, table_scorer, check_golden):
    result = run(scripted_policy, table_scorer, num_simulations=5, leaves_per_round=1)
    tree = result.tree
    a, b = tree[ROOT].children
    assert tree[a].prior == pytest.approx(1 / (1 + math.exp(-0.4)))  # 0.598688
    assert tree[b].prior == pytest.approx(0.401312, abs=1e-6)
    # sim 1: root has no children -> expand root: a=0.6, b=0.4; root N=2 W=1.0
    # sim 2: sqrt(N_root)=sqrt(2): a 0.6+0.598688*1.41421/2=1.0233 > b 0.4+0.401312*1.41421/2=0.6838
    #        -> expand a: x=0.3, y=0.1; a N=3 W=1.0; root N=4 W=1.4
    # sim 3: sqrt(4)=2: a 1.0/3+0.598688*2/4=0.6327 < b 0.4+0.401312*2/2=0.8013
    #        -> expand b: z=1.0, w=0.8; b N=3 W=2.2; root N=6 W=3.2
    # sim 4: sqrt(6)=2.44949: a 0.3333+0.598688*2.44949/4=0.6999 < b 0.7333+0.401312*2.44949/4=0.9791 -> b;
    #        in b, sqrt(3)=1.73205: z 1.0+0.5*1.73205/2=1.4330 > w 0.8+0.4330=1.2330 -> z is terminal:
    #        back up 1.0 again; z N=2 W=2.0; b N=4 W=3.2; root N=7 W=4.2
    # sim 5: sqrt(7)=2.64575: a 0.3333+0.598688*2.64575/4=0.7293 < b 0.8+0.401312*2.64575/5=1.0124 -> b;
    #        in b, sqrt(4)=2: z 1.0+0.5*2/3=1.3333 > w 0.8+0.5*2/2=1.3 -> z again: z N=3 W=3.0; b N=5 W=4.2
    assert tree.meta["selection_order"] == [ROOT, a, b, 5, 5]
    assert stats(tree) == {"root": (8, 5.2), "a\n\n": (3, 1.0), "b\n\n": (5, 4.2), "a\n\nx": (1, 0.3),
                           "a\n\ny": (1, 0.1), "b\n\nz": (3, 3.0), "b\n\nw": (1, 0.8)}
    # answer by visits: root -> b (N=5 > 3) -> z (N=3 > 1), terminal
    assert (result.leaf, result.answer, result.text) == (5, "z", "b\n\nz")
    check_golden(tree, "mcts_sequential.json")


def test_batched_round_uses_virtual_loss(scripted_policy, table_scorer, check_golden):
    result = run(scripted_policy, table_scorer, num_simulations=4, leaves_per_round=2)
    tree = result.tree
    # round 1: both selections reach the bare root; the second asks for 2 more steps, so the root is
    #   expanded with 4 in one call ("Q" twice, n=2; the script cycles a, b, a, b): nodes 1 a, 2 b,
    #   3 a, 4 b. Priors: softmax(-0.1, -0.5, -0.1, -0.5) = 0.299344 (a), 0.200656 (b). Values a=0.6,
    #   b=0.4; root N=4 W=2.0
    assert [tree[c].prior for c in tree[ROOT].children] == pytest.approx([0.299344, 0.200656] * 2, abs=1e-6)
    # round 2, selection 1: sqrt(4)=2: a 0.6+0.299344*2/2=0.8993 (1 and 3 tie; the lower index wins)
    #   > b 0.4+0.200656=0.6007 -> 1 (unexpanded). Virtual loss: root N=5, node 1 N=2 W=0.6
    #   selection 2: sqrt(5)=2.23607: 1 0.6/2+0.299344*2.23607/3=0.5231 < 3 0.6+0.299344*2.23607/2=0.9347
    #   (b 0.4+0.200656*2.23607/2=0.6243) -> 3
    #   1 and 3 expand in one generate call (2 prompts, n=2): 5 x, 6 y under 1, 7 x, 8 y under 3,
    #   scored in one scorer call: 1 and 3 each N=3 W=0.6+0.3+0.1=1.0; root N=8 W=2.0+0.8=2.8
    assert tree.meta["selection_order"] == [ROOT, ROOT, 1, 3]
    assert [(tree[i].visits, round(tree[i].value_sum, 6)) for i in range(len(tree))] == [
        (8, 2.8), (3, 1.0), (1, 0.4), (3, 1.0), (1, 0.4), (1, 0.3), (1, 0.1), (1, 0.3), (1, 0.1)]
    assert [tree.response_text(i) for i in range(5, 9)] == ["a\n\nx", "a\n\ny"] * 2
    assert result.compute.policy_calls == 2 and result.compute.scorer_calls == 2
    # answer by visits: 1 and 3 tie at N=3 and Q 0.6 -> the lower index, 1; then x (N=1, 0.3) over y
    assert (result.leaf, result.answer) == (5, "x")
    check_golden(tree, "mcts_batched.json")
    # num_simulations=3: round 2 starts (2 < 3) and is filled like round 1 (2 selections), so the
    # search is the same as with 4
    three = run(scripted_policy, table_scorer, num_simulations=3, leaves_per_round=2)
    assert three.tree.to_dict()["nodes"] == tree.to_dict()["nodes"] and three.compute.policy_calls == 2
    assert three.tree.meta["selection_order"] == tree.meta["selection_order"]


def test_terminal_revisit_is_backed_up_at_once_and_the_round_selects_again(scripted_policy, table_scorer):
    # the root's step b now ends the response (terminal, score 0.7); a is as before
    policy = scripted_policy({**TABLE, "Q": [("a\n\n", -0.1, "step"), ("b", -0.5, "stop")]})
    scores = {**SCORES, "b": 0.7}
    config = MCTSConfig(num_candidates=2, c_puct=1.0, widening_c=0.0, max_steps=2, extract=last_char,
                        num_simulations=5, leaves_per_round=2)
    result = mcts(policy.encode("Q"), policy, table_scorer(scores, policy), None, config, seed=0)
    tree = result.tree
    # round 1: the root twice -> 1 a, 2 b, 3 a, 4 b (priors 0.299344 a, 0.200656 b); root N=4 W=2.6
    # round 2, sim 3: sqrt(4)=2: a 0.6+0.299344=0.8993 < b 0.7+0.200656=0.9007 -> 2, terminal: 0.7 is
    #   backed up at once (2: N=2 W=1.4; root N=5 W=3.3) and the round selects again
    #   sim 4: sqrt(5)=2.23607: 1 0.6+0.299344*2.23607/2=0.9347 (ties 3), 2 0.7+0.200656*2.23607/3=0.8496,
    #   4 0.7+0.200656*2.23607/2=0.9243 -> 1. Virtual loss: root N=6, 1 N=2 W=0.6
    #   sim 5: sqrt(6)=2.44949: 1 0.3+0.299344*2.44949/3=0.5444, 2 0.7+0.200656*2.44949/3=0.8638,
    #   3 0.6+0.299344*2.44949/2=0.9666, 4 0.7+0.200656*2.44949/2=0.9458 -> 3
    #   1 and 3 expand in one full call (2 prompts, n=2): x 0.3, y 0.1 under each
    assert tree.meta["selection_order"] == [ROOT, ROOT, 2, 1, 3]
    assert [(tree[i].visits, round(tree[i].value_sum, 6)) for i in range(5)] == [
        (9, 4.1), (3, 1.0), (2, 1.4), (3, 1.0), (1, 0.7)]
    assert result.compute.policy_calls == 2
    # answer by visits: 1 and 3 tie (N=3, Q 1/3) -> 1; then x (0.3) over y (0.1)
    assert (result.leaf, result.answer) == (5, "x")


def test_final_by_value_and_pruning_reset(scripted_policy, table_scorer):
    result = run(scripted_policy, table_scorer, num_simulations=5, leaves_per_round=1, final="value",
                 prune_below=0.35)
    tree = result.tree
    # sim 1 expands the root: a=0.6, b=0.4 (both kept). sim 2 expands a: x=0.3 and y=0.1 fall below
    # 0.35 and are pruned, so a (all children pruned) is pruned too; the search restarts from the best
    # visited node: b (the only unpruned, unfinished visited node). sim 3 expands b: z=1.0, w=0.8.
    assert [tree.response_text(i) for i in range(len(tree)) if tree[i].pruned] == ["a\n\n", "a\n\nx", "a\n\ny"]
    assert tree.meta["resets"] == [2]
    assert result.answer == "z" and tree[result.leaf].value == pytest.approx(1.0)


def test_same_seed_same_tree(scripted_policy, table_scorer):
    one = run(scripted_policy, table_scorer, num_simulations=6, leaves_per_round=2)
    two = run(scripted_policy, table_scorer, num_simulations=6, leaves_per_round=2)
    assert one.tree.to_dict() == two.tree.to_dict()


def test_config_errors_name_allowed_values():
    with pytest.raises(ValueError, match=r"MCTSConfig.final must be one of \['value', 'visits'\]; got 'best'"):
        MCTSConfig(final="best")
    with pytest.raises(ValueError, match="c_puct.*got -1"):
        MCTSConfig(c_puct=-1)


def test_progressive_widening_adds_children_as_visits_grow(scripted_policy, table_scorer):
    # one candidate per expansion, one step per response (every child is terminal); a node may hold
    # 1 * max(1, floor(N ** 0.5)) children: 1 child while the root has N < 4 visits, 2 from N = 4
    policy = scripted_policy({"Q": [("a", -0.1, "stop"), ("b", -0.1, "stop")]})
    scores = {"a": 0.5, "b": 0.9}
    config = MCTSConfig(num_candidates=1, widening_c=1.0, widening_alpha=0.5, max_steps=1, num_simulations=6,
                        leaves_per_round=1, extract=last_char)
    result = mcts(policy.encode("Q"), policy, table_scorer(scores, policy), None, config, seed=0)
    tree = result.tree
    # sim 1: expand the root -> a (0.5). sims 2-4: root N = 1, 2, 3 allows one child -> revisit terminal a
    # sim 5: root N = 4 allows two -> widen: b (0.9); priors over a, b are 0.5 each (equal log-probs)
    # sim 6: root N=5, sqrt=2.23607: a 2.0/4 + 0.5*2.23607/5 = 0.7236 < b 0.9 + 0.5*2.23607/2 = 1.4590 -> b
    assert tree.meta["selection_order"] == [ROOT, 1, 1, 1, ROOT, 2]
    assert [(tree[i].visits, round(tree[i].value_sum, 6)) for i in range(3)] == [(6, 3.8), (4, 2.0), (2, 1.8)]
    assert [tree[c].prior for c in tree[ROOT].children] == [0.5, 0.5]
    assert result.answer == "a"  # most visits
    by_value = mcts(policy.encode("Q"), scripted_policy(policy.table), table_scorer(scores, policy), None,
                    MCTSConfig(**{**config.__dict__, "final": "value"}), seed=0)
    assert by_value.answer == "b"  # highest Q: 0.9 > 0.5


def test_terminal_reward_replaces_the_score_of_finished_steps(scripted_policy, table_scorer):
    # training only: the verifier says y is right. Same run as the sequential example up to sim 2;
    # then x = 0 and y = 1 (rewards) instead of the scores 0.3 and 0.1, so a: N=3 W=0.6+0+1=1.6.
    result = run(scripted_policy, table_scorer, num_simulations=2, leaves_per_round=1,
                 terminal_reward=lambda text: float(text.endswith("y")))
    tree = result.tree
    x, y = tree[1].children
    assert (tree[x].score, tree[x].reward, tree[y].score, tree[y].reward) == (0.3, 0.0, 0.1, 1.0)
    assert (tree[1].visits, tree[1].value_sum) == (3, pytest.approx(1.6))
