"""Answers: extraction from a response's text, equivalence of two answers, and the vote rules that
choose the final answer among candidate responses.

A leaf module (it imports nothing from `planner`), shared by the strategies and the scorers.

Extraction and verification default to the math verifier (`verifiers.math.extract_answer` and
`verifiers.math.verify`); a task passes its own `extract` / `equivalent` where it has them.

Vote rules (`VOTES`):

- "majority": self-consistency (Wang et al. 2022): the answer given by most candidates.
- "weighted": reward-weighted vote (search-and-learn; Li et al. 2023): the answer whose candidates'
  scores sum highest.
- "best": best-of-N by score (Cobbe et al. 2021): the single highest-scored candidate.

Answers are grouped with an `equivalent(a, b)` predicate (default: equal after stripping).
Candidates without an extracted answer never win a vote unless no candidate has one.
Ties go to the group seen first, so the result is deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from verifiers.math import extract_answer, verify

__all__ = ["Extract", "Equivalent", "default_extract", "default_verify", "same_answer", "VOTES", "vote",
           "group_answers"]

Extract = Callable[[str], "str | None"]
"""Answer extraction: a response's text -> its answer, or None when it gives none."""
Equivalent = Callable[[str, str], bool]
"""Whether two extracted answers are the same answer."""


def default_extract(text: str) -> str | None:
    """The answer of a response's text: `verifiers.math.extract_answer`."""
    return extract_answer(text)


def default_verify(gold: str, pred: str) -> bool:
    """Whether `pred` is the reference answer `gold`: `verifiers.math.verify(gold, pred)`."""
    return bool(verify(gold, pred))


def same_answer(a: str, b: str) -> bool:
    """The default equivalence for voting: equal after stripping surrounding whitespace."""
    return a.strip() == b.strip()


def group_answers(answers: Sequence[str | None], equivalent: Callable[[str, str], bool] = same_answer) -> list[list[int]]:
    """Indices of candidates grouped by equivalent answer, in order of first appearance (None skipped)."""
    groups: list[list[int]] = []
    for i, answer in enumerate(answers):
        if answer is None:
            continue
        for group in groups:
            if equivalent(answers[group[0]], answer):
                group.append(i)
                break
        else:
            groups.append([i])
    return groups


def _best_in(group: list[int], weights: Sequence[float]) -> int:
    return max(group, key=lambda i: (weights[i], -i))


def _majority(answers, weights, equivalent) -> int:
    groups = group_answers(answers, equivalent)
    if not groups:
        return _best_in(list(range(len(answers))), weights)
    top = max(groups, key=len)  # max keeps the first of equal-sized groups
    return _best_in(top, weights)


def _weighted(answers, weights, equivalent) -> int:
    groups = group_answers(answers, equivalent)
    if not groups:
        return _best_in(list(range(len(answers))), weights)
    top = max(groups, key=lambda g: sum(weights[i] for i in g))
    return _best_in(top, weights)


def _best(answers, weights, equivalent) -> int:
    return _best_in(list(range(len(answers))), weights)


VOTES: dict[str, Callable[[Sequence[str | None], Sequence[float], Callable[[str, str], bool]], int]] = {
    "majority": _majority,
    "weighted": _weighted,
    "best": _best,
}
"""Vote rule name -> function(answers, weights, equivalent) returning the chosen candidate's index."""


def vote(rule: str, answers: Sequence[str | None], weights: Sequence[float] | None = None,
         equivalent: Callable[[str, str], bool] | None = None) -> int:
    """Index of the candidate chosen by `rule` (one of `VOTES`)."""
    if rule not in VOTES:
        raise ValueError(f"vote rule must be one of {sorted(VOTES)}; got {rule!r}")
    if not answers:
        raise ValueError("vote needs at least one candidate")
    weights = [1.0] * len(answers) if weights is None else list(weights)
    return VOTES[rule](list(answers), weights, equivalent or same_answer)
