"""Best-of-N: sample N complete responses, then pick one.

Pick rules (see `planner/answers.py`): majority vote over extracted answers (self-consistency, Wang et al.
2022), reward-weighted vote (search-and-learn), or the single best score (Cobbe et al. 2021, with a
verifier / ORM as the scorer). Samples are drawn in batches of `batch_size`; under a budget each
batch is sized to what is left, together with the scoring of every response so far, which runs
once at the end (see `planner/budget.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from planner.strategies.common import (SearchConfig, SearchResult, check_choice, check_int, choose_answer,
                                       evaluate, expand, finish_search, start_search)
from planner.strategies.fitting import fit_round
from planner.tree import ROOT

__all__ = ["BestOfNConfig", "best_of_n"]


@dataclass
class BestOfNConfig(SearchConfig):
    """Best-of-N sampling (Cobbe et al. 2021; Wang et al. 2022)."""

    n: int = 8
    """Responses to sample (N)."""
    max_tokens: int = 256
    """Most tokens per response."""
    final: Literal["majority", "weighted", "best"] = "majority"
    """How to pick: "majority" needs no scorer; "weighted" and "best" score each response."""
    batch_size: int | None = None
    """Responses per generate call (None: all N in one call)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("BestOfNConfig", "n", self.n)
        check_int("BestOfNConfig", "max_tokens", self.max_tokens)
        check_choice("BestOfNConfig", "final", self.final, {"majority", "weighted", "best"})
        if self.batch_size is not None:
            check_int("BestOfNConfig", "batch_size", self.batch_size)


def best_of_n(prompt_ids, policy, scorer, budget, config: BestOfNConfig, seed: int) -> SearchResult:
    """Sample `config.n` responses as children of the root and pick one by `config.final`."""
    if config.final != "majority" and scorer is None:
        raise ValueError(f"best_of_n with final={config.final!r} needs a scorer; pass one or use final='majority'")
    tree, meter, seeds = start_search(prompt_ids, policy, scorer, budget, config, seed, "best_of_n")
    batch = config.batch_size or config.n
    leaves: list[int] = []
    while len(leaves) < config.n:
        params = config.sampling(n=min(batch, config.n - len(leaves)), max_tokens=config.max_tokens)
        fitted = fit_round(meter, tree, [ROOT], params, scorer, finished=True, pending=leaves)
        if fitted is None:
            break
        new = expand(tree, [ROOT], policy, fitted[1], seeds.next())[0]
        for leaf in new:
            tree[leaf].terminal = True  # a whole response: it ended with EOS or at max_tokens
        leaves += new
    weights = None
    if scorer is not None and leaves:
        weights = evaluate(tree, leaves, scorer, meter=meter)
    leaf, answer = choose_answer(tree, leaves, config.final, weights, config)
    return finish_search(tree, meter, leaf, answer)
