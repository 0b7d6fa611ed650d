"""The math of the advantage estimators, one function per formula (the trainer picks them through
`rl.estimators.ADVANTAGE_ESTIMATORS`, which adapts each to the batch).

Shapes. The group-based estimators share one signature,

    fn(rewards: Tensor (P, G), **cfg) -> Tensor (P, G)

with P prompts and G sampled completions per prompt (row p holds the G samples of prompt p). They
return one sequence-level advantage per completion; `broadcast_to_tokens` spreads it over the
response tokens. The token-level estimators (`reward_to_go`, `gae`) take per-token rewards (B, T)
with a response mask (B, T) (right padding).

Degenerate groups. A group whose G rewards are all equal (including G = 1) carries no learning
signal under a group baseline: every group estimator returns exactly zero for it, never NaN.
`nonzero_variance_groups` gives the mask to drop such groups instead (DAPO dynamic sampling).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

# TRL's GRPOTrainer divides by (std + 1e-4); the same constant keeps `grpo` equal to TRL's.
DEFAULT_STD_EPS = 1e-4


def _check_grouped(rewards: Tensor) -> None:
    if rewards.dim() != 2:
        raise ValueError(
            f"group advantage estimators take rewards of shape (P, G) (prompts x samples per prompt); "
            f"got shape {tuple(rewards.shape)}"
        )


def nonzero_variance_groups(rewards: Tensor) -> Tensor:
    """Bool mask (P,): True for groups whose rewards are not all equal.

    Dynamic sampling (Yu et al. 2025, DAPO, section 3.2) keeps only these groups: a group where
    every sample got the same reward has zero advantage under any group baseline, so it adds no
    policy gradient and only dilutes the batch. A group of one sample (G = 1) is never kept.
    """
    _check_grouped(rewards)
    return (rewards != rewards[:, :1]).any(dim=1)  # (P,)


def _group_std(rewards: Tensor) -> Tensor:
    """Unbiased (Bessel-corrected, torch's default) std over the group, (P, 1); zero when G = 1."""
    if rewards.shape[1] < 2:
        return torch.zeros_like(rewards[:, :1])
    return rewards.std(dim=1, keepdim=True)  # (P, 1)


def _batch_std(x: Tensor) -> Tensor:
    """Unbiased std of all entries (0-dim); zero when there is a single entry."""
    if x.numel() < 2:
        return torch.zeros((), dtype=x.dtype, device=x.device)
    return x.std()


# ----------------------------------------------------------------------------- group estimators


def reinforce(rewards: Tensor, baseline: float = 0.0) -> Tensor:
    """REINFORCE (Williams 1992): the raw sequence reward minus an optional constant baseline. (P, G)."""
    _check_grouped(rewards)
    return rewards - baseline


def remax(rewards: Tensor, greedy_rewards: Tensor) -> Tensor:
    """ReMax (Li et al. 2023): reward minus the reward of the prompt's greedy completion.

    `greedy_rewards` (P,) is the reward of one greedy (argmax) decode per prompt; it is a baseline
    that does not depend on the sampled completions, so the estimate stays unbiased without a critic.
    """
    _check_grouped(rewards)
    if greedy_rewards.shape != rewards.shape[:1]:
        raise ValueError(
            f"remax needs greedy_rewards of shape (P,) = ({rewards.shape[0]},); got {tuple(greedy_rewards.shape)}"
        )
    return rewards - greedy_rewards.unsqueeze(1)  # (P, G)


def rloo(rewards: Tensor) -> Tensor:
    """RLOO (Ahmadian et al. 2024): reward minus the mean reward of the other G - 1 samples.

    r_i - mean_{j != i} r_j = G / (G - 1) * (r_i - mean_j r_j). With G = 1 there is no other
    sample, and the advantage is zero.
    """
    _check_grouped(rewards)
    num_samples = rewards.shape[1]  # G
    if num_samples < 2:
        return torch.zeros_like(rewards)
    group_mean = rewards.mean(dim=1, keepdim=True)  # (P, 1)
    return num_samples / (num_samples - 1) * (rewards - group_mean)  # (P, G)


def grpo(rewards: Tensor, eps: float = DEFAULT_STD_EPS) -> Tensor:
    """GRPO outcome supervision (Shao et al. 2024, DeepSeekMath, eq. in section 4.1.2).

    A_i = (r_i - mean(r)) / (std(r) + eps) over the G samples of one prompt. The std is the
    unbiased one (Bessel's correction, torch's default), as TRL's GRPOTrainer computes it
    (`trl.trainer.utils.nanstd`, scale_rewards="group"), and eps = 1e-4 as there; the paper does
    not say which std. Zero-variance groups (and G = 1) give exactly 0.
    """
    _check_grouped(rewards)
    group_mean = rewards.mean(dim=1, keepdim=True)  # (P, 1)
    group_std = _group_std(rewards)  # (P, 1)
    advantages = (rewards - group_mean) / (group_std + eps)  # (P, G)
    keep = nonzero_variance_groups(rewards).unsqueeze(1)  # (P, 1)
    return torch.where(keep, advantages, torch.zeros_like(advantages))


def dr_grpo(rewards: Tensor) -> Tensor:
    """Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training"): r - group mean, no std.

    Dividing by the group std up-weights prompts that are almost always or almost never solved
    (a question-level difficulty bias); Dr. GRPO drops it. TRL: scale_rewards="none".
    """
    _check_grouped(rewards)
    group_mean = rewards.mean(dim=1, keepdim=True)  # (P, 1)
    advantages = rewards - group_mean  # (P, G)
    keep = nonzero_variance_groups(rewards).unsqueeze(1)  # (P, 1)
    return torch.where(keep, advantages, torch.zeros_like(advantages))


def reinforce_pp(rewards: Tensor, kl_penalty: Tensor | None = None, eps: float = DEFAULT_STD_EPS) -> Tensor:
    """REINFORCE++ with k = 1 sample per prompt (Hu 2025): global normalisation, no group baseline.

    The return of a sequence is its reward minus its KL penalty (`kl_penalty` (P, G), already
    scaled by beta and summed over tokens: with gamma = 1 the token-level penalties of the paper
    add up to one number per sequence; default zero). The returns are whitened over the whole
    batch (mean and unbiased std of all P * G entries). A batch whose returns are all equal gives 0.
    """
    _check_grouped(rewards)
    if kl_penalty is None:
        kl_penalty = torch.zeros_like(rewards)
    if kl_penalty.shape != rewards.shape:
        raise ValueError(
            f"kl_penalty must have the shape of rewards {tuple(rewards.shape)}; got {tuple(kl_penalty.shape)}"
        )
    returns = rewards - kl_penalty  # (P, G)
    if returns.numel() < 2 or not bool((returns != returns.flatten()[0]).any()):
        return torch.zeros_like(returns)
    batch_mean, batch_std = returns.mean(), returns.std()  # (), () unbiased std
    return (returns - batch_mean) / (batch_std + eps)  # (P, G)


def reinforce_pp_baseline(
    rewards: Tensor,
    eps: float = DEFAULT_STD_EPS,
    batch_std_of: Literal["centred", "rewards"] = "centred",
) -> Tensor:
    """REINFORCE++-Baseline (Hu 2025): subtract the group mean, then divide by the batch std.

    batch_std_of="centred" (the paper, OpenRLHF): the std of the group-centred rewards over the
    whole batch. batch_std_of="rewards": the std of the raw rewards over the batch, which is TRL's
    scale_rewards="batch" ("Tricks or Traps", Liu et al. 2025). The paper also re-centres by the
    batch mean of the centred rewards; that mean is zero by construction, so it is left out.
    Zero-variance groups give exactly 0.
    """
    _check_grouped(rewards)
    if batch_std_of not in ("centred", "rewards"):
        raise ValueError(f"batch_std_of must be one of 'centred', 'rewards'; got {batch_std_of!r}")
    group_mean = rewards.mean(dim=1, keepdim=True)  # (P, 1)
    centred = rewards - group_mean  # (P, G)
    batch_std = _batch_std(centred if batch_std_of == "centred" else rewards)  # ()
    advantages = centred / (batch_std + eps)  # (P, G)
    keep = nonzero_variance_groups(rewards).unsqueeze(1)  # (P, 1)
    return torch.where(keep, advantages, torch.zeros_like(advantages))


# ----------------------------------------------------------------------------- token-level estimators


def _check_tokens(name: str, **tensors: Tensor) -> None:
    shapes = {key: tuple(t.shape) for key, t in tensors.items()}
    if len(set(shapes.values())) != 1 or any(len(s) != 2 for s in shapes.values()):
        raise ValueError(f"{name} takes tensors of one shape (B, T); got {shapes}")


def reward_to_go(rewards: Tensor, mask: Tensor, gamma: float = 1.0) -> Tensor:
    """REINFORCE with reward-to-go: G_t = sum_{k >= t} gamma^(k - t) r_k over the valid tokens.

    rewards (B, T) per-token rewards, mask (B, T) response mask (1 on valid tokens). Rewards on
    masked tokens are ignored and the returned advantages are zero there.
    """
    _check_tokens("reward_to_go", rewards=rewards, mask=mask)
    mask = mask.to(rewards.dtype)
    masked_rewards = rewards * mask  # (B, T)
    returns = torch.zeros_like(rewards)  # (B, T)
    running = torch.zeros_like(rewards[:, 0])  # (B,)
    for t in reversed(range(rewards.shape[1])):
        running = masked_rewards[:, t] + gamma * running
        returns[:, t] = running
    return returns * mask


def gae(
    rewards: Tensor, values: Tensor, mask: Tensor, gamma: float = 1.0, lam: float = 0.95
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation (Schulman et al. 2016) for PPO: (advantages, returns), (B, T).

    delta_t = r_t + gamma * V(s_{t+1}) - V(s_t);  A_t = delta_t + gamma * lam * A_{t+1};
    returns_t = A_t + V(s_t) (the critic's regression target).
    Right padding: `mask` (B, T) is 1 on a contiguous prefix of valid tokens. The value after the
    last valid token is 0 (the episode ends there), and the recursion does not reach into padding;
    advantages and returns are 0 on padded positions.
    """
    _check_tokens("gae", rewards=rewards, values=values, mask=mask)
    mask = mask.to(rewards.dtype)
    num_tokens = rewards.shape[1]  # T
    advantages = torch.zeros_like(rewards)  # (B, T)
    last_gae = torch.zeros_like(rewards[:, 0])  # (B,)
    for t in reversed(range(num_tokens)):
        # mask of the next token: 0 after the last valid token, so V(s_{T_b}) = 0 and A_{T_b} = 0
        if t + 1 < num_tokens:
            next_mask = mask[:, t + 1]  # (B,)
            next_value = values[:, t + 1] * next_mask  # (B,)
        else:
            next_mask = next_value = torch.zeros_like(last_gae)  # (B,)
        delta = rewards[:, t] + gamma * next_value - values[:, t]  # (B,)
        last_gae = delta + gamma * lam * next_mask * last_gae  # (B,)
        advantages[:, t] = last_gae
    advantages = advantages * mask
    returns = (advantages + values) * mask
    return advantages, returns


# ----------------------------------------------------------------------------- helpers


def broadcast_to_tokens(sequence_advantages: Tensor, mask: Tensor) -> Tensor:
    """Sequence advantages (B,) x response mask (B, T) -> token advantages (B, T), zero on padding."""
    if sequence_advantages.dim() != 1 or mask.dim() != 2 or sequence_advantages.shape[0] != mask.shape[0]:
        raise ValueError(
            f"need sequence advantages (B,) and mask (B, T); got {tuple(sequence_advantages.shape)} "
            f"and {tuple(mask.shape)}"
        )
    return sequence_advantages.unsqueeze(1) * mask.to(sequence_advantages.dtype)  # (B, T)
