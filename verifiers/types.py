"""The types every task shares: `Problem`, `Verifier`, `Task` and the reward-function shape.

Words: a **reward** is what a verifier gives a completion for a problem, in [0, 1]
(``RewardFn``: ``(completion_text, problem) -> float``). A **grade** is a domain checker against a
bare reference (``verifiers.math.grade(completion, reference)``, ``countdown.grade_game24``,
``code.grade_humaneval``, ``arithmetic.grade``); `GradeReward` turns a grade into a reward by
passing ``problem.reference``. "Score" is reserved for a search scorer's value (``planner``).

This module imports nothing else from the package, so the task modules (``verifiers.tasks``,
``verifiers.arithmetic``) can both depend on it without importing each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["GradeFn", "GradeReward", "Problem", "RewardFn", "Task", "Verifier"]


@dataclass
class Problem:
    """One problem of a task."""

    id: str
    """Stable id, e.g. ``gsm8k/test/17`` or ``HumanEval/0``."""
    question: str
    """Plain prompt text: the problem followed by the answer-format instruction."""
    reference: Any
    """What the task's grade checks against: an answer string (math, arithmetic),
    ``{"nums", "target"}`` (countdown, game24), ``{"prompt", "test", "entry_point"}`` (humaneval),
    ``{"answer", "kind"}`` (custom: see ``verifiers.answer_kinds``)."""
    task: str
    """Name of the task in ``verifiers.tasks.TASKS``."""
    meta: dict = field(default_factory=dict)
    """Everything else from the row (worked solution, level, subject, raw question, ...)."""

    def chat_messages(self, system_prompt: str | None = None) -> list[dict[str, str]]:
        """The question as chat messages (for ``tokenizer.apply_chat_template``)."""
        messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
        return messages + [{"role": "user", "content": self.question}]


RewardFn = Callable[[str, Problem], float]
"""The one reward shape: ``(completion_text, problem) -> float`` in [0, 1]."""

GradeFn = Callable[[str, Any], float]
"""A domain checker against a bare reference: ``(completion_text, reference) -> float`` in [0, 1]."""


@dataclass(frozen=True)
class GradeReward:
    """A `RewardFn` made from a `GradeFn`: grades the completion against ``problem.reference``.

    A small class rather than a closure so that verifiers (and the tasks holding them) pickle,
    e.g. into worker processes.
    """

    grade: GradeFn
    """The domain checker, e.g. ``verifiers.math.grade``; a module-level function so it pickles."""

    def __call__(self, completion: str, problem: Problem) -> float:
        return float(self.grade(completion, problem.reference))


@dataclass(frozen=True)
class Verifier:
    """The verifier contract shared by every task: reward, answer extraction, answer equality."""

    reward: RewardFn
    """Reward of a completion for a problem, in [0, 1]; returns within a time limit on any input."""
    extract: Callable[[str], str | None]
    """The answer a completion gives (for voting), None when it gives none."""
    equivalent: Callable[[str, str], bool]
    """Whether two extracted answers are the same answer (groups votes)."""


@dataclass
class Task:
    """A loaded task: its problems and its verifier."""

    name: str
    """Name of the task in ``verifiers.tasks.TASKS``."""
    problems: list[Problem]
    """The problems, in the dataset's order."""
    verifier: Verifier
    """The task's verifier (the same object as ``verifiers.tasks.VERIFIERS[name]``)."""

    def reward(self, completion: str, problem: Problem) -> float:
        """The verifier's reward of ``completion`` for ``problem`` (0.0 for a non-string completion)."""
        if not isinstance(completion, str):
            return 0.0
        return float(self.verifier.reward(completion, problem))

    def __len__(self) -> int:
        return len(self.problems)
