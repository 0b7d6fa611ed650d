"""Tree packing: each search tree as one sequence whose nodes' tokens appear once.

Row-wise, a tree with K leaves is K rows that repeat the prompt and every shared ancestor step, and
the learner's forward and backward run over every copy. Packed, the prompt and each node's tokens
appear once, in tree order, and a tree attention mask lets a token attend only to the tokens on its
own root-to-node path; position ids count along that path. Each token's hidden state then equals
the one it has in any row through it, so the packed forward gives the row-wise log-probabilities,
entropies and values (the attention sees the same keys; masked keys add nothing), computing each
node once (the tree-attention layouts of TreeRL's and Medusa/SpecInfer's tree decoding).

A row's quantity at position t is gathered from its tree's packed sequence (`RolloutBatch.packed_index`),
so advantages, losses and their aggregations are computed in the row layout exactly as before, and
autograd sums each shared token's gradient over the rows through it: the update is the row-wise
update. A best-of-N group is a tree of depth one, so the same layout is padding-free packing of a
flat group (the prompt once, then each sample).

The target of token j is predicted from the hidden state of the previous token on its path
(`PackedTree.predecessor`): for a node's first token, its parent's last token, which several sibling
steps share.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from torch import Tensor

from planner.tree import ROOT, SearchTree

__all__ = ["PackedTree", "pack_tree", "group_leaves", "collate", "packing_support"]

NO_PREDECESSOR = -1
"""`PackedTree.predecessor` of the prompt's first token."""


@dataclass(frozen=True)
class PackedTree:
    """One tree's tokens, each once: the prompt, then each node's tokens (nodes in index order)."""

    ids: list[int]
    """(N,) token ids."""
    positions: list[int]
    """(N,) each token's position on its own root-to-node path (the prompt's tokens: 0, 1, ...)."""
    predecessor: list[int]
    """(N,) index of the token before this one on its path (NO_PREDECESSOR for the first)."""
    node: list[int]
    """(N,) the packed node each token belongs to (0: the prompt)."""
    ancestors: list[frozenset[int]]
    """Per packed node, itself and its ancestors (packed node numbers)."""

    def __len__(self) -> int:
        return len(self.ids)

    def attention(self) -> Tensor:
        """(N, N) bool: token i may attend to token j iff j is on i's path and not after it."""
        node = torch.tensor(self.node)  # (N,)
        on_path = torch.zeros(len(self.ancestors), len(self.ancestors), dtype=torch.bool)  # (nodes, nodes)
        for n, ancestors in enumerate(self.ancestors):
            on_path[n, list(ancestors)] = True
        index = torch.arange(len(self.ids))
        same_or_ancestor = on_path[node[:, None], node[None, :]]  # (N, N)
        earlier = (node[:, None] != node[None, :]) | (index[None, :] <= index[:, None])
        return same_or_ancestor & earlier


def pack_tree(tree: SearchTree, leaves: list[int]) -> tuple[PackedTree, list[list[int]]]:
    """Pack the nodes on the paths to `leaves`; returns the packed tree and, per leaf, the packed index
    of each of its row's tokens (prompt first, then the response), in row order."""
    keep = sorted({n for leaf in leaves for n in tree.path(leaf)})  # parents before children (index order)
    packed_node = {n: k for k, n in enumerate(keep)}
    ids, positions, predecessor, node, starts, ends = [], [], [], [], {}, {}
    tail: dict[int, int] = {}  # node -> packed index of the last token on its path (NO_PREDECESSOR: none)
    length: dict[int, int] = {}  # node -> tokens on its path
    ancestors: list[frozenset[int]] = []
    for n in keep:
        parent = tree[n].parent
        ancestors.append(frozenset({packed_node[n]}) | (ancestors[packed_node[parent]] if n != ROOT else frozenset()))
        previous, position = (NO_PREDECESSOR, 0) if n == ROOT else (tail[parent], length[parent])
        starts[n] = len(ids)
        for token in tree[n].token_ids:
            ids.append(token)
            positions.append(position)
            predecessor.append(previous)
            node.append(packed_node[n])
            previous, position = len(ids) - 1, position + 1
        ends[n], tail[n], length[n] = len(ids), previous, position
    if not tree[ROOT].token_ids:
        raise ValueError("pack_tree: the tree's root holds no prompt tokens")
    rows = [[j for n in tree.path(leaf) for j in range(starts[n], ends[n])] for leaf in leaves]
    return PackedTree(ids, positions, predecessor, node, ancestors), rows


def group_leaves(tree: SearchTree, leaves: list[int], max_tokens: int | None) -> list[list[int]]:
    """`leaves` cut into groups whose packed trees hold at most `max_tokens` tokens (a leaf whose own
    path is longer gets a group of its own; None: one group). Leaves are taken in depth-first order,
    so siblings and cousins, which share the most, stay together. A packed tree of N tokens costs
    N^2 in attention while each token attends only to its own path: on a small model (where
    attention is a large share of the work) several smaller packs beat one large one, at the price of
    repeating the prompt (and shared steps) once per pack."""
    ordered = sorted(leaves, key=tree.path)  # depth-first: by the path of node indices
    if max_tokens is None:
        return [ordered]
    groups, current, nodes, size = [], [], set(), 0
    for leaf in ordered:
        path = tree.path(leaf)
        added = sum(len(tree[n].token_ids) for n in path if n not in nodes)
        if current and size + added > max_tokens:
            groups.append(current)
            current, nodes, size = [], set(), 0
            added = sum(len(tree[n].token_ids) for n in path)
        current.append(leaf)
        nodes.update(path)
        size += added
    return groups + [current]


def collate(packs: list[PackedTree], pad_token_id: int) -> dict[str, Tensor]:
    """Right-padded tensors of several packed trees, one per row: input_ids, position_ids (G, N),
    attention (G, 1, N, N) bool (a padding token attends to itself only, so no softmax row is empty),
    predecessor (G, N) (padding: its own index) and valid (G, N) bool."""
    G, N = len(packs), max(len(p) for p in packs)
    input_ids = torch.full((G, N), pad_token_id, dtype=torch.long)
    positions = torch.zeros((G, N), dtype=torch.long)
    predecessor = torch.arange(N).repeat(G, 1)
    valid = torch.zeros((G, N), dtype=torch.bool)
    attention = torch.eye(N, dtype=torch.bool).repeat(G, 1, 1, 1)  # (G, 1, N, N)
    for g, pack in enumerate(packs):
        n = len(pack)
        input_ids[g, :n] = torch.tensor(pack.ids)
        positions[g, :n] = torch.tensor(pack.positions)
        predecessor[g, :n] = torch.tensor(pack.predecessor).clamp(min=0)  # the first token's is never read
        valid[g, :n] = True
        attention[g, 0, :n, :n] = pack.attention()
    return {"input_ids": input_ids, "position_ids": positions, "attention": attention, "predecessor": predecessor,
            "valid": valid}


SUPPORTED_ATTENTION = ("sdpa", "eager")


def packing_support(model) -> str | None:
    """None when `model` can take a packed tree (a custom 4D attention mask and position ids through its
    decoder trunk, and a plain linear head), else the reason it cannot (the learner falls back to rows)."""
    config = getattr(model, "config", None)
    implementation = getattr(config, "_attn_implementation", None)
    if implementation not in SUPPORTED_ATTENTION:
        return f"attention implementation {implementation!r} takes no custom 4D mask here (supported: sdpa, eager)"
    if not hasattr(model, "get_decoder"):
        return f"{type(model).__name__} has no decoder trunk to run on packed inputs"
    if "position_ids" not in inspect.signature(model.get_decoder().forward).parameters:
        return f"{type(model).__name__} takes no position_ids (its positions come from the mask, e.g. ALiBi)"
    if getattr(config, "final_logit_softcapping", None) or getattr(config, "logit_scale", None):
        return f"{type(model).__name__} transforms its logits after the head"
    return None


def mask_for(model, attention: Tensor, dtype: torch.dtype) -> Tensor:
    """The 4D mask in the form the model's attention takes: bool for SDPA, additive (0 / min) for eager."""
    if model.config._attn_implementation == "sdpa":
        return attention
    return torch.zeros(attention.shape, dtype=dtype).masked_fill(~attention, torch.finfo(dtype).min)
