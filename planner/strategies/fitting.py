"""Sizing a round to what the budget has left (the ceiling described in `planner/budget.py`).

A round is one generate call (`params.n` samples below each of some tree nodes, at most
`params.max_tokens` tokens each) plus the scoring of the children it produces. `fit_round` prices
the round's worst case as a `Spend` and shrinks the round until `meter.affords` it, in this order:

1. fewer samples per prompt (`n`, down to 1);
2. fewer prompts (a prefix of `nodes` is kept, so a caller lists its nodes best first);
3. a smaller `max_tokens` (down to 1).

Each step takes the largest value that fits (the worst case grows with each of n, the number of
prompts and max_tokens, so a bisection finds it). Without a budget the round is returned unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.budget import ComputeMeter, Spend, largest
from planner.policy.types import SamplingParams
from planner.tree import SearchTree

__all__ = ["fit_round", "round_spend"]


def round_spend(prompt_lengths: Sequence[int], n: int, max_tokens: int, scorer=None, *,
                finished: bool | None = None, pending: Sequence[int] = (), prompt: Sequence[int] = ()) -> Spend:
    """The worst case of generating `n` samples of at most `max_tokens` below prompts of these lengths,
    plus (with a scorer) the scorer's least spend for the children and the `pending` prefix lengths.

    finished: whether the children will be finished responses (None: unknown, as for a step).
    """
    spend = Spend(generated_tokens=len(prompt_lengths) * n * max_tokens, prompt_tokens=sum(prompt_lengths))
    if scorer is None:
        return spend
    children = [length + max_tokens for length in prompt_lengths for _ in range(n)]
    flags = [finished] * (len(children) + len(pending))
    return spend + scorer.least_spend(children + list(pending), flags, prompt)


def fit_round(meter: ComputeMeter, tree: SearchTree, nodes: Sequence[int], params: SamplingParams, scorer=None,
              *, finished: bool | None = None, pending: Sequence[int] = (),
              reserve: Spend = Spend()) -> tuple[list[int], SamplingParams] | None:
    """The largest version of the round "sample `params` below `nodes`, then score the children with
    `scorer`" that the budget affords, as (the nodes kept, their params); None when none does.

    pending: nodes already sampled whose scoring is still to come (scored together with these children).
    reserve: spend promised to later work (e.g. budget forcing's answers), which must still fit.
    """
    nodes = list(nodes)
    if meter.budget is None:
        return nodes, params
    lengths = [len(tree.prefix_ids(node)) for node in nodes]
    waiting = [len(tree.prefix_ids(node)) for node in pending]

    def fits(k: int, n: int, max_tokens: int) -> bool:
        spend = round_spend(lengths[:k], n, max_tokens, scorer, finished=finished, pending=waiting,
                            prompt=tree.prompt_ids)
        return meter.affords(spend + reserve)

    k, n, max_tokens = len(nodes), params.n, params.max_tokens
    if fits(k, n, max_tokens):
        return nodes, params
    fewer = largest(1, n, lambda m: fits(k, m, max_tokens))
    if fewer is not None:
        return nodes, params.replace(n=fewer)
    kept = largest(1, k, lambda m: fits(m, 1, max_tokens))
    if kept is not None:
        return nodes[:kept], params.replace(n=1)
    shorter = largest(1, max_tokens, lambda t: fits(1, 1, t))
    if shorter is not None:
        return nodes[:1], params.replace(n=1, max_tokens=shorter)
    return None
