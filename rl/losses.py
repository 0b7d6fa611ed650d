"""Losses of the learner: clipped policy surrogate, clipped value loss and SFT, with their helpers
(DPO's losses: rl/dpo_losses.py).

Shapes: B sequences, T response tokens, V vocabulary. `mask` (B, T) is 1 on the response tokens
that are trained on. Every loss returns (scalar loss, metrics): the metrics are python floats
meant for logging, computed without gradient.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

import torch
from torch import Tensor

from rl.kl import KL_ESTIMATORS, KLKind, kl

Aggregation = Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm"]
AGGREGATIONS: tuple[str, ...] = get_args(Aggregation)

# ----------------------------------------------------------------------------- masked helpers


def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Sum of x over positions where mask is 1 (all positions, or along `dim`)."""
    masked = x * mask.to(x.dtype)
    return masked.sum() if dim is None else masked.sum(dim=dim)


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of x over positions where mask is 1; 0 where there are none (not NaN)."""
    count = mask.to(x.dtype).sum() if dim is None else mask.to(x.dtype).sum(dim=dim)
    return masked_sum(x, mask, dim) / count.clamp(min=1.0)


def masked_var(x: Tensor, mask: Tensor, unbiased: bool = True) -> Tensor:
    """Variance of x over all masked-in positions (0-dim); Bessel-corrected unless unbiased=False."""
    mean = masked_mean(x, mask)  # ()
    centred_sq = (x - mean).square()  # x's shape
    count = mask.to(x.dtype).sum()
    variance = masked_sum(centred_sq, mask) / count.clamp(min=1.0)
    if unbiased:
        if count < 2:
            raise ValueError(f"unbiased masked variance needs at least 2 masked-in values; got {int(count)}")
        variance = variance * count / (count - 1)
    return variance


def masked_whiten(x: Tensor, mask: Tensor, shift_mean: bool = True, eps: float = 1e-8) -> Tensor:
    """(x - mean) / sqrt(var + eps) over the masked-in positions; the mean is added back if not shift_mean.

    Masked-out positions are whitened too (with the same statistics) but carry no meaning.
    """
    mean = masked_mean(x, mask)  # ()
    variance = masked_var(x, mask)  # ()
    whitened = (x - mean) * torch.rsqrt(variance + eps)
    return whitened if shift_mean else whitened + mean


# ----------------------------------------------------------------------------- from logits


def sequence_logprobs(logits: Tensor, token_ids: Tensor, chunk_size: int = 1024) -> Tensor:
    """log softmax(logits)[token_id] per position: logits (B, T, V), token_ids (B, T) -> (B, T).

    Computed as logit[token] - logsumexp(logits) over chunks of `chunk_size` positions, so only a
    (chunk_size, V) temporary exists at a time instead of a full (B, T, V) log-softmax copy.
    logits[:, t] must be the logits that predicted token_ids[:, t] (shift before calling).
    """
    if logits.shape[:2] != token_ids.shape:
        raise ValueError(
            f"logits (B, T, V) and token_ids (B, T) disagree: {tuple(logits.shape)} vs {tuple(token_ids.shape)}"
        )
    flat_logits = logits.reshape(-1, logits.shape[-1])  # (B*T, V)
    flat_ids = token_ids.reshape(-1)  # (B*T,)
    chunks = []
    for start in range(0, flat_ids.shape[0], chunk_size):
        chunk_logits = flat_logits[start : start + chunk_size].float()  # (C, V)
        chunk_ids = flat_ids[start : start + chunk_size]  # (C,)
        token_logits = chunk_logits.gather(1, chunk_ids.unsqueeze(1)).squeeze(1)  # (C,)
        chunks.append(token_logits - torch.logsumexp(chunk_logits, dim=-1))  # (C,)
    if not chunks:
        return torch.zeros(token_ids.shape, dtype=torch.float32, device=logits.device)
    return torch.cat(chunks).view(token_ids.shape)


def entropy_from_logits(logits: Tensor, chunk_size: int = 1024) -> Tensor:
    """Entropy of softmax(logits) per position: (B, T, V) -> (B, T), in chunks of positions.

    H = logsumexp(z) - sum_v softmax(z)_v z_v, which needs no full log-softmax tensor.
    """
    flat_logits = logits.reshape(-1, logits.shape[-1])  # (B*T, V)
    chunks = []
    for start in range(0, flat_logits.shape[0], chunk_size):
        chunk_logits = flat_logits[start : start + chunk_size].float()  # (C, V)
        probs = torch.softmax(chunk_logits, dim=-1)  # (C, V)
        chunks.append(torch.logsumexp(chunk_logits, dim=-1) - (probs * chunk_logits).sum(dim=-1))  # (C,)
    if not chunks:
        return torch.zeros(logits.shape[:2], dtype=torch.float32, device=logits.device)
    return torch.cat(chunks).view(logits.shape[:2])


# ----------------------------------------------------------------------------- aggregation


def aggregate_loss(
    per_token_loss: Tensor, mask: Tensor, aggregation: Aggregation, max_length: int | None = None,
    num_tokens: float | None = None, num_rows: int | None = None,
) -> Tensor:
    """Reduce a per-token loss (B, T) to a scalar.

    token_mean: sum over all valid tokens / their count; every token weighs the same (DAPO,
        Yu et al. 2025). TRL loss_type "bnpo", and "dapo" on one process without accumulation.
    seq_mean_token_mean: mean over tokens within a sequence, then over sequences (GRPO paper,
        Shao et al. 2024). TRL loss_type "grpo".
    seq_mean_token_sum: sum over a sequence's tokens, mean over sequences. TRL loss_type "luspo"
        at token-level importance sampling.
    seq_mean_token_sum_norm: total over valid tokens / (B * max_length), a constant (Dr. GRPO,
        Liu et al. 2025): no length bias. TRL loss_type "dr_grpo" with max_length =
        max_completion_length.
    A sequence with no valid token counts as 0 in the sequence means (as in TRL).

    Gradient accumulation: with `num_tokens` / `num_rows` (the valid tokens and rows of the whole
    minibatch that this (B, T) slice is a micro-batch of), the sums are divided by those totals
    instead of this slice's own counts, so the micro-batch losses add up exactly to the minibatch's.
    """
    tokens = mask.to(per_token_loss.dtype).sum() if num_tokens is None else torch.as_tensor(float(num_tokens))
    rows = per_token_loss.shape[0] if num_rows is None else num_rows
    if aggregation == "token_mean":
        return masked_sum(per_token_loss, mask) / tokens.clamp(min=1.0)
    if aggregation == "seq_mean_token_mean":
        return masked_mean(per_token_loss, mask, dim=1).sum() / rows  # (B,) -> ()
    if aggregation == "seq_mean_token_sum":
        return masked_sum(per_token_loss, mask, dim=1).sum() / rows  # (B,) -> ()
    if aggregation == "seq_mean_token_sum_norm":
        if max_length is None:
            raise ValueError("aggregation 'seq_mean_token_sum_norm' needs max_length")
        return masked_sum(per_token_loss, mask) / (rows * max_length)
    raise ValueError(f"aggregation must be one of {', '.join(AGGREGATIONS)}; got {aggregation!r}")


# ----------------------------------------------------------------------------- policy loss


@dataclass
class PolicyLossConfig:
    """Settings of the clipped policy surrogate (`policy_loss`)."""

    epsilon_low: float = 0.2
    """Lower clip range: the ratio is clipped at 1 - epsilon_low (PPO, Schulman et al. 2017). In (0, 1)."""
    epsilon_high: float = 0.2
    """Upper clip range: the ratio is clipped at 1 + epsilon_high. > 0. DAPO's "clip-higher"
    (Yu et al. 2025) raises it alone (0.28) so that unlikely tokens can gain probability."""
    dual_clip: float | None = None
    """Dual-clip constant c > 1 (Ye et al. 2020, "Mastering Complex Control in MOBA Games"): for
    negative advantages the loss is capped at -c * A, so a huge ratio cannot give an unbounded
    step. None disables it. Equal to TRL's `delta` (its "two-sided clipping")."""
    aggregation: Aggregation = "token_mean"
    """How the per-token loss becomes a scalar; see `aggregate_loss` (one of AGGREGATIONS)."""
    max_length: int | None = None
    """The constant length of "seq_mean_token_sum_norm" (Dr. GRPO); required by that mode only."""
    kl_coef: float = 0.0
    """Beta of the KL-in-the-loss term (GRPO, Shao et al. 2024): beta * KL(pi_theta || pi_ref)
    per token is added to the per-token loss before aggregation. 0 disables it (then ref_logp is
    not needed). Use `rl.kl.kl_penalized_rewards` instead for KL in the reward."""
    kl_kind: KLKind = "k3"
    """KL estimator of the in-loss term: "k1", "k2" or "k3" (see rl.kl). GRPO uses k3."""
    entropy_coef: float = 0.0
    """Entropy bonus: loss -= entropy_coef * mean entropy over valid tokens (token mean whatever
    the aggregation, as in TRL, so the bonus does not change with the normalisation)."""

    def __post_init__(self):
        if not 0 < self.epsilon_low < 1:
            raise ValueError(f"epsilon_low must be in (0, 1); got {self.epsilon_low}")
        if not self.epsilon_high > 0:
            raise ValueError(f"epsilon_high must be > 0; got {self.epsilon_high}")
        if self.dual_clip is not None and not self.dual_clip > 1:
            raise ValueError(f"dual_clip must be None or > 1; got {self.dual_clip}")
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {', '.join(AGGREGATIONS)}; got {self.aggregation!r}")
        if self.aggregation == "seq_mean_token_sum_norm" and (self.max_length is None or self.max_length < 1):
            raise ValueError(
                f"aggregation 'seq_mean_token_sum_norm' needs max_length >= 1; got {self.max_length}"
            )
        if not self.kl_coef >= 0:
            raise ValueError(f"kl_coef must be >= 0; got {self.kl_coef}")
        if self.kl_kind not in KL_ESTIMATORS:
            raise ValueError(f"kl_kind must be one of {', '.join(KL_ESTIMATORS)}; got {self.kl_kind!r}")
        if not math.isfinite(self.entropy_coef):
            raise ValueError(f"entropy_coef must be finite; got {self.entropy_coef}")


def policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    config: PolicyLossConfig,
    ref_logp: Tensor | None = None,
    entropy: Tensor | None = None,
    importance_weights: Tensor | None = None,
    num_tokens: float | None = None,
    num_rows: int | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """PPO clipped surrogate (Schulman et al. 2017) with clip-higher, dual clip, in-loss KL and entropy.

    logp (B, T) log-probs of the sampled tokens under the current policy (with gradient);
    old_logp (B, T) under the behaviour policy that sampled them; advantages (B, T) (use
    `rl.advantages.broadcast_to_tokens` for sequence advantages); mask (B, T); ref_logp (B, T)
    under the reference policy (needed when config.kl_coef > 0); entropy (B, T) per-token entropy
    (needed when config.entropy_coef != 0, see `entropy_from_logits`). importance_weights (B, T):
    per-token weights on the surrogate, no gradient (truncated importance sampling of the rollout
    engine against the learner, `rl.mismatch.tis_weights`). num_tokens / num_rows: the minibatch's
    totals when this call sees one micro-batch of it (see `aggregate_loss`); metrics stay this
    micro-batch's own means.

    Metrics: pg_loss (the surrogate alone), approx_kl (k3 of old vs new, mean((ratio - 1) -
    log ratio)), clipfrac_low / clipfrac_high / clipfrac (tokens whose gradient the clip removes:
    ratio < 1 - eps_low with A < 0, ratio > 1 + eps_high with A > 0, either), dual_clipfrac, and
    kl / entropy when they are used. Token means over the mask.
    """
    if not (logp.shape == old_logp.shape == advantages.shape == mask.shape) or logp.dim() != 2:
        raise ValueError(
            f"logp, old_logp, advantages and mask must all be (B, T); got {tuple(logp.shape)}, "
            f"{tuple(old_logp.shape)}, {tuple(advantages.shape)}, {tuple(mask.shape)}"
        )
    mask = mask.to(logp.dtype)
    old_logp = old_logp.detach()
    advantages = advantages.detach()

    log_ratio = logp - old_logp  # (B, T)
    ratio = torch.exp(log_ratio)  # (B, T)
    clipped_ratio = torch.clamp(ratio, 1 - config.epsilon_low, 1 + config.epsilon_high)  # (B, T)
    pg_loss1 = -advantages * ratio  # (B, T)
    pg_loss2 = -advantages * clipped_ratio  # (B, T)
    pg_losses = torch.maximum(pg_loss1, pg_loss2)  # (B, T) pessimistic bound
    if config.dual_clip is not None:
        # Dual clip applies only to A < 0: cap the loss at -c * A.
        pg_loss3 = -advantages * config.dual_clip  # (B, T)
        dual_clipped = torch.minimum(pg_losses, pg_loss3)  # (B, T)
        pg_losses = torch.where(advantages < 0, dual_clipped, pg_losses)  # (B, T)

    per_token_loss = pg_losses  # (B, T)
    if importance_weights is not None:  # TIS: pi_learner_old / pi_engine, capped; a constant per token
        per_token_loss = per_token_loss * importance_weights.detach()  # (B, T)
    per_token_kl = None
    if config.kl_coef > 0:
        if ref_logp is None:
            raise ValueError("config.kl_coef > 0 needs ref_logp (B, T)")
        per_token_kl = kl(logp, ref_logp.detach(), config.kl_kind)  # (B, T)
        per_token_loss = per_token_loss + config.kl_coef * per_token_kl  # (B, T)

    loss = aggregate_loss(per_token_loss, mask, config.aggregation, config.max_length, num_tokens, num_rows)  # ()
    if config.entropy_coef != 0:
        if entropy is None:
            raise ValueError("config.entropy_coef != 0 needs entropy (B, T)")
        entropy_loss = aggregate_loss(entropy, mask, "token_mean", num_tokens=num_tokens)  # ()
        loss = loss - config.entropy_coef * entropy_loss

    with torch.no_grad():
        is_low_clipped = (ratio < 1 - config.epsilon_low) & (advantages < 0)  # (B, T)
        is_high_clipped = (ratio > 1 + config.epsilon_high) & (advantages > 0)  # (B, T)
        metrics = {
            "pg_loss": aggregate_loss(pg_losses, mask, config.aggregation, config.max_length).item(),
            "approx_kl": masked_mean((ratio - 1) - log_ratio, mask).item(),
            "clipfrac_low": masked_mean(is_low_clipped.to(mask.dtype), mask).item(),
            "clipfrac_high": masked_mean(is_high_clipped.to(mask.dtype), mask).item(),
            "clipfrac": masked_mean((is_low_clipped | is_high_clipped).to(mask.dtype), mask).item(),
            "ratio_mean": masked_mean(ratio, mask).item(),
        }
        if config.dual_clip is not None:
            is_dual_clipped = (advantages < 0) & (ratio > config.dual_clip)  # (B, T)
            metrics["dual_clipfrac"] = masked_mean(is_dual_clipped.to(mask.dtype), mask).item()
        if per_token_kl is not None:
            metrics["kl"] = masked_mean(per_token_kl, mask).item()
        if entropy is not None:
            metrics["entropy"] = masked_mean(entropy, mask).item()
    return loss, metrics


# ----------------------------------------------------------------------------- value loss


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    clip_range: float | None = 0.2,
    aggregation: Aggregation = "token_mean",
    num_tokens: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Clipped value loss of PPO2 (OpenAI baselines; CleanRL `ppo.py`): 0.5 * max(unclipped, clipped).

    values (B, T) new critic predictions, old_values (B, T) the predictions at rollout time,
    returns (B, T) the targets (GAE returns or tree node values), mask (B, T). The new value may
    move at most clip_range from the old one before its error stops giving gradient; None turns
    clipping off (plain 0.5 * squared error).
    Metrics: value_loss, vf_clipfrac (tokens where the clipped error is the larger),
    explained_variance = 1 - Var(returns - old_values) / Var(returns) over the mask (NaN when
    Var(returns) = 0, as in CleanRL, where it is undefined). num_tokens: the minibatch's valid tokens
    when this call sees one micro-batch of it (see `aggregate_loss`).
    """
    if not (values.shape == old_values.shape == returns.shape == mask.shape):
        raise ValueError(
            f"values, old_values, returns and mask must share one shape; got {tuple(values.shape)}, "
            f"{tuple(old_values.shape)}, {tuple(returns.shape)}, {tuple(mask.shape)}"
        )
    if clip_range is not None and not clip_range > 0:
        raise ValueError(f"clip_range must be None or > 0; got {clip_range}")
    mask = mask.to(values.dtype)
    old_values = old_values.detach()
    returns = returns.detach()

    v_loss_unclipped = (values - returns).square()  # (B, T)
    if clip_range is None:
        v_loss_max = v_loss_unclipped  # (B, T)
        v_loss_clipped = v_loss_unclipped
    else:
        v_clipped = old_values + torch.clamp(values - old_values, -clip_range, clip_range)  # (B, T)
        v_loss_clipped = (v_clipped - returns).square()  # (B, T)
        v_loss_max = torch.maximum(v_loss_unclipped, v_loss_clipped)  # (B, T)
    loss = 0.5 * aggregate_loss(v_loss_max, mask, aggregation, num_tokens=num_tokens)  # ()

    with torch.no_grad():
        var_returns = masked_var(returns, mask, unbiased=False)
        var_residual = masked_var(returns - old_values, mask, unbiased=False)
        explained_variance = float("nan") if var_returns == 0 else (1 - var_residual / var_returns).item()
        metrics = {
            "value_loss": 0.5 * aggregate_loss(v_loss_max, mask, aggregation).item(),
            "vf_clipfrac": masked_mean((v_loss_clipped > v_loss_unclipped).to(mask.dtype), mask).item(),
            "explained_variance": explained_variance,
            "value_mean": masked_mean(values, mask).item(),
        }
    return loss, metrics


# ----------------------------------------------------------------------------- SFT


def sft_loss(logp: Tensor, mask: Tensor) -> Tensor:
    """Token-mean negative log-likelihood over the mask: logp (B, T) of the target tokens, mask (B, T)."""
    if logp.shape != mask.shape:
        raise ValueError(f"logp and mask must share one shape; got {tuple(logp.shape)} and {tuple(mask.shape)}")
    return -masked_mean(logp, mask)


def is_finite_loss(loss: Tensor) -> bool:
    """True when every entry of `loss` is finite; the trainer skips the update (and warns) otherwise."""
    return bool(torch.isfinite(loss).all())
