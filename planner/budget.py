"""Compute accounting and budgets for a search.

FLOPs are estimated as 2 x parameters x tokens per forward token (Kaplan et al. 2020), for each
model separately:

- policy: `2 * policy.num_parameters * (prompt_tokens - cached_prompt_tokens + generated_tokens)`,
  i.e. prompt tokens served from the prefix cache cost nothing;
- scorer: `2 * scorer.num_parameters * scorer_tokens` (tokens the scorer ran a forward pass over).

A Monte-Carlo rollout scorer samples with the policy, so its rollouts are already inside the policy
counters; it reports `num_parameters = 0` to avoid counting them twice.

**Bound.** A budget is a ceiling: a search given `Budget(generated_tokens=G, flops=F)` never
generates more than G tokens (every policy call, a rollout scorer's included) and never spends more
than F estimated FLOPs (policy plus scorer), whatever the policy samples. Before each round (one
generate call plus the scoring of what it produces) the strategy prices the round's worst case as
a `Spend` (`fit_round` in `planner/strategies/fitting.py`): every sample runs to its `max_tokens`,
every prompt token is computed (the prefix cache can only make the real spend smaller), and the
scorer's least spend for the round's children is added (`Scorer.least_spend`: one 1-token rollout
per prefix for a rollout scorer, the prefixes' tokens for a model). A FLOP budget prices the same
worst case with the parameter counts above. `ComputeMeter.affords` says whether that worst case fits
in what is left. A round that does not fit is shrunk, in this order, until it fits: fewer samples
per prompt (down to 1), fewer prompts (the first ones are kept: the best beams, the first
selections), a smaller `max_tokens` (down to 1). A round that does not fit even then is not run: the
search stops and chooses its answer from what exists (with nothing, the empty answer). The scoring
then runs within what is left (`Scorer.score(..., affordable=meter.affords)`): a Monte-Carlo scorer
uses fewer rollouts per prefix, then shorter ones. Per strategy:

- best_of_n: each batch is sized together with the scoring of every response so far (scored at
  the end);
- beam, dvts: each round's expansions and their scoring; mcts likewise, and its final `complete` of
  an unfinished chosen node is capped to what is left (skipped when nothing is);
- budget_forcing: each thinking call is sized so that every sample's answer (`max_answer_tokens`)
  and the final scoring still fit; a thinking sample cut short by the budget closes its thinking as
  the maximum does, and when no thinking call fits, every thinking sample is closed and answers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from planner.policy.types import ComputeStats, Counters

__all__ = ["Budget", "ComputeRecord", "ComputeMeter", "Spend", "as_budget", "largest"]


@dataclass(frozen=True)
class Budget:
    """The most a search may spend: a ceiling (see the module docstring). Either limit (or both) may be set."""

    generated_tokens: int | None = None
    """Most policy-generated tokens (all calls, including a rollout scorer's)."""
    flops: float | None = None
    """Most estimated FLOPs, policy plus scorer (see the module docstring)."""

    def __post_init__(self) -> None:
        if self.generated_tokens is not None and (not isinstance(self.generated_tokens, int)
                                                  or isinstance(self.generated_tokens, bool)
                                                  or self.generated_tokens < 1):
            raise ValueError(f"Budget.generated_tokens must be an integer >= 1 or None; got {self.generated_tokens!r}")
        if self.flops is not None and (not isinstance(self.flops, (int, float)) or isinstance(self.flops, bool)
                                       or not self.flops > 0):
            raise ValueError(f"Budget.flops must be a number > 0 or None; got {self.flops!r}")


@dataclass(frozen=True)
class Spend(Counters):
    """An upper bound on what work not yet done will spend; a strategy sizes a round by it."""

    generated_tokens: int = 0
    """Tokens the policy will generate (a rollout scorer's rollouts included)."""
    prompt_tokens: int = 0
    """Prompt tokens the policy will process, all counted as computed (none from the cache)."""
    scorer_tokens: int = 0
    """Tokens the scorer's own model will run a forward pass over."""


def largest(low: int, high: int, fits: Callable[[int], bool]) -> int | None:
    """The largest v in [low, high] with fits(v), for a `fits` that holds up to some value and not
    above it; None when not even fits(low)."""
    if high < low or not fits(low):
        return None
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low


def as_budget(budget: "Budget | int | None") -> Budget | None:
    """An integer means generated tokens; None means no budget."""
    if budget is None or isinstance(budget, Budget):
        return budget
    if isinstance(budget, int) and not isinstance(budget, bool):
        return Budget(generated_tokens=budget)
    raise TypeError(f"budget must be a planner.Budget, an integer (generated tokens) or None; got {budget!r}")


@dataclass
class ComputeRecord(Counters):
    """What one search spent."""

    generated_tokens: int = 0
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    policy_calls: int = 0
    scorer_calls: int = 0
    scorer_tokens: int = 0
    policy_flops: float = 0.0
    scorer_flops: float = 0.0
    seconds: float = 0.0
    """Wall-clock seconds of the search."""

    @property
    def flops(self) -> float:
        return self.policy_flops + self.scorer_flops

    def to_dict(self) -> dict:
        return {**super().to_dict(), "flops": self.flops}


class ComputeMeter:
    """Measures a search's spend as the difference of the policy's and scorer's running counters."""

    def __init__(self, policy, scorer=None, budget: Budget | None = None) -> None:
        self.policy, self.scorer, self.budget = policy, scorer, budget
        self._policy_start = policy.stats.copy()
        self._scorer_start = scorer.stats.copy() if scorer is not None else ComputeStats()
        self._clock_start = time.perf_counter()

    @property
    def _scorer_parameters(self) -> int:
        return getattr(self.scorer, "num_parameters", 0) if self.scorer is not None else 0

    def record(self) -> ComputeRecord:
        policy = self.policy.stats - self._policy_start
        scorer = (self.scorer.stats - self._scorer_start) if self.scorer is not None else ComputeStats()
        computed_prompt = policy.prompt_tokens - policy.cached_prompt_tokens
        return ComputeRecord(
            generated_tokens=policy.generated_tokens, prompt_tokens=policy.prompt_tokens,
            cached_prompt_tokens=policy.cached_prompt_tokens, policy_calls=policy.calls,
            scorer_calls=scorer.calls, scorer_tokens=scorer.prompt_tokens,
            policy_flops=2.0 * self.policy.num_parameters * (computed_prompt + policy.generated_tokens),
            scorer_flops=2.0 * self._scorer_parameters * scorer.prompt_tokens,
            seconds=time.perf_counter() - self._clock_start)

    def flops_of(self, spend: Spend) -> float:
        """The FLOPs `spend` costs at most (the module docstring's estimates, nothing cached)."""
        return (2.0 * self.policy.num_parameters * (spend.prompt_tokens + spend.generated_tokens)
                + 2.0 * self._scorer_parameters * spend.scorer_tokens)

    def affords(self, spend: Spend) -> bool:
        """Whether `spend` on top of what was spent stays within the budget (always, without one)."""
        if self.budget is None:
            return True
        record = self.record()
        tokens, flops = self.budget.generated_tokens, self.budget.flops
        return ((tokens is None or record.generated_tokens + spend.generated_tokens <= tokens)
                and (flops is None or record.flops + self.flops_of(spend) <= flops))
