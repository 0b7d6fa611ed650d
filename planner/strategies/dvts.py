"""Diverse verifier tree search (DVTS; Beeching et al. 2024, search-and-learn's `dvts`).

The N-sample budget is split into `num_beams // beam_width` independent subtrees. Each round, every
unfinished subtree samples `beam_width` candidate steps below its current node (all subtrees in one
generate call), the candidates are scored in one scorer call, and each subtree moves greedily to
its best candidate (by aggregated score). A subtree ends when its chosen step finishes the
response. The final answer is voted among the subtrees' final nodes. Independence across subtrees
keeps the diversity that plain beam search loses when one prefix dominates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from planner.strategies.common import SearchResult, backup, check_choice, check_int, choose_answer, evaluate
from planner.strategies.common import expand, finish_search, start_search
from planner.strategies.stepwise import StepConfig, path_value
from planner.tree import ROOT

__all__ = ["DVTSConfig", "dvts"]


@dataclass
class DVTSConfig(StepConfig):
    """Diverse verifier tree search (search-and-learn)."""

    num_beams: int = 8
    """N: samples per round over all subtrees."""
    beam_width: int = 4
    """M: candidates per subtree per round; there are N // M subtrees. N must be a multiple of M."""
    final: Literal["weighted", "best", "majority"] = "weighted"
    """How to pick among the subtrees' responses (search-and-learn reports weighted best-of-N)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("DVTSConfig", "num_beams", self.num_beams)
        check_int("DVTSConfig", "beam_width", self.beam_width)
        if self.num_beams % self.beam_width:
            raise ValueError(f"DVTSConfig.num_beams must be a multiple of beam_width={self.beam_width}; "
                             f"got {self.num_beams}")
        check_choice("DVTSConfig", "final", self.final, {"weighted", "best", "majority"})


def dvts(prompt_ids, policy, scorer, budget, config: DVTSConfig, seed: int) -> SearchResult:
    if scorer is None:
        raise ValueError("dvts needs a scorer (planner.solve supplies the Monte-Carlo scorer)")
    tree, meter, seeds = start_search(prompt_ids, policy, scorer, budget, config, seed, "dvts")
    subtrees = config.num_beams // config.beam_width
    heads = [ROOT] * subtrees  # each subtree's current node
    while any(not tree[h].terminal for h in heads) and not meter.exhausted():
        live = [k for k, h in enumerate(heads) if not tree[h].terminal]
        if heads[live[0]] == ROOT:  # first round: one call with all N samples from the root, split M per subtree
            flat = expand(tree, [ROOT], policy, config.step_sampling(len(live) * config.beam_width), seeds.next(),
                          config.max_steps)[0]
            groups = [flat[j * config.beam_width:(j + 1) * config.beam_width] for j in range(len(live))]
        else:
            groups = expand(tree, [heads[k] for k in live], policy, config.step_sampling(config.beam_width),
                            seeds.next(), config.max_steps)
        candidates = [c for group in groups for c in group]
        for node, value in zip(candidates, evaluate(tree, candidates, scorer)):
            backup(tree, node, value)
        for k, group in zip(live, groups):  # greedy per subtree; ties keep sample order
            heads[k] = max(group, key=lambda c: (path_value(tree, c, config.aggregation), -c))
    finals = [h for h in heads if h != ROOT] or [ROOT]
    weights = [path_value(tree, h, config.aggregation) if h != ROOT else 0.0 for h in finals]
    leaf, answer = choose_answer(tree, finals, config.final, weights, config)
    return finish_search(tree, meter, leaf, answer)
