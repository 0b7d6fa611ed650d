"""Compute accounting and budgets for a search.

FLOPs are estimated as 2 x parameters x tokens per forward token (Kaplan et al. 2020), for each
model separately:

- policy: `2 * policy.num_parameters * (prompt_tokens - cached_prompt_tokens + generated_tokens)`,
  i.e. prompt tokens served from the prefix cache cost nothing;
- scorer: `2 * scorer.num_parameters * scorer_tokens` (tokens the scorer ran a forward pass over).

A Monte-Carlo rollout scorer samples with the policy, so its rollouts are already inside the policy
counters; it reports `num_parameters = 0` to avoid counting them twice.

**Bound.** A strategy checks its `Budget` *before* each expansion round (one batched generate call
plus the scoring of what it produced) and stops once the budget is spent, so the spend never exceeds
the budget by more than one round: for generated tokens, at most
`samples_in_round * max_tokens_per_sample` (plus the scorer's rollouts for that round, when the
scorer samples with the policy). One round is, per strategy:

- best_of_n: one batch, `batch_size * max_tokens`;
- beam and dvts: `num_beams * max_step_tokens`;
- mcts: `leaves_per_round * num_candidates * max_step_tokens`;
- budget_forcing: one call, at most `n * max(max_thinking_tokens, max_answer_tokens)`.

For a FLOP budget the overshoot is that round's FLOPs (its prompts, its samples and their scoring).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, fields

from planner.policy.types import ComputeStats

__all__ = ["Budget", "ComputeRecord", "ComputeMeter", "as_budget"]


@dataclass(frozen=True)
class Budget:
    """Stop a search once it has spent this much. Either limit (or both) may be set."""

    generated_tokens: int | None = None
    """Most policy-generated tokens (all calls, including a rollout scorer's)."""
    flops: float | None = None
    """Most estimated FLOPs, policy plus scorer (see the module docstring)."""

    def __post_init__(self) -> None:
        if self.generated_tokens is not None and (not isinstance(self.generated_tokens, int)
                                                  or self.generated_tokens < 1):
            raise ValueError(f"Budget.generated_tokens must be an integer >= 1 or None; got {self.generated_tokens!r}")
        if self.flops is not None and not self.flops > 0:
            raise ValueError(f"Budget.flops must be a number > 0 or None; got {self.flops!r}")

    def spent(self, record: "ComputeRecord") -> bool:
        """True once `record` has reached either limit."""
        return ((self.generated_tokens is not None and record.generated_tokens >= self.generated_tokens)
                or (self.flops is not None and record.flops >= self.flops))


def as_budget(budget: "Budget | int | None") -> Budget | None:
    """An integer means generated tokens; None means no budget."""
    if budget is None or isinstance(budget, Budget):
        return budget
    if isinstance(budget, int) and not isinstance(budget, bool):
        return Budget(generated_tokens=budget)
    raise TypeError(f"budget must be a planner.Budget, an integer (generated tokens) or None; got {budget!r}")


@dataclass
class ComputeRecord:
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

    def __add__(self, other: "ComputeRecord") -> "ComputeRecord":
        return ComputeRecord(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def to_dict(self) -> dict:
        return {**{f.name: getattr(self, f.name) for f in fields(self)}, "flops": self.flops}


class ComputeMeter:
    """Measures a search's spend as the difference of the policy's and scorer's running counters."""

    def __init__(self, policy, scorer=None, budget: Budget | None = None) -> None:
        self.policy, self.scorer, self.budget = policy, scorer, budget
        self._policy_start = policy.stats.copy()
        self._scorer_start = scorer.stats.copy() if scorer is not None else ComputeStats()
        self._clock_start = time.perf_counter()

    def record(self) -> ComputeRecord:
        policy = self.policy.stats - self._policy_start
        scorer = (self.scorer.stats - self._scorer_start) if self.scorer is not None else ComputeStats()
        scorer_params = getattr(self.scorer, "num_parameters", 0) if self.scorer is not None else 0
        computed_prompt = policy.prompt_tokens - policy.cached_prompt_tokens
        return ComputeRecord(
            generated_tokens=policy.generated_tokens, prompt_tokens=policy.prompt_tokens,
            cached_prompt_tokens=policy.cached_prompt_tokens, policy_calls=policy.calls,
            scorer_calls=scorer.calls, scorer_tokens=scorer.prompt_tokens,
            policy_flops=2.0 * self.policy.num_parameters * (computed_prompt + policy.generated_tokens),
            scorer_flops=2.0 * scorer_params * scorer.prompt_tokens,
            seconds=time.perf_counter() - self._clock_start)

    def exhausted(self) -> bool:
        """True when the budget is spent; strategies ask this before each expansion round."""
        return self.budget is not None and self.budget.spent(self.record())
