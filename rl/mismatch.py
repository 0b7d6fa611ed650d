"""The mismatch between the rollout engine and the learner, and its correction.

The engine samples with its own kernels and precision (vLLM in bfloat16 on GPU), the learner
recomputes the same tokens' log-probabilities in its own (float32, or bfloat16 autocast), and the
two disagree even with identical weights. PPO's ratio pi_theta / pi_old then uses the learner's
pi_old while the tokens came from pi_engine: the update is off-policy by pi_old / pi_engine.

Truncated importance sampling (Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You
Off-Policy RL Training"; verl's rollout correction, `rollout_is_threshold`; OpenRLHF's `tis`)
multiplies each token's surrogate by w_t = min(pi_old(y_t) / pi_engine(y_t), C), a constant (no
gradient), which corrects the bias with bounded variance.

Logged every iteration: the k3 estimate of KL(pi_engine || pi_old) over the sampled tokens
(Schulman 2020: with r = pi_old / pi_engine and samples from pi_engine, E[(r - 1) - log r] is the KL
and every term is >= 0), and the fraction of tokens whose weight was capped.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rl.losses import masked_mean

__all__ = ["tis_weights", "mismatch_metrics"]


def tis_weights(learner_logp: Tensor, engine_logp: Tensor, cap: float) -> Tensor:
    """(B, T) min(exp(learner_logp - engine_logp), cap): the truncated importance weight of each token
    (learner_logp: the learner's pre-update log-probabilities, engine_logp: the engine's)."""
    if not cap > 0:
        raise ValueError(f"the TIS cap must be > 0; got {cap!r}")
    return torch.exp(learner_logp - engine_logp).clamp(max=cap).detach()


def mismatch_metrics(learner_logp: Tensor, engine_logp: Tensor, mask: Tensor, cap: float | None = None) -> dict:
    """engine_learner_k3 (KL(pi_engine || pi_learner), k3 over the sampled tokens) and, with a cap,
    tis_capped_fraction (tokens whose ratio exceeds it), over the mask."""
    log_ratio = (learner_logp - engine_logp).float()  # (B, T): log pi_learner / pi_engine
    ratio = torch.exp(log_ratio)
    metrics = {"engine_learner_k3": float(masked_mean((ratio - 1) - log_ratio, mask))}
    if cap is not None:
        metrics["tis_capped_fraction"] = float(masked_mean((ratio > cap).float(), mask))
    return metrics
