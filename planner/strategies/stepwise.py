"""Settings and helpers shared by the step-level strategies (beam, DVTS, MCTS).

A step is what the policy samples up to the step delimiter (a stop string, default "\\n\\n", as in
search-and-learn and Snell et al. 2024). Early termination and reset (the review's section 11):
a node whose value falls below `prune_below` is pruned, and the search restarts from the best
visited node (the highest visit-mean value among unpruned, unfinished nodes).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from planner.scorers import AGGREGATIONS, aggregate
from planner.strategies.common import SearchConfig, check_choice, check_int, check_number
from planner.tree import ROOT, SearchTree

__all__ = ["StepConfig", "path_value", "best_visited_node"]


@dataclass
class StepConfig(SearchConfig):
    """Settings of step-level search."""

    step_delimiter: str = "\n\n"
    """Stop string that ends a step (Snell et al. 2024 / search-and-learn use "\\n\\n")."""
    max_step_tokens: int = 64
    """Most tokens per step."""
    max_steps: int = 8
    """Most steps per response; a node at this depth is terminal."""
    aggregation: str = "last"
    """How a path's step scores become its value: one of `planner.scorers.AGGREGATIONS`
    ("last", "min", "product", "mean"; search-and-learn's `aggregate_scores`)."""
    prune_below: float | None = None
    """Early termination: prune a node whose value is below this (None: never prune)."""
    max_resets: int = 2
    """Most restarts from the best visited node after pruning (early termination and reset)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        name = type(self).__name__
        if not isinstance(self.step_delimiter, str) or not self.step_delimiter:
            raise ValueError(f"{name}.step_delimiter must be a non-empty string; got {self.step_delimiter!r}")
        check_int(name, "max_step_tokens", self.max_step_tokens)
        check_int(name, "max_steps", self.max_steps)
        check_choice(name, "aggregation", self.aggregation, set(AGGREGATIONS))
        check_number(name, "prune_below", self.prune_below, 0.0, 1.0, optional=True)
        check_int(name, "max_resets", self.max_resets, 0)

    def step_sampling(self, n: int):
        return self.sampling(n=n, max_tokens=self.max_step_tokens, stop=(self.step_delimiter,))


def path_value(tree: SearchTree, node: int, how: str) -> float:
    """Aggregate of the scorer values along the root-to-`node` path (root excluded)."""
    return aggregate([tree[i].score for i in tree.path(node)[1:]], how)


def best_visited_node(tree: SearchTree, among: Iterable[int] | None = None) -> int:
    """The unpruned, unfinished visited node with the highest visit-mean value (ties: shallower,
    then earlier), among the nodes `among` (default: all); the root when there is none. Where early
    termination restarts the search."""
    best, key = ROOT, None
    for i in sorted(set(among)) if among is not None else range(len(tree)):
        node = tree[i]
        if node.terminal or node.pruned or not node.visits or i == ROOT:
            continue
        candidate = (node.value, -node.depth, -i)
        if key is None or candidate > key:
            best, key = i, candidate
    return best
