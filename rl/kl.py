"""KL to the reference policy: per-token estimators, the KL-in-reward helper, and KL controllers.

The estimators are John Schulman's "Approximating KL Divergence" (2020) k1, k2, k3 of
KL(pi_theta || pi_ref) from one sample drawn from pi_theta, written with the log-ratio
log r = ref_logp - logp (so r = pi_ref / pi_theta):

    k1 = -log r = logp - ref_logp                 unbiased, high variance, can be negative
    k2 = (log r)^2 / 2                            biased, low variance, >= 0
    k3 = (r - 1) - log r                          unbiased, low variance, >= 0

Where the KL goes is a choice of the algorithm: PPO-RLHF (Ziegler et al. 2019) and REINFORCE++
subtract beta * KL from the per-token reward (`kl_penalized_rewards`); GRPO adds beta * k3 to the
per-token loss (`rl.losses.policy_loss` with `kl_coef`). The controllers set beta.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor

KLKind = Literal["k1", "k2", "k3"]
KLEstimator = Callable[[Tensor, Tensor], Tensor]


def kl_k1(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k1 = logp - ref_logp, per token (B, T)."""
    return logp - ref_logp


def kl_k2(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k2 = (logp - ref_logp)^2 / 2, per token (B, T)."""
    log_ratio = logp - ref_logp  # (B, T)
    return 0.5 * log_ratio.square()


def kl_k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k3 = exp(ref_logp - logp) - (ref_logp - logp) - 1, per token (B, T).

    No clamp on the log-ratio (OpenRLHF clamps it to [-10, 10]): the output equals TRL's
    GRPOTrainer term exactly; a blow-up shows up in `is_finite_loss` instead of being hidden.
    """
    ref_log_ratio = ref_logp - logp  # (B, T) log(pi_ref / pi_theta)
    return torch.exp(ref_log_ratio) - ref_log_ratio - 1


KL_ESTIMATORS: dict[str, KLEstimator] = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}


def kl(logp: Tensor, ref_logp: Tensor, kind: KLKind = "k3") -> Tensor:
    """Per-token KL(pi_theta || pi_ref) estimate of the chosen kind, (B, T)."""
    try:
        estimator = KL_ESTIMATORS[kind]
    except KeyError:
        raise ValueError(f"unknown KL estimator kind {kind!r}; allowed: {', '.join(KL_ESTIMATORS)}") from None
    return estimator(logp, ref_logp)


def kl_penalized_rewards(scores: Tensor, kl_per_token: Tensor, mask: Tensor, beta: float) -> Tensor:
    """Per-token rewards (B, T) = -beta * KL_t on valid tokens, plus the sequence score on the last one.

    This is the KL-in-the-reward form of Ziegler et al. 2019 (used by PPO-RLHF and REINFORCE++):
    scores (B,) are the verifier/reward-model scores, kl_per_token (B, T) a per-token estimate
    (usually k1), mask (B, T) the response mask. The "last valid token" is the last position where
    mask is 1 (the mask need not be right-padded). A row with no valid token is an error: its
    score would be silently lost.
    """
    if scores.dim() != 1 or kl_per_token.shape != mask.shape or kl_per_token.shape[0] != scores.shape[0]:
        raise ValueError(
            f"need scores (B,), kl (B, T) and mask (B, T); got {tuple(scores.shape)}, "
            f"{tuple(kl_per_token.shape)}, {tuple(mask.shape)}"
        )
    valid = mask.bool()  # (B, T)
    if not bool(valid.any(dim=1).all()):
        empty = (~valid.any(dim=1)).nonzero().flatten().tolist()
        raise ValueError(f"rows {empty} have no valid response token to carry the score")
    positions = torch.arange(mask.shape[1], device=mask.device)  # (T,)
    last_index = torch.where(valid, positions, -1).amax(dim=1)  # (B,)
    rewards = -beta * kl_per_token * valid.to(kl_per_token.dtype)  # (B, T)
    rewards = rewards.clone()
    rewards[torch.arange(mask.shape[0], device=mask.device), last_index] += scores.to(rewards.dtype)
    return rewards


class FixedKLController:
    """Constant KL coefficient, with the same interface as `AdaptiveKLController`."""

    def __init__(self, kl_coef: float):
        if kl_coef < 0:
            raise ValueError(f"kl_coef must be >= 0; got {kl_coef}")
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> float:
        """Does nothing; returns the coefficient."""
        return self.value


class AdaptiveKLController:
    """Adaptive KL coefficient of Ziegler et al. 2019 ("Fine-Tuning Language Models from Human
    Preferences", section 2.2): a proportional controller that steers the observed KL to a target.

        error = clip(current_kl / target - 1, -0.2, 0.2)
        beta <- beta * (1 + error * n_steps / horizon)

    n_steps is the number of samples (the paper) or updates since the last call; horizon is in the
    same unit.
    """

    def __init__(self, init_kl_coef: float, target: float, horizon: float):
        if init_kl_coef < 0:
            raise ValueError(f"init_kl_coef must be >= 0; got {init_kl_coef}")
        if target <= 0:
            raise ValueError(f"target KL must be > 0; got {target}")
        if horizon <= 0:
            raise ValueError(f"horizon must be > 0; got {horizon}")
        self.value = float(init_kl_coef)
        self.target = float(target)
        self.horizon = float(horizon)

    def update(self, current_kl: float, n_steps: int) -> float:
        """Move beta towards the target KL and return the new value."""
        proportional_error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        multiplier = 1.0 + proportional_error * n_steps / self.horizon
        self.value *= multiplier
        return self.value
