"""Preference pairs from a hand-built tree (conftest's `hand_tree`), worked out by hand.

Values of the root's distinct steps: [10] (A and C pooled) has leaves A1=1, A2=0, A3=1, C1=1, so 0.75;
[20] (B) has B1=0, so 0. Below A: [11, 2] (A1 and A3) is 1, [12, 2] is 0. B and C have one child each.
Distinct whole responses in leaf order: A1 [10, 11, 2] r=1, A2 [10, 12, 2] r=0, B1 [20, 21, 2] r=0,
C1 [10, 13, 2] r=1 (A3 repeats A1). Best first: A1, C1, A2, B1; worst first: A2, B1, A1, C1; pairs
(A1, A2), (C1, B1), then (A2, A1) is not a preference: stop.
"""

from __future__ import annotations

import pytest
import torch

from planner.tree import SearchTree
from rl.pairs import PairConfig, pair_batch, preference_pairs, response_pairs, step_pairs, tree_pairs


def summary(pairs):
    return [(p.kind, p.node, p.context_ids, p.chosen_ids, p.rejected_ids, p.chosen_outcome, p.rejected_outcome)
            for p in pairs]


def test_step_pairs_are_the_sibling_steps_below_each_branching_node(hand_tree):
    pairs = step_pairs(hand_tree, group=3, config=PairConfig())
    assert summary(pairs) == [
        ("step", 0, [1, 2], [10], [20], 0.75, 0.0),
        ("step", 1, [1, 2, 10], [11, 2], [12, 2], 1.0, 0.0),
    ]
    assert pairs[0].group == 3
    assert pairs[0].chosen_logprobs == [-0.10] and pairs[0].rejected_logprobs == [-0.20]
    assert pairs[1].chosen_logprobs == [-0.11, -0.02] and pairs[1].chosen_mask == [1.0, 1.0]


def test_leaf_continuations_run_to_the_best_and_worst_leaves(hand_tree):
    pairs = step_pairs(hand_tree, 0, PairConfig(continuation="leaf"))
    assert summary(pairs) == [
        ("step", 0, [1, 2], [10, 11, 2], [20, 21, 2], 1.0, 0.0),  # A1 is the first best leaf below [10]
        ("step", 1, [1, 2, 10], [11, 2], [12, 2], 1.0, 0.0),
    ]
    assert pairs[0].chosen_logprobs == [-0.10, -0.11, -0.02]


def test_response_pairs_pair_the_ith_best_with_the_ith_worst(hand_tree):
    pairs = response_pairs(hand_tree, 0, PairConfig())
    assert summary(pairs) == [
        ("response", 0, [1, 2], [10, 11, 2], [10, 12, 2], 1.0, 0.0),
        ("response", 0, [1, 2], [10, 13, 2], [20, 21, 2], 1.0, 0.0),
    ]
    assert len(response_pairs(hand_tree, 0, PairConfig(response_pairs=1))) == 1
    # "all": best first A1, C1 against worst first A2, B1 (A1 and C1 are not below each other)
    assert [(p.chosen_ids, p.rejected_ids) for p in response_pairs(hand_tree, 0, PairConfig(
        response_pairing="all", response_pairs=10))] == [([10, 11, 2], [10, 12, 2]), ([10, 11, 2], [20, 21, 2]),
                                                         ([10, 13, 2], [10, 12, 2]), ([10, 13, 2], [20, 21, 2])]


def test_margin_and_forced_ids(hand_tree):
    # a margin of 0.8 keeps the 1 vs 0 pairs and drops the root's 0.75 vs 0
    assert [p.node for p in step_pairs(hand_tree, 0, PairConfig(min_margin=0.8))] == [1]
    hand_tree[5].forced = True  # A2 was appended by the strategy, not sampled
    pair = step_pairs(hand_tree, 0, PairConfig())[1]
    assert pair.rejected_mask == [0.0, 0.0] and pair.chosen_mask == [1.0, 1.0]


def test_a_pair_found_twice_is_kept_once():
    # a flat tree (best-of-N): the root's sibling steps are the whole responses
    tree = SearchTree.new([1])
    for ids, reward in (([30, 2], 1.0), ([31, 2], 0.0)):
        tree[tree.add_child(0, ids, [-0.5, -0.5], terminal=True)].reward = reward
    assert summary(tree_pairs(tree, 0, PairConfig())) == [("step", 0, [1], [30, 2], [31, 2], 1.0, 0.0)]


def test_all_pairs_of_several_trees(hand_tree):
    pairs = preference_pairs([hand_tree, hand_tree], PairConfig(continuation="leaf"))
    assert len(pairs) == 8 and [p.group for p in pairs] == [0] * 4 + [1] * 4


def test_pair_batch_lays_out_chosen_then_rejected(hand_tree):
    pairs = step_pairs(hand_tree, 0, PairConfig())
    batch = pair_batch(pairs, pad_token_id=0)
    assert batch.input_ids.tolist() == [[1, 2, 10, 0, 0], [1, 2, 10, 11, 2], [1, 2, 20, 0, 0], [1, 2, 10, 12, 2]]
    assert batch.loss_mask.tolist() == [[0, 0, 1, 0, 0], [0, 0, 0, 1, 1], [0, 0, 1, 0, 0], [0, 0, 0, 1, 1]]
    assert batch.attention_mask.sum(-1).tolist() == [3, 5, 3, 5]
    assert torch.allclose(batch.behaviour_logprobs[1], torch.tensor([0, 0, 0, -0.11, -0.02]))
    assert batch.lengths().tolist() == [1, 2, 1, 2]


def test_equal_outcomes_only_raise_one_clear_error():
    tree = SearchTree.new([1])
    for ids in ([30, 2], [31, 2]):
        tree[tree.add_child(0, ids, [-0.5, -0.5], terminal=True)].reward = 1.0
    with pytest.raises(ValueError, match=r"no preference pairs in 1 trees: every set of sibling steps and every "
                                         r"prompt's responses have equal outcomes"):
        preference_pairs([tree])
    unrewarded = SearchTree.new([1])
    unrewarded.add_child(0, [3], [-0.1], terminal=True)
    with pytest.raises(ValueError, match="has a rewarded leaf: call rl.batch.reward_leaves"):
        preference_pairs([unrewarded])
    with pytest.raises(ValueError, match=r"PairConfig.continuation must be one of \['leaf', 'step'\]; got 'node'"):
        PairConfig(continuation="node")
