"""DPO's pairwise losses on sequence log-probability ratios (Rafailov et al. 2023, "Direct Preference
Optimization"): sigmoid (cDPO with label smoothing), robust (Chowdhury et al. 2024) and IPO (Azar et
al. 2023), as TRL's DPOTrainer computes them (tests/test_dpo.py checks them against it)."""

from __future__ import annotations

from typing import Literal, get_args

import torch
import torch.nn.functional as F
from torch import Tensor


DPOLossType = Literal["sigmoid", "ipo", "robust"]
DPO_LOSS_TYPES: tuple[str, ...] = get_args(DPOLossType)


def _dpo_sigmoid(logits: Tensor, beta: float, smoothing: float) -> Tensor:  # DPO; cDPO when smoothing > 0
    return -F.logsigmoid(beta * logits) * (1 - smoothing) - F.logsigmoid(-beta * logits) * smoothing


def _dpo_robust(logits: Tensor, beta: float, smoothing: float) -> Tensor:  # rDPO, TRL's "robust"
    clean = -(1 - smoothing) * F.logsigmoid(beta * logits)
    flipped = -smoothing * F.logsigmoid(-beta * logits)
    return (clean - flipped) / (1 - 2 * smoothing)


def _dpo_ipo(logits: Tensor, beta: float, smoothing: float) -> Tensor:  # IPO on per-token mean log-ratios
    return (logits - 1 / (2 * beta)) ** 2


DPO_LOSSES = {"sigmoid": _dpo_sigmoid, "robust": _dpo_robust, "ipo": _dpo_ipo}
"""Per-pair DPO losses (B,) from the log-ratio difference (B,), beta and the label smoothing."""


def dpo_loss(
    policy_chosen_logps: Tensor,
    policy_rejected_logps: Tensor,
    ref_chosen_logps: Tensor,
    ref_rejected_logps: Tensor,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
    loss_type: DPOLossType = "sigmoid",
    chosen_lengths: Tensor | None = None,
    rejected_lengths: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """DPO and its variants from sequence log-probs (B,) each (the sum over a continuation's tokens).

    logits = (log pi(y_w) - log ref(y_w)) - (log pi(y_l) - log ref(y_l)), then per `loss_type`:
      "sigmoid": -(1 - ls) * log sigmoid(beta * logits) - ls * log sigmoid(-beta * logits) (Rafailov et al.
        2023, eq. 7; with ls > 0 conservative DPO, Mitchell 2023, where the preference label is wrong
        with probability ls);
      "robust": robust DPO (Chowdhury et al. 2024): (-(1 - ls) log sigmoid(beta logits) + ls log
        sigmoid(-beta logits)) / (1 - 2 ls), unbiased under label noise ls; TRL's "robust";
      "ipo": (logits' - 1 / (2 beta))^2 (Azar et al. 2023, eq. 17, beta = tau), where logits' uses each
        sequence's log-ratio divided by its token count (`chosen_lengths`, `rejected_lengths`), as TRL
        does (the IPO authors' normalisation).
    Metrics: the implicit rewards beta * (log pi - log ref) of chosen and rejected (unnormalised), their
    margin and the accuracy (chosen reward > rejected reward), as TRL logs them.
    """
    if beta <= 0:
        raise ValueError(f"beta must be > 0; got {beta}")
    if not 0 <= label_smoothing < 0.5:
        raise ValueError(f"label_smoothing must be in [0, 0.5); got {label_smoothing}")
    if loss_type not in DPO_LOSSES:
        raise ValueError(f"loss_type must be one of {list(DPO_LOSS_TYPES)}; got {loss_type!r}")
    if loss_type == "ipo" and label_smoothing:
        raise ValueError(f"label_smoothing applies to loss_type 'sigmoid' (cDPO) and 'robust' (rDPO), not 'ipo'; "
                         f"got label_smoothing={label_smoothing}")
    chosen_log_ratio = policy_chosen_logps - ref_chosen_logps  # (B,)
    rejected_log_ratio = policy_rejected_logps - ref_rejected_logps  # (B,)
    if loss_type == "ipo":
        if chosen_lengths is None or rejected_lengths is None:
            raise ValueError("loss_type 'ipo' needs chosen_lengths and rejected_lengths (B,): token counts")
        logits = chosen_log_ratio / chosen_lengths.clamp(min=1) - rejected_log_ratio / rejected_lengths.clamp(min=1)
    else:
        logits = chosen_log_ratio - rejected_log_ratio  # (B,)
    losses = DPO_LOSSES[loss_type](logits, beta, label_smoothing)  # (B,)
    loss = losses.mean()
    with torch.no_grad():
        chosen_rewards = beta * chosen_log_ratio  # (B,)
        rejected_rewards = beta * rejected_log_ratio  # (B,)
        metrics = {
            "dpo_loss": loss.item(),
            "rewards_chosen": chosen_rewards.mean().item(),
            "rewards_rejected": rejected_rewards.mean().item(),
            "reward_margin": (chosen_rewards - rejected_rewards).mean().item(),
            "reward_accuracy": (chosen_rewards > rejected_rewards).float().mean().item(),
        }
    return loss, metrics
