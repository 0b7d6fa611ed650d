"""Rows from hand-built trees, and the estimators on them, against values written out by hand.

Tree A (group 0), prompt ids [1, 2]:            Tree B (group 1), prompt ids [3]:
    0 root [1, 2]                                   0 root [3]
    1 [5, 6]    lp -.1 -.2                          1 [20] lp -.9  terminal, reward .5
      3 [7]     lp -.3       terminal, reward 1
      4 [8, 9]  lp -.4 -.5   terminal, reward 0
    2 [11]      lp -.6
      5 [12, 13] forced (lp 0 0)
        6 [14]  lp -.7       terminal, reward 1

Monte-Carlo values (mean leaf reward below): V3 = 1, V4 = 0, V6 = V5 = V2 = 1, V1 = 1/2,
V0 = (1 + 0 + 1) / 3 = 2/3; tree B: V1 = V0 = .5. Rows, in leaf order 3, 4, 6 then B's leaf;
the batch is right-padded to L = 6 (the longest row, 2 prompt + 4 response ids) with pad id 0.
"""

import math

import pytest
import torch
from torch.testing import assert_close

from planner.tree import ROOT, SearchTree
from rl.batch import batch_from_trees, monte_carlo_values, rows_from_tree, step_progress
from rl.estimators import ADVANTAGE_ESTIMATORS, AdvantageInputs, estimate

EPS = 1e-4


def tree_a() -> SearchTree:
    tree = SearchTree.new([1, 2])
    n1 = tree.add_child(ROOT, [5, 6], [-.1, -.2])
    n2 = tree.add_child(ROOT, [11], [-.6])
    tree.add_child(n1, [7], [-.3], terminal=True)
    tree.add_child(n1, [8, 9], [-.4, -.5], terminal=True)
    n5 = tree.add_child(n2, [12, 13], [0.0, 0.0], forced=True)
    tree.add_child(n5, [14], [-.7], terminal=True)
    for leaf, reward in ((3, 1.0), (4, 0.0), (6, 1.0)):
        tree[leaf].reward = reward
    return tree


def tree_b() -> SearchTree:
    tree = SearchTree.new([3])
    tree.add_child(ROOT, [20], [-.9], terminal=True)
    tree[1].reward = 0.5
    return tree


def test_monte_carlo_values_are_mean_leaf_rewards():
    assert monte_carlo_values(tree_a()) == pytest.approx([2 / 3, .5, 1, 1, 0, 1, 1])


def test_rows_of_a_hand_built_tree():
    rows = rows_from_tree(tree_a(), group=0)
    assert [r.response_ids for r in rows] == [[5, 6, 7], [5, 6, 8, 9], [11, 12, 13, 14]]
    assert [r.prompt_ids for r in rows] == [[1, 2]] * 3
    assert [r.sampled for r in rows] == [[1, 1, 1], [1, 1, 1, 1], [1, 0, 0, 1]]
    assert rows[2].logprobs == [-.6, 0.0, 0.0, -.7]
    assert rows[0].node_values == pytest.approx([.5, .5, 1])
    assert rows[0].parent_values == pytest.approx([2 / 3, 2 / 3, .5])
    assert rows[1].node_values == pytest.approx([.5, .5, 0, 0])
    assert rows[1].parent_values == pytest.approx([2 / 3, 2 / 3, .5, .5])
    assert rows[2].node_values == pytest.approx([1, 1, 1, 1])
    assert rows[2].parent_values == pytest.approx([2 / 3, 1, 1, 1])
    assert [r.reward for r in rows] == [1.0, 0.0, 1.0]


def batch():
    return batch_from_trees([tree_a(), tree_b()], pad_token_id=0)


def test_batch_tensors_written_out_by_hand():
    b = batch()
    assert b.input_ids.tolist() == [[1, 2, 5, 6, 7, 0], [1, 2, 5, 6, 8, 9], [1, 2, 11, 12, 13, 14],
                                    [3, 20, 0, 0, 0, 0]]
    assert b.attention_mask.tolist() == [[1, 1, 1, 1, 1, 0], [1] * 6, [1] * 6, [1, 1, 0, 0, 0, 0]]
    assert b.response_mask.tolist() == [[0, 0, 1, 1, 1, 0], [0, 0, 1, 1, 1, 1], [0, 0, 1, 0, 0, 1],
                                        [0, 1, 0, 0, 0, 0]]
    assert_close(b.old_logprobs, torch.tensor([[0, 0, -.1, -.2, -.3, 0], [0, 0, -.1, -.2, -.4, -.5],
                                               [0, 0, -.6, 0, 0, -.7], [0, -.9, 0, 0, 0, 0]]))
    third = 2 / 3
    assert_close(b.token_values, torch.tensor([[0, 0, .5, .5, 1, 0], [0, 0, .5, .5, 0, 0], [0, 0, 1, 1, 1, 1],
                                               [0, .5, 0, 0, 0, 0]]))
    assert_close(b.parent_values, torch.tensor([[0, 0, third, third, .5, 0], [0, 0, third, third, .5, .5],
                                                [0, 0, third, 1, 1, 1], [0, .5, 0, 0, 0, 0]]))
    assert b.group.tolist() == [0, 0, 0, 1] and b.rewards.tolist() == [1.0, 0.0, 1.0, 0.5]
    assert b.prompt_lengths.tolist() == [2, 2, 2, 1]
    picked = b.select([3, 0])
    assert picked.input_ids.tolist() == [b.input_ids[3].tolist(), b.input_ids[0].tolist()]
    assert picked.group.tolist() == [1, 0]


def test_batch_without_rewards_says_what_to_do():
    tree = SearchTree.new([1])
    tree.add_child(ROOT, [2], [-1.0], terminal=True)
    with pytest.raises(ValueError, match="call rl.batch.reward_leaves"):
        batch_from_trees([tree], pad_token_id=0)


def inputs(b, **changes) -> AdvantageInputs:
    zeros = torch.zeros_like(b.response_mask)
    fields = dict(rewards=b.rewards, group=b.group, mask=b.response_mask, kl=zeros, kl_coef=0.0, values=zeros,
                  node_values=b.token_values, parent_values=b.parent_values, node_leaves=b.token_leaves,
                  root_values=b.root_values, progress=b.token_progress)
    fields.update(changes)
    return AdvantageInputs(**fields)


def test_tree_advantages_sit_on_the_tokens_of_their_step():
    """A_t = V(node of token t) - V(its parent), at the position of token t in input_ids (the position
    whose learner log-probability `rl.trainer.token_logprobs` puts there), 0 off the sampled tokens:
    token 7 (position 4 of row 0) ends step 3, so it gets V3 - V1 = 1 - 1/2; the forced ids 12, 13 get 0."""
    b = batch()
    advantages = estimate("tree", inputs(b)).advantages
    s = -1 / 6  # V1 - V0 = 1/2 - 2/3
    assert_close(advantages, torch.tensor([[0, 0, s, s, .5, 0], [0, 0, s, s, -.5, -.5], [0, 0, 1 / 3, 0, 0, 0],
                                           [0, 0, 0, 0, 0, 0]]))


def test_leaf_counts_and_root_values_by_hand():
    """|L(node)| of tree A: root 3, node 1 two (leaves 3, 4), every other node one; V(root) = 2/3, B's .5."""
    b = batch()
    assert_close(b.token_leaves, torch.tensor([[0, 0, 2, 2, 1, 0], [0, 0, 2, 2, 1, 1], [0, 0, 1, 1, 1, 1],
                                               [0, 1, 0, 0, 0, 0]], dtype=torch.float))
    assert_close(b.root_values, torch.tensor([2 / 3, 2 / 3, 2 / 3, .5]))


def test_treerl_advantages_by_hand():
    """TreeRL (Hou et al. 2025): R(s) = ((V(s) - V(root)) + (V(s) - V(parent))) / sqrt(|L(s)|) on the tokens
    of step s. Tree A, V0 = 2/3: node 1 (V .5, 2 leaves) gets (-1/6 - 1/6) / sqrt 2; node 3 (V 1) gets
    1/3 + 1/2; node 4 (V 0) gets -2/3 - 1/2; node 2 (V 1, parent root) 1/3 + 1/3; node 6 (V 1, parent
    V5 = 1) 1/3 + 0; the forced ids 12, 13 get 0. Tree B: V1 = V0 = .5 -> 0."""
    b = batch()
    s = (-1 / 3) / math.sqrt(2)
    expected = torch.tensor([[0, 0, s, s, 5 / 6, 0], [0, 0, s, s, -7 / 6, -7 / 6], [0, 0, 2 / 3, 0, 0, 1 / 3],
                             [0, 0, 0, 0, 0, 0]])
    assert_close(estimate("treerl", inputs(b)).advantages, expected)
    with pytest.raises(ValueError, match="needs node_leaves and root_values"):
        estimate("treerl", inputs(b, node_leaves=None))


def test_step_progress_and_grpo_progress_by_hand():
    """Setlur et al. 2024's process advantage, Q(step) - mean Q over the step and its siblings, with Q the
    reward where there is one, else the scorer's `score`. Tree A with scores .8 (node 1) and .4 (node 2):
    the root's children get .8 - .6 = .2 and -.2; node 1's leaves 1 - .5 = .5 and -.5; the only children
    5 and 6, and tree B's only child, 0. grpo_progress adds coef x progress to GRPO's advantage on every
    sampled token (the forced ids 12, 13 get nothing)."""
    a = tree_a()
    a[1].score, a[2].score = .8, .4
    a[3].score = .1  # a reward outranks the score
    assert_close(torch.tensor(step_progress(a)), torch.tensor([0, .2, -.2, .5, -.5, 0, 0]))
    b = batch_from_trees([a, tree_b()], pad_token_id=0)
    progress = torch.tensor([[0, 0, .2, .2, .5, 0], [0, 0, .2, .2, -.5, -.5], [0, 0, -.2, 0, 0, 0], [0] * 6])
    assert_close(b.token_progress, progress)
    outcome = estimate("grpo", inputs(b)).advantages
    combined = estimate("grpo_progress", inputs(b, progress_coef=2.0)).advantages
    assert_close(combined, outcome + 2.0 * progress * b.response_mask)
    assert combined[2, 3] == combined[2, 4] == 0  # forced ids
    with pytest.raises(ValueError, match="needs progress"):
        estimate("grpo_progress", inputs(b, progress=None))


def spread(per_row, b):
    return torch.tensor(per_row).unsqueeze(1) * b.response_mask


def test_group_estimators_on_trees_of_different_sizes():
    b = batch()
    std0 = math.sqrt(((1 / 3) ** 2 + (2 / 3) ** 2 + (1 / 3) ** 2) / 2)  # rewards 1, 0, 1: mean 2/3, unbiased
    cases = {
        "grpo": [(1 / 3) / (std0 + EPS), (-2 / 3) / (std0 + EPS), (1 / 3) / (std0 + EPS), 0.0],  # B: one row -> 0
        "dr_grpo": [1 / 3, -2 / 3, 1 / 3, 0.0],
        "rloo": [1 - .5, 0 - 1, 1 - .5, 0.0],  # minus the mean of the other two; one row -> 0
        "reinforce": [1.0, 0.0, 1.0, .5],
    }
    # REINFORCE++: whitened over the batch [1, 0, 1, .5]: mean .625, unbiased var .6875 / 3
    std = math.sqrt(.6875 / 3)
    cases["reinforce_pp"] = [(r - .625) / (std + EPS) for r in (1, 0, 1, .5)]
    # REINFORCE++-baseline: centred 1/3, -2/3, 1/3, 0 (mean 0), unbiased var (6/9) / 3
    std_c = math.sqrt((6 / 9) / 3)
    cases["reinforce_pp_baseline"] = [c / (std_c + EPS) for c in (1 / 3, -2 / 3, 1 / 3, 0.0)]
    for name, per_row in cases.items():
        assert_close(estimate(name, inputs(b)).advantages, spread(per_row, b), msg=name)


def test_remax_subtracts_each_groups_greedy_reward():
    b = batch()
    out = estimate("remax", inputs(b, greedy_rewards=torch.tensor([1.0, 0.0]))).advantages
    assert_close(out, spread([0.0, -1.0, 0.0, .5], b))
    with pytest.raises(ValueError, match="greedy_rewards"):
        estimate("remax", inputs(b))


def test_reward_to_go_puts_the_reward_on_the_last_sampled_token():
    b = batch()
    out = estimate("reward_to_go", inputs(b)).advantages
    # row 2 is trained on positions 2 and 5 only (12, 13 were forced): the reward 1 sits on position 5,
    # and the return at position 2 includes it (gamma = 1)
    assert_close(out, torch.tensor([[0, 0, 1, 1, 1, 0], [0, 0, 0, 0, 0, 0], [0, 0, 1, 0, 0, 1],
                                    [0, .5, 0, 0, 0, 0]]))


def test_kl_in_the_reward_lowers_the_sequence_reward():
    """kl_coef * the row's summed KL is subtracted before the group baseline (dr_grpo: r - mean)."""
    b = batch()
    kl = b.response_mask * 0.5  # 0.5 nats on every trained token: rows carry 3, 4, 2, 1 tokens
    out = estimate("dr_grpo", inputs(b, kl=kl, kl_coef=0.1)).advantages
    penalised = [1 - .15, 0 - .2, 1 - .1]
    mean = sum(penalised) / 3
    assert_close(out, spread([p - mean for p in penalised] + [0.0], b))


def test_every_estimator_is_registered_with_the_one_signature():
    b = batch()
    for name, estimator in ADVANTAGE_ESTIMATORS.items():
        extra = {"greedy_rewards": torch.zeros(2)} if name == "remax" else {}
        out = estimator(inputs(b, values=torch.full_like(b.response_mask, .5), **extra))
        assert out.advantages.shape == b.input_ids.shape, name
        assert bool((out.advantages[b.response_mask == 0] == 0).all()), name
    with pytest.raises(ValueError, match="unknown advantage estimator 'ppo'"):
        estimate("ppo", inputs(b))
