"""Training rows from search trees: every root-to-leaf path becomes one row, token ids untouched.

A row holds the exact ids the engine sampled (prompt + response, right-padded), the engine's
behaviour log-probabilities, the leaf's reward, and, for every response token, the Monte-Carlo value
of the tree node the token belongs to and of that node's parent. Rows of one tree form one group
(the trajectories of one prompt).

Node values. After the leaves are rewarded, the value of a node is the mean reward of the leaves in
its subtree: the Monte-Carlo estimate of the probability that a response passing through that step
ends correct (Math-Shepherd, Wang et al. 2024; TreeRL, Hou et al. 2025). They are the critic's
regression targets, and the `tree` advantage estimator reads them: the step advantage
V(node) - V(parent) is `token_values - parent_values` at every token of that step. The values are
spread onto tokens here, once, and so is each step's progress (`step_progress`: its value as the
search saw it, minus its siblings' mean), which the `grpo_progress` estimator reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import torch

from planner.tree import ROOT, SearchTree
from rl.packing import PackedTree, group_leaves, pack_tree

__all__ = ["Row", "RolloutBatch", "reward_leaves", "monte_carlo_values", "leaf_counts", "step_progress",
           "trained_leaves", "rows_from_tree", "batch_from_trees"]


def reward_leaves(tree: SearchTree, reward_fn, problem) -> list[int]:
    """Give every leaf `reward_fn(response text, problem)` as its reward; return the leaf indices.

    Unfinished leaves are rewarded too (their text usually has no answer and scores 0), so a search
    cut short by its budget still teaches the policy.
    """
    leaves = [i for i in tree.leaves() if i != ROOT]
    for leaf in leaves:
        tree[leaf].reward = float(reward_fn(tree.response_text(leaf), problem))
    return leaves


def monte_carlo_values(tree: SearchTree) -> list[float | None]:
    """Per node, the mean reward of the rewarded leaves below it (None where there are none)."""
    total, count = _leaf_rewards_below(tree)
    return [t / c if c else None for t, c in zip(total, count)]


def leaf_counts(tree: SearchTree) -> list[int]:
    """Per node, how many rewarded leaves lie below it (|L(s)| of TreeRL's leaf weighting)."""
    return _leaf_rewards_below(tree)[1]


def step_progress(tree: SearchTree) -> list[float]:
    """Per node, the progress of its step as the search's value saw it: Q(node) minus the mean Q of the
    node and its siblings (Setlur et al. 2024's process advantage A(s, a) = Q(s, a) - V(s), with V(s)
    the mean over the actions the search tried from s). Q is the node's reward when it has one (a
    rewarded leaf), else the scorer's value `node.score`; a node without either, or whose siblings are
    all without one, gets 0.0, as does the root. An only child gets 0.0: no alternative to compare."""
    def q(node: int) -> float | None:
        n = tree[node]
        return n.reward if n.reward is not None else n.score

    progress = [0.0] * len(tree)
    for parent in range(len(tree)):
        valued = [(c, q(c)) for c in tree[parent].children if q(c) is not None]
        if len(valued) < 2:
            continue
        mean = sum(v for _, v in valued) / len(valued)
        for child, value in valued:
            progress[child] = value - mean
    return progress


def _leaf_rewards_below(tree: SearchTree) -> tuple[list[float], list[int]]:
    """Per node, the summed reward and the number of the rewarded leaves in its subtree."""
    total = [0.0] * len(tree)
    count = [0] * len(tree)
    for leaf in tree.leaves():
        reward = tree[leaf].reward
        if reward is None:
            continue
        for node in tree.path(leaf):
            total[node] += reward
            count[node] += 1
    return total, count


@dataclass(frozen=True)
class Row:
    """One root-to-leaf path of one tree, as the learner trains on it. Lists are per response token."""

    group: int
    """Index of the tree (prompt) among the batch's trees."""
    prompt_ids: list[int]
    response_ids: list[int]
    """The engine's sampled ids along the path (forced ids included)."""
    logprobs: list[float]
    """Behaviour log-probability of each response id (0.0 for forced ids)."""
    sampled: list[float]
    """1.0 for sampled ids, 0.0 for ids the strategy forced (no gradient through them)."""
    node_values: list[float]
    """V(node) of the node each response id belongs to."""
    parent_values: list[float]
    """V(parent) of that node (the root's value for the first step)."""
    node_leaves: list[float]
    """|L(node)|: the rewarded leaves below the node each response id belongs to."""
    node_progress: list[float]
    """`step_progress` of the node each response id belongs to."""
    root_value: float
    """V(root): the mean reward of the tree's rewarded leaves."""
    reward: float
    """The leaf's reward."""
    text: str
    """Decoded response."""


def trained_leaves(tree: SearchTree) -> list[int]:
    """The leaves that become rows: rewarded, with at least one response token (in leaf order)."""
    return [leaf for leaf in tree.leaves()
            if leaf != ROOT and tree[leaf].reward is not None and tree.response_ids(leaf)]


def rows_from_tree(tree: SearchTree, group: int) -> list[Row]:
    """One `Row` per trained leaf of `tree` (see `trained_leaves`)."""
    values, leaves, progress = monte_carlo_values(tree), leaf_counts(tree), step_progress(tree)
    rows = []
    for leaf in trained_leaves(tree):
        path = tree.trajectory(leaf)
        node_values, parent_values, node_leaves, node_progress = [], [], [], []
        for node, (start, end) in zip(path.nodes, path.step_spans):
            node_values += [values[node]] * (end - start)
            parent_values += [values[tree[node].parent]] * (end - start)
            node_leaves += [float(leaves[node])] * (end - start)
            node_progress += [progress[node]] * (end - start)
        rows.append(Row(group=group, prompt_ids=path.prompt_ids, response_ids=path.response_ids,
                        logprobs=path.logprobs, sampled=[float(s) for s in path.sampled_mask],
                        node_values=node_values, parent_values=parent_values, node_leaves=node_leaves,
                        node_progress=node_progress, root_value=values[ROOT], reward=float(tree[leaf].reward),
                        text=path.text))
    return rows


@dataclass
class RolloutBatch:
    """B rows (one per trajectory), right-padded to length L = the longest prompt + response.

    Position t of every (B, L) tensor describes token t of `input_ids`; a causal LM predicts token t
    from the logits at t - 1. Response-only quantities are 0 on prompt and padding positions.
    """

    input_ids: torch.Tensor  # (B, L) long
    attention_mask: torch.Tensor  # (B, L) long: prompt and response tokens
    response_mask: torch.Tensor  # (B, L) float: sampled response tokens (forced ids excluded)
    old_logprobs: torch.Tensor  # (B, L) float: the engine's behaviour log-probability of token t
    token_values: torch.Tensor  # (B, L) float: Monte-Carlo value of the node that token t belongs to
    parent_values: torch.Tensor  # (B, L) float: Monte-Carlo value of that node's parent
    token_leaves: torch.Tensor  # (B, L) float: rewarded leaves below that node
    token_progress: torch.Tensor  # (B, L) float: `step_progress` of that node
    root_values: torch.Tensor  # (B,) float: Monte-Carlo value of the row's root
    rewards: torch.Tensor  # (B,) float: the leaf's reward
    group: torch.Tensor  # (B,) long: index of the tree (prompt) the row comes from
    prompt_lengths: torch.Tensor  # (B,) long
    row_pack: torch.Tensor  # (B,) long: which of `packs` holds the row
    packed_index: torch.Tensor  # (B, L) long: where token t of the row sits in that packed tree (-1: padding)
    texts: list[str]
    packs: list[PackedTree]
    """The trees packed (each node's tokens once; rl/packing.py) for the packed learner: one or more
    per tree, each holding whole rows."""

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def select(self, index: Sequence[int]) -> "RolloutBatch":
        """The rows at `index` (a minibatch), in that order, with the packed trees that hold them."""
        idx = torch.as_tensor(list(index), dtype=torch.long)
        picked = {f.name: getattr(self, f.name)[idx] for f in fields(self) if f.name not in ("texts", "packs")}
        kept = list(dict.fromkeys(picked["row_pack"].tolist()))
        picked["row_pack"] = torch.tensor([kept.index(p) for p in picked["row_pack"].tolist()], dtype=torch.long)
        return RolloutBatch(**picked, texts=[self.texts[i] for i in idx.tolist()], packs=[self.packs[p] for p in kept])


def batch_from_trees(trees: Sequence[SearchTree], pad_token_id: int, pack_tokens: int | None = None) -> RolloutBatch:
    """One row per rewarded leaf of every tree (call `reward_leaves` on each tree first), and the trees
    packed for the packed learner, each cut into packs of at most `pack_tokens` tokens (None: one pack
    per tree; see `rl.packing.group_leaves`)."""
    rows = [row for g, tree in enumerate(trees) for row in rows_from_tree(tree, g)]
    packs, where = [], {}  # where: (group, leaf) -> (pack, packed index of each of the row's tokens)
    for g, tree in enumerate(trees):
        for leaves in group_leaves(tree, trained_leaves(tree), pack_tokens) if trained_leaves(tree) else []:
            pack, positions = pack_tree(tree, leaves)
            where.update({(g, leaf): (len(packs), pos) for leaf, pos in zip(leaves, positions)})
            packs.append(pack)
    located = [where[(g, leaf)] for g, tree in enumerate(trees) for leaf in trained_leaves(tree)]  # rows' order
    if not rows:
        raise ValueError("no rewarded trajectories in these trees: call rl.batch.reward_leaves(tree, reward_fn, "
                         "problem) on each tree first")
    B, L = len(rows), max(len(r.prompt_ids) + len(r.response_ids) for r in rows)
    input_ids = torch.full((B, L), pad_token_id, dtype=torch.long)
    attention = torch.zeros((B, L), dtype=torch.long)
    packed_index = torch.full((B, L), -1, dtype=torch.long)
    per_token = {name: torch.zeros((B, L)) for name in ("response_mask", "old_logprobs", "token_values",
                                                        "parent_values", "token_leaves", "token_progress")}
    for b, row in enumerate(rows):
        p, end = len(row.prompt_ids), len(row.prompt_ids) + len(row.response_ids)
        input_ids[b, :end] = torch.tensor(row.prompt_ids + row.response_ids)
        attention[b, :end] = 1
        packed_index[b, :end] = torch.tensor(located[b][1])
        for name, values in (("response_mask", row.sampled), ("old_logprobs", row.logprobs),
                             ("token_values", row.node_values), ("parent_values", row.parent_values),
                             ("token_leaves", row.node_leaves), ("token_progress", row.node_progress)):
            per_token[name][b, p:end] = torch.tensor(values)
    return RolloutBatch(input_ids=input_ids, attention_mask=attention, **per_token,
                        rewards=torch.tensor([r.reward for r in rows]),
                        root_values=torch.tensor([r.root_value for r in rows]),
                        group=torch.tensor([r.group for r in rows]),
                        prompt_lengths=torch.tensor([len(r.prompt_ids) for r in rows]),
                        row_pack=torch.tensor([pack for pack, _ in located], dtype=torch.long),
                        packed_index=packed_index, texts=[r.text for r in rows], packs=packs)
