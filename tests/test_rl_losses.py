"""KL estimators, controllers and losses against hand-computed numbers."""

import math

import pytest
import torch
from torch.testing import assert_close

from rl.kl import AdaptiveKLController, FixedKLController, kl, kl_penalized_rewards
from rl.dpo_losses import dpo_loss
from rl.losses import (
    PolicyLossConfig,
    entropy_from_logits,
    is_finite_loss,
    masked_mean,
    masked_var,
    masked_whiten,
    policy_loss,
    sequence_logprobs,
    sft_loss,
    value_loss,
)


def t(rows):
    return torch.tensor(rows, dtype=torch.float32)


# ----------------------------------------------------------------------------- KL


def test_kl_estimators_hand_values():
    logp = t([[-1.0, -0.5, -2.0]])
    ref_logp = t([[-1.5, -0.5, -1.0]])  # ref - logp = -0.5, 0, +1
    assert_close(kl(logp, ref_logp, "k1"), t([[0.5, 0.0, -1.0]]))
    assert_close(kl(logp, ref_logp, "k2"), t([[0.125, 0.0, 0.5]]))
    assert_close(kl(logp, ref_logp, "k3"), t([[math.exp(-0.5) + 0.5 - 1, 0.0, math.e - 1 - 1]]))
    with pytest.raises(ValueError, match="unknown KL estimator kind 'k4'; allowed: k1, k2, k3"):
        kl(logp, ref_logp, "k4")


def test_kl_penalized_rewards_put_score_on_last_valid_token():
    scores = t([1.0, 0.5])
    kl_per_token = t([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]])
    mask = t([[1, 1, 1], [1, 1, 0]])
    out = kl_penalized_rewards(scores, kl_per_token, mask, beta=0.5)
    assert_close(out, t([[-0.05, -0.1, -0.15 + 1.0], [-0.2, -0.25 + 0.5, 0.0]]))
    with pytest.raises(ValueError, match=r"rows \[1\] have no valid response token"):
        kl_penalized_rewards(scores, kl_per_token, t([[1, 0, 0], [0, 0, 0]]), beta=0.5)


def test_adaptive_kl_controller_follows_ziegler():
    controller = AdaptiveKLController(init_kl_coef=0.1, target=6.0, horizon=10000)
    # KL 9 is 50% over target: the error is clipped to +0.2
    assert controller.update(current_kl=9.0, n_steps=256) == pytest.approx(0.1 * (1 + 0.2 * 256 / 10000))
    # KL 3 is 50% under target: clipped to -0.2
    assert controller.update(current_kl=3.0, n_steps=256) == pytest.approx(
        0.1 * (1 + 0.2 * 256 / 10000) * (1 - 0.2 * 256 / 10000)
    )
    small = AdaptiveKLController(init_kl_coef=0.2, target=6.0, horizon=1000)
    assert small.update(current_kl=6.6, n_steps=100) == pytest.approx(0.2 * (1 + 0.1 * 100 / 1000))
    fixed = FixedKLController(0.05)
    assert fixed.update(current_kl=100.0, n_steps=256) == 0.05 and fixed.value == 0.05
    with pytest.raises(ValueError, match="target KL must be > 0; got 0"):
        AdaptiveKLController(0.1, target=0, horizon=10)


# ----------------------------------------------------------------------------- policy loss

# Row 0: a high-clipped token (ratio 1.5, A > 0), a low-clipped one (0.5, A < 0), an unclipped
# one (1.1), a huge ratio with A < 0 (4.0, the dual clip's case) and a masked junk token.
# Row 1: ratio 0.7 with A > 0 (not clipped: the clip only removes gradient that pushes further),
# ratio 1 with A < 0, then padding.
RATIOS = t([[1.5, 0.5, 1.1, 4.0, 9.0], [0.7, 1.0, 1.0, 1.0, 1.0]])
ADVANTAGES = t([[1.0, -1.0, 2.0, -1.0, 5.0], [1.0, -0.5, 3.0, 3.0, 3.0]])
MASK = t([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]])
# per-token losses by hand, eps_low 0.2, eps_high 0.28:
#   max(-1 * 1.5, -1 * 1.28) = -1.28 ; max(0.5, 0.8) = 0.8 ; max(-2.2, -2.2) = -2.2 ; max(4.0, 1.28) = 4.0
#   max(-0.7, -0.8) = -0.7 ; max(0.5, 0.5) = 0.5
ROW0, ROW1 = -1.28 + 0.8 - 2.2 + 4.0, -0.7 + 0.5  # 1.32, -0.2


def run_policy_loss(config, ref_logp=None, entropy=None):
    logp = torch.log(RATIOS).requires_grad_(True)  # old_logp = 0, so ratio = exp(logp)
    loss, metrics = policy_loss(logp, torch.zeros_like(logp), ADVANTAGES, MASK, config, ref_logp, entropy)
    loss.backward()
    return loss, metrics, logp.grad


@pytest.mark.parametrize(
    "aggregation, max_length, expected",
    [
        ("token_mean", None, (ROW0 + ROW1) / 6),
        ("seq_mean_token_mean", None, (ROW0 / 4 + ROW1 / 2) / 2),
        ("seq_mean_token_sum", None, (ROW0 + ROW1) / 2),
        ("seq_mean_token_sum_norm", 8, (ROW0 + ROW1) / (2 * 8)),
    ],
)
def test_policy_loss_aggregations(aggregation, max_length, expected):
    config = PolicyLossConfig(epsilon_low=0.2, epsilon_high=0.28, aggregation=aggregation, max_length=max_length)
    loss, metrics, _ = run_policy_loss(config)
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    assert metrics["pg_loss"] == pytest.approx(expected, abs=1e-6)


def test_policy_loss_gradient_is_zero_on_clipped_and_masked_tokens():
    config = PolicyLossConfig(epsilon_low=0.2, epsilon_high=0.28)
    _, metrics, grad = run_policy_loss(config)
    # d/dlogp of -A * ratio is -A * ratio where the unclipped term is the max, else 0; / 6 tokens
    assert_close(grad, t([[0.0, 0.0, -2.2 / 6, 4.0 / 6, 0.0], [-0.7 / 6, 0.5 / 6, 0.0, 0.0, 0.0]]))
    assert metrics["clipfrac_low"] == pytest.approx(1 / 6)
    assert metrics["clipfrac_high"] == pytest.approx(1 / 6)
    assert metrics["clipfrac"] == pytest.approx(2 / 6)
    expected_approx_kl = sum((r - 1) - math.log(r) for r in [1.5, 0.5, 1.1, 4.0, 0.7, 1.0]) / 6
    assert metrics["approx_kl"] == pytest.approx(expected_approx_kl, rel=1e-6)


def test_policy_loss_dual_clip_caps_negative_advantage_loss():
    config = PolicyLossConfig(epsilon_low=0.2, epsilon_high=0.28, dual_clip=3.0)
    loss, metrics, grad = run_policy_loss(config)
    # the ratio-4 token with A = -1 now costs min(4.0, 3.0) = 3.0 and gives no gradient
    assert loss.item() == pytest.approx((ROW0 - 1.0 + ROW1) / 6, abs=1e-6)
    assert grad[0, 3].item() == 0.0
    assert metrics["dual_clipfrac"] == pytest.approx(1 / 6)


def test_policy_loss_in_loss_kl_and_entropy_bonus():
    base_loss, _, _ = run_policy_loss(PolicyLossConfig(epsilon_low=0.2, epsilon_high=0.28))
    ref_logp = torch.log(RATIOS) - 0.2  # k1 = 0.2 on every token
    config = PolicyLossConfig(epsilon_low=0.2, epsilon_high=0.28, kl_coef=0.1, kl_kind="k1", entropy_coef=0.01)
    entropy = t([[1.0, 1.0, 1.0, 1.0, 100.0], [1.0, 1.0, 100.0, 100.0, 100.0]])  # junk on padding
    loss, metrics, _ = run_policy_loss(config, ref_logp=ref_logp, entropy=entropy)
    assert loss.item() == pytest.approx(base_loss.item() + 0.1 * 0.2 - 0.01 * 1.0, abs=1e-6)
    assert metrics["kl"] == pytest.approx(0.2, abs=1e-6)
    assert metrics["entropy"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="needs ref_logp"):
        run_policy_loss(PolicyLossConfig(kl_coef=0.1))
    with pytest.raises(ValueError, match="needs entropy"):
        run_policy_loss(PolicyLossConfig(entropy_coef=0.1))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"epsilon_low": 0.0}, r"epsilon_low must be in \(0, 1\); got 0.0"),
        ({"epsilon_high": -0.1}, r"epsilon_high must be > 0; got -0.1"),
        ({"dual_clip": 1.0}, r"dual_clip must be None or > 1; got 1.0"),
        (
            {"aggregation": "sum"},
            r"aggregation must be one of token_mean, seq_mean_token_mean, seq_mean_token_sum, "
            r"seq_mean_token_sum_norm; got 'sum'",
        ),
        ({"aggregation": "seq_mean_token_sum_norm"}, r"needs max_length >= 1; got None"),
        ({"kl_kind": "k4"}, r"kl_kind must be one of k1, k2, k3; got 'k4'"),
        ({"kl_coef": -1.0}, r"kl_coef must be >= 0; got -1.0"),
    ],
)
def test_policy_loss_config_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PolicyLossConfig(**kwargs)


# ----------------------------------------------------------------------------- value loss


def test_value_loss_clipped_max_and_diagnostics():
    values = t([[1.0, 0.0, 50.0]]).requires_grad_(True)
    old_values = t([[0.5, 0.3, -50.0]])
    returns = t([[2.0, 1.0, 7.0]])
    mask = t([[1, 1, 0]])
    loss, metrics = value_loss(values, old_values, returns, mask, clip_range=0.2)
    # t0: unclipped (1 - 2)^2 = 1, clipped (0.5 + 0.2 - 2)^2 = 1.69 -> 1.69
    # t1: unclipped (0 - 1)^2 = 1, clipped (0.3 - 0.2 - 1)^2 = 0.81 -> 1.0
    assert loss.item() == pytest.approx(0.5 * (1.69 + 1.0) / 2)
    assert metrics["vf_clipfrac"] == pytest.approx(0.5)
    # returns [2, 1]: var 0.25; residual returns - old_values = [1.5, 0.7]: var 0.16
    assert metrics["explained_variance"] == pytest.approx(1 - 0.16 / 0.25)
    loss.backward()
    # t0 takes the clipped branch (saturated clamp, no gradient); t1: 0.5 * 2 * (0 - 1) / 2
    assert_close(values.grad, t([[0.0, -0.5, 0.0]]))
    unclipped, _ = value_loss(values, old_values, returns, mask, clip_range=None)
    assert unclipped.item() == pytest.approx(0.5 * (1.0 + 1.0) / 2)
    with pytest.raises(ValueError, match="clip_range must be None or > 0; got 0"):
        value_loss(values, old_values, returns, mask, clip_range=0)


# ----------------------------------------------------------------------------- DPO and SFT


def test_dpo_loss_sigmoid_and_label_smoothing():
    policy_chosen, policy_rejected = t([-1.0, -2.0]), t([-2.0, -1.0])
    ref_chosen, ref_rejected = t([-1.5, -1.5]), t([-1.5, -1.5])
    # logits: (-1 + 2) - 0 = 1 and (-2 + 1) - 0 = -1; beta = 0.5
    loss, metrics = dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta=0.5)
    expected = (math.log(1 + math.exp(-0.5)) + math.log(1 + math.exp(0.5))) / 2
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    assert metrics["reward_accuracy"] == 0.5
    assert metrics["rewards_chosen"] == pytest.approx((0.5 * 0.5 + 0.5 * -0.5) / 2)
    assert metrics["reward_margin"] == pytest.approx((0.5 * (0.5 + 0.5) + 0.5 * (-0.5 - 0.5)) / 2)
    smoothed, _ = dpo_loss(policy_chosen[:1], policy_rejected[:1], ref_chosen[:1], ref_rejected[:1], 0.5, 0.1)
    assert smoothed.item() == pytest.approx(
        0.9 * math.log(1 + math.exp(-0.5)) + 0.1 * math.log(1 + math.exp(0.5)), rel=1e-6
    )


def test_sft_loss_is_token_mean_nll():
    logp, mask = t([[-1.0, -2.0, -9.0], [-3.0, -9.0, -9.0]]), t([[1, 1, 0], [1, 0, 0]])
    assert sft_loss(logp, mask).item() == pytest.approx((1.0 + 2.0 + 3.0) / 3)


# ----------------------------------------------------------------------------- helpers


def test_sequence_logprobs_and_entropy_match_full_softmax_in_chunks():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 11, generator=generator, requires_grad=True)
    token_ids = torch.randint(0, 11, (2, 5), generator=generator)
    logp = sequence_logprobs(logits, token_ids, chunk_size=3)  # 10 positions in chunks of 3
    reference = torch.log_softmax(logits, dim=-1).gather(-1, token_ids.unsqueeze(-1)).squeeze(-1)
    assert_close(logp, reference)
    (grad,) = torch.autograd.grad(logp.sum(), logits)
    (reference_grad,) = torch.autograd.grad(reference.sum(), logits)
    assert_close(grad, reference_grad)
    entropy = entropy_from_logits(logits, chunk_size=4)
    assert_close(entropy, torch.distributions.Categorical(logits=logits).entropy())


def test_masked_helpers():
    x = t([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = t([[1, 1, 0], [0, 0, 0]])
    assert masked_mean(x, mask).item() == pytest.approx(1.5)
    assert_close(masked_mean(x, mask, dim=1), t([1.5, 0.0]))  # an empty row is 0, not NaN
    assert masked_var(x, mask).item() == pytest.approx(0.5)
    assert masked_var(x, mask, unbiased=False).item() == pytest.approx(0.25)
    values, value_mask = t([1.0, 2.0, 3.0, 100.0]), t([1, 1, 1, 0])  # mean 2, unbiased var 1
    assert_close(masked_whiten(values, value_mask)[:3], t([-1.0, 0.0, 1.0]))
    assert_close(masked_whiten(values, value_mask, shift_mean=False)[:3], t([1.0, 2.0, 3.0]))


def test_is_finite_loss():
    assert is_finite_loss(torch.tensor(1.5))
    assert not is_finite_loss(torch.tensor(float("nan")))
    assert not is_finite_loss(torch.tensor(float("inf")))
