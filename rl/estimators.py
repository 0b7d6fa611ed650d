"""The advantage estimators the trainer can use: one registry, one signature.

    estimator(inputs: AdvantageInputs) -> Advantages

`AdvantageInputs` holds everything any estimator may read for B rows of length L (the rows of a
`RolloutBatch`); each entry of `ADVANTAGE_ESTIMATORS` is a small function that reads what it needs
and calls the math in `rl.advantages` (where each formula is written out with its paper and checked
against TRL). The trainer turns its config string into one of these once and calls it; it never
branches on the estimator's name.

Groups may differ in size (the leaves of different search trees): group estimators run per group,
REINFORCE++ normalises over the whole batch, and REINFORCE++-baseline centres per group and scales
by the batch std of the centred rewards. KL in the reward (`kl_coef` > 0) is subtracted from the
sequence reward (summed over tokens, gamma = 1) for sequence estimators, and per token for the
token-level ones (`reward_to_go`, `gae`), as in Ziegler et al. 2019.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from rl import advantages as adv
from rl import distributed
from rl.kl import kl_penalized_rewards

__all__ = ["AdvantageInputs", "Advantages", "AdvantageEstimator", "ADVANTAGE_ESTIMATORS", "NEEDS_CRITIC",
           "estimate"]


@dataclass
class AdvantageInputs:
    """What an estimator may read. B rows (trajectories), L positions (prompt + response)."""

    rewards: Tensor
    """(B,) the leaf's reward (verifier)."""
    group: Tensor
    """(B,) long: which tree (prompt) each row comes from."""
    mask: Tensor
    """(B, L) float: the sampled response tokens that are trained on."""
    kl: Tensor
    """(B, L) per-token KL of the behaviour policy to the reference (zeros without a reference)."""
    kl_coef: float
    """Beta of the KL-in-the-reward penalty (0 when the KL goes in the loss or is off)."""
    values: Tensor
    """(B, L) the critic's value at position t (of the prefix ending with token t), before the update;
    zeros without a critic."""
    node_values: Tensor
    """(B, L) Monte-Carlo value of the tree node token t belongs to (`RolloutBatch.token_values`)."""
    parent_values: Tensor
    """(B, L) Monte-Carlo value of that node's parent."""
    node_leaves: Tensor | None = None
    """(B, L) how many rewarded leaves lie below that node (`RolloutBatch.token_leaves`; TreeRL)."""
    root_values: Tensor | None = None
    """(B,) Monte-Carlo value of the root of each row's tree (`RolloutBatch.root_values`; TreeRL)."""
    progress: Tensor | None = None
    """(B, L) the progress of the step token t belongs to (`RolloutBatch.token_progress`,
    `rl.batch.step_progress`)."""
    progress_coef: float = 1.0
    """Weight of `progress` in the `grpo_progress` estimator (alpha of Setlur et al. 2024)."""
    greedy_rewards: Tensor | None = None
    """(G,) reward of one greedy response per group, indexed by group id (ReMax); None otherwise."""
    gamma: float = 1.0
    """Discount of GAE and reward-to-go."""
    lam: float = 0.95
    """GAE's lambda."""

    def sequence_rewards(self) -> Tensor:
        """(B,) reward minus beta * the row's summed KL (gamma = 1)."""
        return self.rewards - self.kl_coef * (self.kl * self.mask).sum(-1)

    def token_rewards(self) -> Tensor:
        """(B, L) -beta * KL_t on trained tokens, plus the reward on the last one."""
        return kl_penalized_rewards(self.rewards, self.kl, self.mask, self.kl_coef)


@dataclass
class Advantages:
    """An estimator's output."""

    advantages: Tensor
    """(B, L) token advantages, 0 off the mask."""
    value_targets: Tensor | None = None
    """(B, L) regression targets for the critic's value at each position, when the estimator defines
    them (GAE returns); None means the trainer's default targets (Monte-Carlo node values)."""
    value_mask: Tensor | None = None
    """(B, L) where `value_targets` apply."""


AdvantageEstimator = Callable[[AdvantageInputs], Advantages]


def _per_group(fn: Callable[..., Tensor], inputs: AdvantageInputs, **cfg) -> Tensor:
    """(B,) sequence advantages from a (P, G) group estimator applied to each group on its own."""
    rewards = inputs.sequence_rewards()
    out = torch.zeros_like(rewards)
    for g in inputs.group.unique():
        rows = (inputs.group == g).nonzero().squeeze(-1)
        extra = {k: v(int(g)) for k, v in cfg.items()}
        out[rows] = fn(rewards[rows][None], **extra)[0]
    return out


def _sequence(fn: Callable[[AdvantageInputs], Tensor]) -> AdvantageEstimator:
    """An estimator that gives one advantage per row, spread over its trained tokens."""
    def estimator(inputs: AdvantageInputs) -> Advantages:
        return Advantages(adv.broadcast_to_tokens(fn(inputs), inputs.mask))
    estimator.__doc__ = fn.__doc__
    return estimator


@_sequence
def reinforce(inputs: AdvantageInputs) -> Tensor:
    """REINFORCE: the sequence reward itself (`rl.advantages.reinforce`)."""
    return _per_group(adv.reinforce, inputs)


@_sequence
def grpo(inputs: AdvantageInputs) -> Tensor:
    """GRPO: (r - group mean) / (group std + eps) (`rl.advantages.grpo`)."""
    return _per_group(adv.grpo, inputs)


@_sequence
def dr_grpo(inputs: AdvantageInputs) -> Tensor:
    """Dr. GRPO: r - group mean (`rl.advantages.dr_grpo`)."""
    return _per_group(adv.dr_grpo, inputs)


@_sequence
def rloo(inputs: AdvantageInputs) -> Tensor:
    """RLOO: r - mean of the group's other rewards (`rl.advantages.rloo`)."""
    return _per_group(adv.rloo, inputs)


@_sequence
def remax(inputs: AdvantageInputs) -> Tensor:
    """ReMax: r - the reward of the group's greedy response (`rl.advantages.remax`)."""
    if inputs.greedy_rewards is None:
        raise ValueError("the remax estimator needs greedy_rewards (one greedy response per group)")
    return _per_group(adv.remax, inputs, greedy_rewards=lambda g: inputs.greedy_rewards[g:g + 1])


def _batch_mean_std(values: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Mean and unbiased std of `values` (where `mask` is 1) over the whole batch: over every rank's
    rows when the learner is data parallel (rl/distributed.py), so each rank normalises as one process
    would. The std is 0 with fewer than two values."""
    mask = torch.ones_like(values) if mask is None else mask.to(values.dtype)
    count = distributed.all_sum(mask.sum())
    total = distributed.all_sum((values * mask).sum())
    mean = total / count.clamp(min=1)
    squares = distributed.all_sum((((values - mean.to(values.dtype)) ** 2) * mask).sum())
    std = (squares / (count - 1)).sqrt() if count > 1 else torch.zeros((), dtype=torch.float64)
    return mean.to(values.dtype), std.to(values.dtype)


@_sequence
def reinforce_pp(inputs: AdvantageInputs) -> Tensor:
    """REINFORCE++ (k = 1): returns whitened over the whole batch (`rl.advantages.reinforce_pp`; the
    mean and std are the whole batch's, over every rank)."""
    returns = inputs.sequence_rewards()  # (B,)
    mean, std = _batch_mean_std(returns)
    if std == 0:  # a batch whose returns are all equal carries no signal
        return torch.zeros_like(returns)
    return (returns - mean) / (std + adv.DEFAULT_STD_EPS)


@_sequence
def reinforce_pp_baseline(inputs: AdvantageInputs) -> Tensor:
    """REINFORCE++-baseline: r - group mean, divided by the batch std of the centred rewards
    (`rl.advantages.reinforce_pp_baseline`, which takes equal groups; here groups may differ in size,
    and the std is the whole batch's, over every rank)."""
    centred = _per_group(adv.dr_grpo, inputs)  # (B,) r - group mean; exactly 0 for flat groups
    return centred / (_batch_mean_std(centred)[1] + adv.DEFAULT_STD_EPS)


def reward_to_go(inputs: AdvantageInputs) -> Advantages:
    """REINFORCE with reward-to-go over token rewards (KL per token, reward on the last token)."""
    return Advantages(adv.reward_to_go(inputs.token_rewards(), inputs.mask, gamma=inputs.gamma))


def gae(inputs: AdvantageInputs) -> Advantages:
    """PPO's GAE (Schulman et al. 2016) with the critic, whitened over the batch's tokens.

    The critic's value at position t - 1 is the value of the state before token t is sampled, so
    V(s_t) = values[t - 1]; the return of token t is therefore the target of the value at t - 1.
    """
    mask = inputs.mask
    state_values = torch.nn.functional.pad(inputs.values[:, :-1], (1, 0))  # (B, L): V(s_t) = values[t - 1]
    advantages, returns = adv.gae(inputs.token_rewards(), state_values, mask, gamma=inputs.gamma, lam=inputs.lam)
    mean, std = _batch_mean_std(advantages, mask)  # whitened over the whole batch's tokens (rl.losses.masked_whiten)
    advantages = (advantages - mean) * torch.rsqrt(std**2 + 1e-8) * mask
    targets = torch.nn.functional.pad(returns[:, 1:], (0, 1))  # (B, L): the value at t - 1 regresses return t
    target_mask = torch.nn.functional.pad(mask[:, 1:], (0, 1))
    return Advantages(advantages, targets, target_mask)


def tree(inputs: AdvantageInputs) -> Advantages:
    """Step advantages from the search tree: V(node) - V(parent) at every token of the step (the node
    values are Monte-Carlo means of the leaf rewards below; TreeRL's local term, Hou et al. 2025)."""
    return Advantages((inputs.node_values - inputs.parent_values) * inputs.mask)


def treerl(inputs: AdvantageInputs) -> Advantages:
    """TreeRL's process supervision (Hou et al. 2025, sec. 3.2), at every token of step s:

        R(s) = (GA(s) + LA(s)) / sqrt(|L(s)|),  GA(s) = V(s) - V(root),  LA(s) = V(s) - V(parent(s))

    where V is the Monte-Carlo value (mean reward of the leaves below) and |L(s)| the number of leaves
    below s: a step shared by many leaves is down-weighted, so early steps do not dominate the gradient.
    """
    if inputs.node_leaves is None or inputs.root_values is None:
        raise ValueError("the 'treerl' estimator needs node_leaves and root_values (RolloutBatch.token_leaves "
                         "and .root_values); build the batch with rl.batch.batch_from_trees")
    node = inputs.node_values
    global_term = node - inputs.root_values[:, None]  # (B, L)
    local_term = node - inputs.parent_values  # (B, L)
    weight = torch.rsqrt(inputs.node_leaves.clamp(min=1.0))  # (B, L); off the mask the count is 0
    return Advantages((global_term + local_term) * weight * inputs.mask)


def grpo_progress(inputs: AdvantageInputs) -> Advantages:
    """GRPO's outcome advantage plus a process advantage at every token of each step (Setlur et al. 2024,
    "Rewarding Progress: Scaling Automated Process Verifiers for LLM Reasoning"):

        A_t = grpo(row) + progress_coef * (Q(step) - mean Q of the step and its siblings)

    where Q is the value the search gave the step (its reward when it is a rewarded leaf, else the
    scorer's value of its prefix; `rl.batch.step_progress`). With a step-level verifier as the scorer,
    a step that turns a correct prefix wrong, where its sibling does not, is pushed down even in a
    response whose outcome hides it. Departure: the paper's A is measured with a separate prover
    policy's rollouts; here it is the search's own scorer, read from the tree (no extra rollouts)."""
    if inputs.progress is None:
        raise ValueError("the 'grpo_progress' estimator needs progress (RolloutBatch.token_progress); build the "
                         "batch with rl.batch.batch_from_trees")
    outcome = grpo(inputs).advantages  # (B, L)
    return Advantages((outcome + inputs.progress_coef * inputs.progress) * inputs.mask)


ADVANTAGE_ESTIMATORS: dict[str, AdvantageEstimator] = {
    "reinforce": reinforce,
    "reward_to_go": reward_to_go,
    "remax": remax,
    "rloo": rloo,
    "grpo": grpo,
    "dr_grpo": dr_grpo,
    "reinforce_pp": reinforce_pp,
    "reinforce_pp_baseline": reinforce_pp_baseline,
    "gae": gae,
    "tree": tree,
    "treerl": treerl,
    "grpo_progress": grpo_progress,
}
"""Name -> estimator(AdvantageInputs) -> Advantages."""

NEEDS_CRITIC = frozenset({"gae"})
"""Estimators that read the critic's values."""


def estimate(name: str, inputs: AdvantageInputs) -> Advantages:
    """Look `name` up in `ADVANTAGE_ESTIMATORS` and run it."""
    if name not in ADVANTAGE_ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {name!r}; known: {', '.join(sorted(ADVANTAGE_ESTIMATORS))}")
    return ADVANTAGE_ESTIMATORS[name](inputs)
