"""Step-level beam search guided by a scorer (Snell et al. 2024; search-and-learn's `beam_search`).

Each round samples about `num_beams` steps: every active beam is expanded with
`num_beams // len(active)` samples (the root with all `num_beams`, then `beam_width` per beam), in
one generate call. Candidates are scored in one scorer call; finished ones leave the beam; of the
rest, the `num_beams // beam_width` with the highest aggregated score are kept. Search ends when
`num_beams` responses have finished, at `max_steps`, or when the budget cannot pay for another
round (a round is sized to what is left: fewer samples per beam, then fewer beams, best first, then
shorter steps; see `planner/budget.py`). Every scored node gets one visit with its score, so the
tree's visit-mean values are Monte-Carlo averages of the scores below each node.

Early termination (`prune_below`): kept beams whose value falls below the threshold are pruned;
when none survive, the search restarts from the best visited node (at most `max_resets` times).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from planner.strategies.common import SearchResult, backup, check_choice, check_int, choose_answer, evaluate
from planner.strategies.common import expand, finish_search, start_search
from planner.strategies.fitting import fit_round
from planner.strategies.stepwise import StepConfig, best_visited_node, path_value
from planner.tree import ROOT

__all__ = ["BeamConfig", "beam_search"]

Final = Literal["best", "weighted", "majority"]
"""How a beam search (or DVTS) picks among its finished responses."""


@dataclass
class BeamConfig(StepConfig):
    """Beam search over steps (Snell et al. 2024)."""

    num_beams: int = 8
    """N: samples per round (beam search: also the responses to finish; DVTS: over all its subtrees)."""
    beam_width: int = 4
    """M: samples per kept beam; N // M beams are kept each round (DVTS: M candidates in each of its N // M
    subtrees). N must be a multiple of M."""
    final: Final = "best"
    """How to pick among finished responses (by aggregated score; see `planner/answers.py`)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        owner = type(self).__name__
        check_int(owner, "num_beams", self.num_beams)
        check_int(owner, "beam_width", self.beam_width)
        if self.num_beams % self.beam_width:
            raise ValueError(f"{owner}.num_beams must be a multiple of beam_width={self.beam_width}; "
                             f"got {self.num_beams}")
        check_choice(owner, "final", self.final, set(get_args(Final)))


def beam_search(prompt_ids, policy, scorer, budget, config: BeamConfig, seed: int) -> SearchResult:
    if scorer is None:
        raise ValueError("beam_search needs a scorer (planner.solve supplies the Monte-Carlo scorer)")
    tree, meter, seeds = start_search(prompt_ids, policy, scorer, budget, config, seed, "beam")
    keep = config.num_beams // config.beam_width
    active, finished = [ROOT], []
    while active and len(finished) < config.num_beams:
        per_beam = max(1, config.num_beams // len(active))
        fitted = fit_round(meter, tree, active, config.step_sampling(per_beam), scorer)
        if fitted is None:
            break
        active, params = fitted
        groups = expand(tree, active, policy, params, seeds.next(), config.max_steps)
        candidates = [c for group in groups for c in group]
        for node, value in zip(candidates, evaluate(tree, candidates, scorer, meter=meter)):
            backup(tree, node, value)
        finished += [c for c in candidates if tree[c].terminal]
        ranked = sorted((c for c in candidates if not tree[c].terminal),
                        key=lambda c: -path_value(tree, c, config.aggregation))  # stable: ties keep sample order
        active = ranked[:keep]
        if config.prune_below is not None:
            for c in active:
                if path_value(tree, c, config.aggregation) < config.prune_below:
                    tree[c].pruned = True
            active = [c for c in active if not tree[c].pruned]
            resets = tree.meta.setdefault("resets", [])
            if not active and len(finished) < config.num_beams and len(resets) < config.max_resets:
                active = [best_visited_node(tree)]
                resets.append(active[0])
    candidates = finished or [n for n in tree.leaves() if n != ROOT] or [ROOT]
    weights = [path_value(tree, c, config.aggregation) if c != ROOT else 0.0 for c in candidates]
    leaf, answer = choose_answer(tree, candidates, config.final, weights, config)
    return finish_search(tree, meter, leaf, answer)

