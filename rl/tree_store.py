"""Trees as data: a JSONL file of search trees that one run writes and later trainers read.

One line per tree (`SearchTree.to_dict`, whose nodes hold the exact sampled token ids, their behaviour
log-probabilities and the leaves' verifier rewards), tagged with the policy version that grew it (the
trainer's iteration: the weights the engine sampled with) and the problem it answers (id, question,
reference, task). So one run's trees feed DPO from sibling pairs (`rl.dpo`), rejection-sampling SFT
(`rl.rs_sft`), the outcome reward model (`rl.reward_model`) and PRM training later.

Why JSONL and not Parquet: a tree is a nested, variable-size record that is written one at a time
while training and read back one at a time; a line of JSON appends in O(1), survives a killed run
(every complete line is a tree), needs no extra dependency, and Python's float repr round-trips every
log-probability exactly. Nothing here was slow enough to measure a reason for a columnar format.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from planner.tree import SearchTree
from verifiers.types import Problem

__all__ = ["TreeStore", "StoredTree", "FORMAT"]

FORMAT = "treerl.tree_store/1"
"""Written into every row, so a reader can refuse a file that is not a tree store."""


@dataclass
class StoredTree:
    """One row of a tree store."""

    policy_version: int
    """The iteration of the policy whose weights sampled the tree (0 = the starting model)."""
    problem: Problem
    """The problem the tree answers (id, question, reference, task; `meta` is not stored)."""
    tree: SearchTree
    """The tree, its leaves rewarded by the task's verifier."""


def _row(tree: SearchTree, problem, policy_version: int) -> dict:
    return {"format": FORMAT, "policy_version": int(policy_version),
            "problem": {"id": str(getattr(problem, "id", "")), "question": problem.question,
                        "reference": getattr(problem, "reference", None), "task": str(getattr(problem, "task", ""))},
            "tree": tree.to_dict()}


class TreeStore:
    """Append trees while training, read them back lazily (`for stored in store`) or all at once (`load`)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    def start(self, iteration: int) -> "TreeStore":
        """Prepare the store for a run that starts at `iteration`. A fresh run (0) refuses a store that
        already holds trees, so that two runs never mix unnoticed; a resumed run drops the rows of
        iterations >= `iteration` (written after its last checkpoint, before it was killed)."""
        if iteration == 0:
            if self.path.exists() and self.path.stat().st_size > 0:
                raise FileExistsError(f"tree store {str(self.path)!r} already holds trees; a fresh run writes a new "
                                      "store: pass another path, delete this one, or resume the run that wrote it")
        elif self.path.exists():
            kept = [line for line in self._lines() if json.loads(line)["policy_version"] < iteration]
            self.path.write_text("".join(line + "\n" for line in kept))
        return self

    def append(self, trees: Sequence[SearchTree], problems: Sequence, policy_version: int) -> None:
        """Append one row per (tree, problem) pair; the file is flushed once per call."""
        if len(trees) != len(problems):
            raise ValueError(f"append needs one problem per tree; got {len(trees)} trees and {len(problems)} problems")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            for tree, problem in zip(trees, problems):
                f.write(json.dumps(_row(tree, problem, policy_version)) + "\n")

    def _lines(self) -> Iterator[str]:
        with self.path.open(encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    yield line.rstrip("\n")

    def __iter__(self) -> Iterator[StoredTree]:
        """The stored trees in the order they were written, one line parsed at a time."""
        if not self.path.is_file():
            raise FileNotFoundError(f"no tree store at {str(self.path)!r}: train with --loop.tree_store PATH "
                                    "(TrainConfig.loop.tree_store) to write one")
        for number, line in enumerate(self._lines(), 1):
            row = json.loads(line)
            if not isinstance(row, dict) or row.get("format") != FORMAT:
                raise ValueError(f"{self.path}:{number} is not a tree-store row (expected format {FORMAT!r}); "
                                 f"got {line[:80]!r}")
            problem = Problem(**row["problem"])
            yield StoredTree(row["policy_version"], problem, SearchTree.from_dict(row["tree"]))

    def load(self, min_version: int | None = None, max_version: int | None = None) -> list[StoredTree]:
        """Every stored tree whose policy version is within [min_version, max_version] (None: no bound).
        Raises when none is left: a trainer cannot learn from an empty store."""
        low = float("-inf") if min_version is None else min_version
        high = float("inf") if max_version is None else max_version
        kept = [s for s in self if low <= s.policy_version <= high]
        if not kept:
            window = "" if min_version is None and max_version is None else \
                f" with policy versions in [{min_version}, {max_version}]"
            raise ValueError(f"tree store {str(self.path)!r} holds no trees{window}: write trees into it first "
                             "(a training run with TrainConfig.loop.tree_store set) or widen the version window")
        return kept

    def __len__(self) -> int:
        return sum(1 for _ in self._lines()) if self.path.is_file() else 0
