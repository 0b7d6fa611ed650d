"""Preference pairs from search trees: siblings with different outcomes, and whole responses.

A search tree gives preference data for free (Xie et al. 2024, "Monte Carlo Tree Search Boosts
Reasoning via Iterative Preference Learning"; Lai et al. 2024, Step-DPO; Chen et al. 2024, SVPO):

- **Step pairs.** Below one node, two sibling steps whose subtrees end differently share every token
  before them. The node's prefix (prompt + the steps above) is the context; the continuations differ.
  A step's outcome is its Monte-Carlo value, the mean verifier reward of the rewarded leaves below it
  (as `rl.batch.monte_carlo_values`). Siblings with identical token ids are one step (their leaves are
  pooled): the same step sampled twice carries no preference. Per branching node, one pair: the step
  of highest value (chosen) against the step of lowest value (rejected), when the values differ by more
  than `min_margin`; ties go to the earlier child.
  What is trained on, `continuation`:
    "step" (the default): the two sibling steps themselves, as Step-DPO and Xie et al. do. The pair
      isolates the step where the outcomes part; the rest of either response is not in it.
    "leaf": from each sibling down to a leaf: the chosen step's best-rewarded leaf against the
      rejected step's worst-rewarded leaf (first in leaf order on ties). Both continuations then end in
      a verified outcome, at the price of also training on the steps after the fork.
- **Response pairs.** Whole responses to the same prompt with different rewards (the usual
  correct-vs-incorrect pairs of iterative DPO, Pang et al. 2024, and of outcome reward models). The
  distinct responses are ranked by reward (best first) and by reward (worst first), both stably in
  leaf order; `response_pairing="ranks"` pairs the i-th best with the i-th worst while its reward is
  strictly higher, "all" takes every (higher, lower) combination, best first, each up to
  `response_pairs` pairs per prompt.

A pair that repeats another (same context, chosen and rejected ids) is kept once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from planner.tree import ROOT, SearchTree

__all__ = ["PairConfig", "PreferencePair", "PairBatch", "step_pairs", "response_pairs", "tree_pairs", "preference_pairs",
           "pair_batch"]

Continuation = Literal["step", "leaf"]


@dataclass
class PairConfig:
    """Which preference pairs to take from a tree (rl/pairs.py explains each kind)."""

    step_pairs: bool = True
    """Take pairs of sibling steps below every branching node (Step-DPO; Xie et al. 2024)."""
    continuation: Continuation = "step"
    """What a step pair trains on: "step" = the sibling steps themselves; "leaf" = each sibling's path
    down to its subtree's best (chosen) / worst (rejected) rewarded leaf."""
    response_pairs: int = 4
    """Most pairs of whole responses (higher vs lower reward) per prompt; 0 takes none."""
    response_pairing: Literal["ranks", "all"] = "ranks"
    """Which response pairs: "ranks" = the i-th best with the i-th worst (each response in one pair at most);
    "all" = every (higher, lower) combination, best first (a reward model's fuller use of a prompt)."""
    min_margin: float = 0.0
    """A pair's outcomes (values or rewards) must differ by more than this (>= 0)."""

    def __post_init__(self) -> None:
        if self.continuation not in ("step", "leaf"):
            raise ValueError(f"PairConfig.continuation must be one of ['leaf', 'step']; got {self.continuation!r}")
        if not isinstance(self.response_pairs, int) or self.response_pairs < 0:
            raise ValueError(f"PairConfig.response_pairs must be an integer >= 0; got {self.response_pairs!r}")
        if self.response_pairing not in ("ranks", "all"):
            raise ValueError(f"PairConfig.response_pairing must be one of ['all', 'ranks']; got {self.response_pairing!r}")
        if not self.min_margin >= 0:
            raise ValueError(f"PairConfig.min_margin must be >= 0; got {self.min_margin!r}")
        if not self.step_pairs and self.response_pairs == 0:
            raise ValueError("PairConfig takes no pairs with step_pairs=False and response_pairs=0: enable one")


@dataclass(frozen=True)
class PreferencePair:
    """A context and two continuations of it, the chosen one with the better outcome. Token ids exactly
    as sampled; the masks are 1.0 on sampled ids and 0.0 on ids a strategy forced (no gradient)."""

    group: int
    """Index of the tree (prompt) among the trees the pair came from."""
    kind: Literal["step", "response"]
    node: int
    """The node both continuations start below (ROOT for response pairs)."""
    context_ids: list[int]
    """The prompt ids and the shared steps' ids."""
    chosen_ids: list[int]
    rejected_ids: list[int]
    chosen_mask: list[float]
    rejected_mask: list[float]
    chosen_logprobs: list[float]
    """Behaviour log-probability of each chosen id (the policy that grew the tree)."""
    rejected_logprobs: list[float]
    chosen_outcome: float
    """Monte-Carlo value of the chosen step (step pairs) or the chosen leaf's reward (response pairs,
    and step pairs with continuation "leaf")."""
    rejected_outcome: float


def _span(tree: SearchTree, top: int, leaf: int) -> tuple[list[int], list[float], list[float]]:
    """(ids, mask, logprobs) of the nodes from `top` down to `leaf`, both included."""
    path = tree.path(leaf)
    ids, mask, logprobs = [], [], []
    for i in path[path.index(top):]:
        node = tree[i]
        ids += node.token_ids
        mask += [0.0 if node.forced else 1.0] * len(node.token_ids)
        logprobs += node.logprobs
    return ids, mask, logprobs


def _rewarded_leaves_below(tree: SearchTree) -> list[list[int]]:
    """Per node, the rewarded leaves in its subtree (itself included), in leaf order."""
    below: list[list[int]] = [[] for _ in range(len(tree))]
    for leaf in tree.leaves():
        if leaf != ROOT and tree[leaf].reward is not None:
            for node in tree.path(leaf):
                below[node].append(leaf)
    return below


def _pair(tree, group, kind, node, chosen, rejected, chosen_outcome, rejected_outcome) -> PreferencePair:
    """chosen / rejected: (top node, leaf) spans below `node`."""
    c_ids, c_mask, c_lp = _span(tree, *chosen)
    r_ids, r_mask, r_lp = _span(tree, *rejected)
    return PreferencePair(group=group, kind=kind, node=node, context_ids=tree.prefix_ids(node), chosen_ids=c_ids,
                          rejected_ids=r_ids, chosen_mask=c_mask, rejected_mask=r_mask, chosen_logprobs=c_lp,
                          rejected_logprobs=r_lp, chosen_outcome=float(chosen_outcome),
                          rejected_outcome=float(rejected_outcome))


def step_pairs(tree: SearchTree, group: int, config: PairConfig) -> list[PreferencePair]:
    """One pair per branching node whose distinct child steps differ in value by more than min_margin."""
    below = _rewarded_leaves_below(tree)
    pairs = []
    for node in range(len(tree)):
        steps: dict[tuple[int, ...], list[int]] = {}  # distinct step ids -> the children that sampled them
        for child in tree[node].children:
            steps.setdefault(tuple(tree[child].token_ids), []).append(child)
        scored = []  # (value, first child, leaves below any copy)
        for copies in steps.values():
            leaves = [leaf for c in copies for leaf in below[c]]
            if leaves:
                scored.append((sum(tree[leaf].reward for leaf in leaves) / len(leaves), copies[0], leaves))
        if len(scored) < 2:
            continue
        best = max(scored, key=lambda s: s[0])  # max/min return the first of equals: the earlier child
        worst = min(scored, key=lambda s: s[0])
        if not best[0] - worst[0] > config.min_margin:
            continue
        if config.continuation == "step":
            pairs.append(_pair(tree, group, "step", node, (best[1], best[1]), (worst[1], worst[1]), best[0], worst[0]))
        else:
            top_leaf = max(best[2], key=lambda leaf: tree[leaf].reward)
            bottom_leaf = min(worst[2], key=lambda leaf: tree[leaf].reward)
            top = next(c for c in tree.path(top_leaf) if tree[c].parent == node)
            bottom = next(c for c in tree.path(bottom_leaf) if tree[c].parent == node)
            pairs.append(_pair(tree, group, "step", node, (top, top_leaf), (bottom, bottom_leaf),
                               tree[top_leaf].reward, tree[bottom_leaf].reward))
    return pairs


def response_pairs(tree: SearchTree, group: int, config: PairConfig) -> list[PreferencePair]:
    """Up to `config.response_pairs` (higher reward, lower reward) pairs of distinct whole responses."""
    distinct: dict[tuple[int, ...], int] = {}
    for leaf in _rewarded_leaves_below(tree)[ROOT]:
        distinct.setdefault(tuple(tree.response_ids(leaf)), leaf)
    leaves = list(distinct.values())
    best_first = sorted(leaves, key=lambda leaf: -tree[leaf].reward)
    worst_first = sorted(leaves, key=lambda leaf: tree[leaf].reward)
    if config.response_pairing == "ranks":
        candidates = zip(best_first, worst_first)
    else:
        candidates = ((c, r) for c in best_first for r in worst_first)
    pairs = []
    for chosen, rejected in candidates:
        if len(pairs) == config.response_pairs:
            break
        if not tree[chosen].reward - tree[rejected].reward > config.min_margin:
            if config.response_pairing == "ranks":
                break
            continue
        top_c, top_r = tree.path(chosen)[1], tree.path(rejected)[1]
        pairs.append(_pair(tree, group, "response", ROOT, (top_c, chosen), (top_r, rejected), tree[chosen].reward,
                           tree[rejected].reward))
    return pairs


def tree_pairs(tree: SearchTree, group: int, config: PairConfig) -> list[PreferencePair]:
    """Step pairs then response pairs of one tree (possibly none), each distinct pair once."""
    found = (step_pairs(tree, group, config) if config.step_pairs else []) + \
        (response_pairs(tree, group, config) if config.response_pairs else [])
    unique: dict[tuple, PreferencePair] = {}
    for pair in found:
        unique.setdefault((tuple(pair.context_ids), tuple(pair.chosen_ids), tuple(pair.rejected_ids)), pair)
    return list(unique.values())


def preference_pairs(trees: Sequence[SearchTree], config: PairConfig | None = None) -> list[PreferencePair]:
    """Every tree's pairs, in tree order. Raises when there are none: nothing to learn a preference from."""
    config = config or PairConfig()
    if not any(tree[leaf].reward is not None for tree in trees for leaf in tree.leaves() if leaf != ROOT):
        raise ValueError(f"none of the {len(trees)} trees has a rewarded leaf: call rl.batch.reward_leaves(tree, "
                         "reward_fn, problem) on each tree first")
    pairs = [pair for group, tree in enumerate(trees) for pair in tree_pairs(tree, group, config)]
    if not pairs:
        raise ValueError(f"no preference pairs in {len(trees)} trees: every set of sibling steps and every "
                         f"prompt's responses have equal outcomes (within min_margin={config.min_margin}). "
                         "Pairs need different outcomes below one prefix: grow wider trees (more simulations or "
                         "candidates), or use problems the policy solves only sometimes")
    return pairs


@dataclass
class PairBatch:
    """B pairs as 2B right-padded rows: rows [0, B) the chosen (context + continuation), [B, 2B) the rejected.
    Position t of a (2B, L) tensor describes token t of `input_ids` (as in rl.batch.RolloutBatch)."""

    input_ids: torch.Tensor  # (2B, L) long
    attention_mask: torch.Tensor  # (2B, L) long
    loss_mask: torch.Tensor  # (2B, L) float: the continuation's sampled tokens
    behaviour_logprobs: torch.Tensor  # (2B, L) float: the engine's log-probability of token t (0 elsewhere)

    def lengths(self) -> torch.Tensor:
        """(2B,) trained tokens per row."""
        return self.loss_mask.sum(-1)


def pair_batch(pairs: Sequence[PreferencePair], pad_token_id: int) -> PairBatch:
    """The pairs as one right-padded batch of 2B rows, chosen rows first."""
    rows = [(p.context_ids, p.chosen_ids, p.chosen_mask, p.chosen_logprobs) for p in pairs] + \
        [(p.context_ids, p.rejected_ids, p.rejected_mask, p.rejected_logprobs) for p in pairs]
    width = max(len(c) + len(x) for c, x, _, _ in rows)
    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    loss_mask = torch.zeros((len(rows), width))
    behaviour = torch.zeros((len(rows), width))
    for b, (context, ids, mask, logprobs) in enumerate(rows):
        start, end = len(context), len(context) + len(ids)
        input_ids[b, :end] = torch.tensor(context + ids)
        attention[b, :end] = 1
        loss_mask[b, start:end] = torch.tensor(mask)
        behaviour[b, start:end] = torch.tensor(logprobs)
    return PairBatch(input_ids, attention, loss_mask, behaviour)
