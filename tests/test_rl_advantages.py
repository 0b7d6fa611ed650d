"""Advantage estimators against hand-computed numbers (expected values written out by hand)."""

import math

import pytest
import torch
from torch.testing import assert_close

from rl.advantages import (
    broadcast_to_tokens,
    dr_grpo,
    gae,
    grpo,
    nonzero_variance_groups,
    reinforce,
    reinforce_pp,
    reinforce_pp_baseline,
    remax,
    reward_to_go,
    rloo,
)

# Row 0: mixed, row 1: all equal (zero variance), row 2: one success in four.
REWARDS = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0]])
EPS = 1e-4


def t(rows):
    return torch.tensor(rows, dtype=torch.float32)


def test_reinforce_subtracts_constant_baseline():
    assert_close(reinforce(t([[1.0, 0.0]])), t([[1.0, 0.0]]))
    assert_close(reinforce(t([[1.0, 0.0]]), baseline=0.25), t([[0.75, -0.25]]))


def test_remax_subtracts_greedy_reward_per_prompt():
    out = remax(t([[1.0, 0.0], [0.5, 1.0]]), greedy_rewards=t([0.5, 1.0]))
    assert_close(out, t([[0.5, -0.5], [-0.5, 0.0]]))
    with pytest.raises(ValueError, match=r"greedy_rewards of shape \(P,\)"):
        remax(t([[1.0, 0.0]]), greedy_rewards=t([0.5, 1.0]))


def test_rloo_leave_one_out_mean():
    # row 0: r=1 -> 1 - (0+0+1)/3 = 2/3 ; r=0 -> 0 - (1+0+1)/3 = -2/3
    # row 2: r=0 -> 0 - 1/3 ; r=1 -> 1 - 0
    expected = t([[2 / 3, -2 / 3, -2 / 3, 2 / 3], [0, 0, 0, 0], [-1 / 3, -1 / 3, -1 / 3, 1.0]])
    assert_close(rloo(REWARDS), expected)


def test_grpo_group_mean_and_unbiased_std():
    # row 0: mean 0.5, unbiased var = 4 * 0.25 / 3, std = sqrt(1/3)
    s0 = math.sqrt(1 / 3)
    # row 2: mean 0.25, squared deviations 3 * 0.0625 + 0.5625 = 0.75, unbiased var 0.25, std 0.5
    expected = t(
        [
            [0.5 / (s0 + EPS), -0.5 / (s0 + EPS), -0.5 / (s0 + EPS), 0.5 / (s0 + EPS)],
            [0.0, 0.0, 0.0, 0.0],
            [-0.25 / (0.5 + EPS), -0.25 / (0.5 + EPS), -0.25 / (0.5 + EPS), 0.75 / (0.5 + EPS)],
        ]
    )
    assert_close(grpo(REWARDS), expected)


def test_dr_grpo_is_mean_centred_only():
    expected = t([[0.5, -0.5, -0.5, 0.5], [0, 0, 0, 0], [-0.25, -0.25, -0.25, 0.75]])
    assert_close(dr_grpo(REWARDS), expected)


def test_reinforce_pp_global_whitening_with_kl_penalty():
    rewards = t([[1.0, 0.0], [0.0, 0.0]])
    kl_penalty = t([[0.5, 0.0], [0.0, 0.0]])
    # returns [[0.5, 0], [0, 0]]: mean 0.125, squared deviations 0.140625 + 3 * 0.015625 = 0.1875,
    # unbiased var 0.0625, std 0.25
    expected = t([[0.375 / (0.25 + EPS), -0.125 / (0.25 + EPS)], [-0.125 / (0.25 + EPS), -0.125 / (0.25 + EPS)]])
    assert_close(reinforce_pp(rewards, kl_penalty=kl_penalty), expected)
    # without a penalty: returns [[1, 0], [0, 0]], mean 0.25, squared deviations 0.5625 + 3 * 0.0625 = 0.75,
    # unbiased var 0.25, std 0.5
    assert_close(reinforce_pp(rewards), t([[0.75 / 0.5001, -0.25 / 0.5001], [-0.25 / 0.5001, -0.25 / 0.5001]]))


def test_reinforce_pp_baseline_group_mean_then_batch_std():
    rewards = t([[1.0, 0.0], [1.0, 1.0]])
    # centred [[0.5, -0.5], [0, 0]]: mean 0, squared deviations 0.5, unbiased var 0.5 / 3
    s = math.sqrt(0.5 / 3)
    assert_close(reinforce_pp_baseline(rewards), t([[0.5 / (s + EPS), -0.5 / (s + EPS)], [0.0, 0.0]]))
    # TRL's scale_rewards="batch": std of raw rewards [1, 0, 1, 1] = sqrt(0.75 / 3) = 0.5
    assert_close(
        reinforce_pp_baseline(rewards, batch_std_of="rewards"), t([[0.5 / 0.5001, -0.5 / 0.5001], [0.0, 0.0]])
    )
    with pytest.raises(ValueError, match="batch_std_of"):
        reinforce_pp_baseline(rewards, batch_std_of="global")


@pytest.mark.parametrize("estimator", [rloo, grpo, dr_grpo, reinforce_pp_baseline])
def test_group_baselines_give_zero_for_zero_variance_groups_and_single_samples(estimator):
    constant = t([[0.7, 0.7, 0.7], [0.0, 0.0, 0.0]])
    assert_close(estimator(constant), torch.zeros_like(constant))
    single = t([[1.0], [0.0]])  # G = 1
    assert_close(estimator(single), torch.zeros_like(single))


def test_reinforce_pp_degenerate_batches_give_zero():
    # REINFORCE++ normalises over the batch, not the group: only a constant batch is degenerate
    assert_close(reinforce_pp(t([[0.7, 0.7], [0.7, 0.7]])), torch.zeros(2, 2))
    assert_close(reinforce_pp(t([[0.3]])), t([[0.0]]))
    # G = 1 with different prompts is a normal batch: [1, 0] -> mean 0.5, unbiased std sqrt(0.5)
    s = math.sqrt(0.5)
    assert_close(reinforce_pp(t([[1.0], [0.0]])), t([[0.5 / (s + EPS)], [-0.5 / (s + EPS)]]))


def test_nonzero_variance_groups():
    assert nonzero_variance_groups(REWARDS).tolist() == [True, False, True]
    assert nonzero_variance_groups(t([[1.0], [0.0]])).tolist() == [False, False]


def test_reward_to_go_with_mask_and_gamma():
    rewards = t([[0.0, 1.0, 2.0], [3.0, 4.0, 9.0]])
    mask = t([[1, 1, 1], [1, 1, 0]])
    # row 0: G2 = 2, G1 = 1 + 0.5 * 2 = 2, G0 = 0 + 0.5 * 2 = 1
    # row 1: the 9 is padding: G1 = 4, G0 = 3 + 0.5 * 4 = 5, G2 = 0
    assert_close(reward_to_go(rewards, mask, gamma=0.5), t([[1.0, 2.0, 2.0], [5.0, 4.0, 0.0]]))


def test_gae_matches_hand_unrolled_three_steps():
    gamma, lam = 0.9, 0.8
    rewards = t([[0.0, 0.0, 1.0], [0.0, 2.0, 99.0]])
    values = t([[0.5, 0.6, 0.7], [0.5, 0.4, 77.0]])
    mask = t([[1, 1, 1], [1, 1, 0]])
    # row 0 (no padding), V after the last token = 0:
    d2 = 1.0 + 0.9 * 0.0 - 0.7  # 0.3
    d1 = 0.0 + 0.9 * 0.7 - 0.6  # 0.03
    d0 = 0.0 + 0.9 * 0.6 - 0.5  # 0.04
    a2 = d2
    a1 = d1 + 0.9 * 0.8 * a2  # 0.246
    a0 = d0 + 0.9 * 0.8 * a1  # 0.21712
    # row 1: last valid token is t = 1; the padded reward 99 and value 77 must not leak in
    e1 = 2.0 + 0.9 * 0.0 - 0.4  # 1.6
    e0 = 0.0 + 0.9 * 0.4 - 0.5  # -0.14
    b1 = e1
    b0 = e0 + 0.9 * 0.8 * b1  # 1.012
    advantages, returns = gae(rewards, values, mask, gamma=gamma, lam=lam)
    assert_close(advantages, t([[a0, a1, a2], [b0, b1, 0.0]]))
    assert_close(returns, t([[a0 + 0.5, a1 + 0.6, a2 + 0.7], [b0 + 0.5, b1 + 0.4, 0.0]]))
    assert abs(a0 - 0.21712) < 1e-12 and abs(b0 - 1.012) < 1e-12  # the unrolled numbers themselves


def test_gae_lambda_one_gamma_one_is_return_minus_value():
    rewards, values, mask = t([[0.0, 0.0, 1.0]]), t([[0.2, 0.4, 0.6]]), t([[1, 1, 1]])
    advantages, returns = gae(rewards, values, mask, gamma=1.0, lam=1.0)
    assert_close(advantages, t([[0.8, 0.6, 0.4]]))
    assert_close(returns, t([[1.0, 1.0, 1.0]]))


def test_broadcast_to_tokens_zeroes_padding():
    out = broadcast_to_tokens(t([2.0, -1.0]), t([[1, 1, 0], [1, 0, 0]]))
    assert_close(out, t([[2.0, 2.0, 0.0], [-1.0, 0.0, 0.0]]))


def test_group_estimators_reject_flat_rewards():
    with pytest.raises(ValueError, match=r"shape \(P, G\)"):
        grpo(torch.tensor([1.0, 0.0]))
