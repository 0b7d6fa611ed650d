"""Diverse verifier tree search (DVTS; Beeching et al. 2024, search-and-learn's `dvts`).

The N samples of a round are split over `num_beams // beam_width` independent subtrees. Each round, every
unfinished subtree samples `beam_width` candidate steps below its current node (all subtrees in one
generate call; in the first round one prompt, the root, with all N samples), the candidates are
scored in one scorer call, and each subtree moves greedily to its best candidate (by aggregated
score). A subtree ends when its chosen step finishes the response. The final answer is voted among
the subtrees' final nodes. Independence across subtrees keeps the diversity that plain beam search
loses when one prefix dominates. Under a budget each round is sized to what is left (fewer
candidates per subtree, then fewer subtrees, then shorter steps; see `planner/budget.py`).

Early termination and reset (`prune_below`, `max_resets`; the review's section 11): when a
subtree's chosen node (finished or not) has an aggregated value below `prune_below`, that node is
pruned and the subtree restarts from the best visited node *of its own subtree* (the highest
visit-mean value among its unpruned, unfinished nodes; `best_visited_node`). At most `max_resets`
restarts happen per search (over all subtrees); a subtree pruned when none are left, or with no
node to restart from, ends there. A pruned subtree's final node takes part in the vote only when
every subtree's final node is pruned.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.strategies.beam import BeamConfig, Final
from planner.strategies.common import SearchResult, backup, choose_answer, evaluate, expand, finish_search
from planner.strategies.common import start_search
from planner.strategies.fitting import fit_round
from planner.strategies.stepwise import best_visited_node, path_value
from planner.tree import ROOT

__all__ = ["DVTSConfig", "dvts"]


@dataclass
class DVTSConfig(BeamConfig):
    """Diverse verifier tree search (search-and-learn): beam search's settings, over independent subtrees."""

    final: Final = "weighted"
    """How to pick among the subtrees' responses (search-and-learn reports weighted best-of-N)."""


def dvts(prompt_ids, policy, scorer, budget, config: DVTSConfig, seed: int) -> SearchResult:
    if scorer is None:
        raise ValueError("dvts needs a scorer (planner.solve supplies the Monte-Carlo scorer)")
    tree, meter, seeds = start_search(prompt_ids, policy, scorer, budget, config, seed, "dvts")
    subtrees = config.num_beams // config.beam_width
    heads = [ROOT] * subtrees  # each subtree's current node
    members: list[list[int]] = [[] for _ in range(subtrees)]  # every node of each subtree
    ended = [False] * subtrees  # pruned with no reset left, or nothing to restart from
    resets = tree.meta.setdefault("resets", []) if config.prune_below is not None else []
    while True:
        live = [k for k in range(subtrees) if not ended[k] and not tree[heads[k]].terminal]
        if not live:
            break
        step = config.step_sampling(config.beam_width)
        fitted = fit_round(meter, tree, [heads[k] for k in live], step, scorer)
        if fitted is None:
            break
        nodes, params = fitted
        served = live[:len(nodes)]
        if all(node == ROOT for node in nodes):  # the first round: one prompt, M samples per subtree
            flat = expand(tree, [ROOT], policy, params.replace(n=len(nodes) * params.n), seeds.next(),
                          config.max_steps)[0]
            groups = [flat[j * params.n:(j + 1) * params.n] for j in range(len(nodes))]
        else:
            groups = expand(tree, nodes, policy, params, seeds.next(), config.max_steps)
        candidates = [c for group in groups for c in group]
        for node, value in zip(candidates, evaluate(tree, candidates, scorer, meter=meter)):
            backup(tree, node, value)
        for k, group in zip(served, groups):  # greedy per subtree; ties keep sample order
            members[k] += group
            heads[k] = max(group, key=lambda c: (path_value(tree, c, config.aggregation), -c))
            if config.prune_below is not None and path_value(tree, heads[k], config.aggregation) < config.prune_below:
                tree[heads[k]].pruned = True
                restart = best_visited_node(tree, among=members[k]) if len(resets) < config.max_resets else ROOT
                if restart == ROOT:
                    ended[k] = True
                else:
                    heads[k] = restart
                    resets.append(restart)
    finals = [h for h in heads if h != ROOT]
    finals = [h for h in finals if not tree[h].pruned] or finals or [ROOT]
    weights = [path_value(tree, h, config.aggregation) if h != ROOT else 0.0 for h in finals]
    leaf, answer = choose_answer(tree, finals, config.final, weights, config)
    return finish_search(tree, meter, leaf, answer)
