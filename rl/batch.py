"""Training rows from search trees: every root-to-leaf path becomes one row, token ids untouched.

A row holds the exact ids the engine sampled (prompt + response, right-padded), the engine's
behaviour log-probabilities, the leaf's reward, and the Monte-Carlo value of the tree node each
response token belongs to. Rows of one tree form one group (the trajectories of one prompt).

Node values. After the leaves are rewarded, the value of a node is the mean reward of the leaves in
its subtree: the Monte-Carlo estimate of the probability that a response passing through that step
ends correct (Math-Shepherd, Wang et al. 2024; TreeRL, Hou et al. 2025). These values are the
critic's regression targets and the input of the `tree` advantage estimator
(step advantage = V(node) - V(parent)).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from planner.tree import ROOT, SearchTree

__all__ = ["RolloutBatch", "reward_leaves", "monte_carlo_values", "batch_from_trees"]


def reward_leaves(tree: SearchTree, reward_fn: Callable[[str], float]) -> list[int]:
    """Give every leaf `reward_fn(response text)` as its reward; return the leaf indices.

    Unfinished leaves are rewarded too (their text usually has no answer and scores 0), so a search
    cut short by its budget still teaches the policy.
    """
    leaves = [i for i in tree.leaves() if i != ROOT]
    for leaf in leaves:
        tree[leaf].reward = float(reward_fn(tree.response_text(leaf)))
    return leaves


def monte_carlo_values(tree: SearchTree) -> list[float | None]:
    """Per node, the mean reward of the rewarded leaves below it (None where there are none)."""
    total = [0.0] * len(tree)
    count = [0] * len(tree)
    for leaf in tree.leaves():
        reward = tree[leaf].reward
        if reward is None:
            continue
        for node in tree.path(leaf):
            total[node] += reward
            count[node] += 1
    return [t / c if c else None for t, c in zip(total, count)]


@dataclass
class RolloutBatch:
    """B rows (one per trajectory), right-padded to length L = prompt + response.

    Position t of `old_logprobs`, `response_mask` and `token_values` describes token t of
    `input_ids`; a causal LM predicts token t from the logits at t - 1.
    """

    input_ids: torch.Tensor  # (B, L) long
    attention_mask: torch.Tensor  # (B, L) long: prompt and response tokens
    response_mask: torch.Tensor  # (B, L) float: sampled response tokens (forced ids excluded)
    old_logprobs: torch.Tensor  # (B, L) float: the engine's behaviour log-probability of token t
    token_values: torch.Tensor  # (B, L) float: Monte-Carlo value of the node that token t ends in
    rewards: torch.Tensor  # (B,) float: the leaf's reward
    group: torch.Tensor  # (B,) long: index of the tree (prompt) the row comes from
    prompt_lengths: list[int]
    path_values: list[list[float]]
    """Per row: V(root), V(step 1), ..., V(leaf) — the input of `rl.tree_step_advantages`."""
    step_lengths: list[list[int]]
    """Per row: token count of each step, to spread step values onto tokens."""
    texts: list[str]

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def select(self, index: Sequence[int]) -> "RolloutBatch":
        """The rows at `index` (a minibatch)."""
        idx = torch.as_tensor(list(index), dtype=torch.long)
        pick = lambda xs: [xs[i] for i in index]  # noqa: E731
        return RolloutBatch(self.input_ids[idx], self.attention_mask[idx], self.response_mask[idx],
                            self.old_logprobs[idx], self.token_values[idx], self.rewards[idx], self.group[idx],
                            pick(self.prompt_lengths), pick(self.path_values), pick(self.step_lengths),
                            pick(self.texts))


def batch_from_trees(trees: Sequence[SearchTree], pad_token_id: int) -> RolloutBatch:
    """One row per rewarded leaf of every tree (call `reward_leaves` first)."""
    rows = []
    for g, tree in enumerate(trees):
        values = monte_carlo_values(tree)
        for leaf in tree.leaves():
            if leaf == ROOT or tree[leaf].reward is None:
                continue
            path = tree.path(leaf)[1:]
            ids, logps, sampled, node_value, lengths = [], [], [], [], []
            for node in path:
                step = tree[node]
                ids += step.token_ids
                logps += step.logprobs
                sampled += [0.0 if step.forced else 1.0] * len(step.token_ids)
                node_value += [values[node]] * len(step.token_ids)
                lengths.append(len(step.token_ids))
            if not ids:
                continue
            rows.append((g, tree.prompt_ids, ids, logps, sampled, node_value, tree[leaf].reward,
                         [values[ROOT]] + [values[n] for n in path], lengths, tree.response_text(leaf)))
    if not rows:
        raise ValueError("no rewarded trajectories in these trees: call rl.batch.reward_leaves(tree, reward_fn) "
                         "on each tree first")
    width = max(len(r[1]) + len(r[2]) for r in rows)
    B = len(rows)
    input_ids = torch.full((B, width), pad_token_id, dtype=torch.long)
    attention = torch.zeros((B, width), dtype=torch.long)
    response = torch.zeros((B, width))
    old_logp = torch.zeros((B, width))
    token_values = torch.zeros((B, width))
    for b, (_, prompt, ids, logps, sampled, node_value, *_rest) in enumerate(rows):
        p, r = len(prompt), len(ids)
        input_ids[b, :p + r] = torch.tensor(prompt + ids)
        attention[b, :p + r] = 1
        response[b, p:p + r] = torch.tensor(sampled)
        old_logp[b, p:p + r] = torch.tensor(logps)
        token_values[b, p:p + r] = torch.tensor(node_value)
    return RolloutBatch(
        input_ids=input_ids, attention_mask=attention, response_mask=response, old_logprobs=old_logp,
        token_values=token_values, rewards=torch.tensor([r[6] for r in rows]),
        group=torch.tensor([r[0] for r in rows]), prompt_lengths=[len(r[1]) for r in rows],
        path_values=[r[7] for r in rows], step_lengths=[r[8] for r in rows], texts=[r[9] for r in rows])
