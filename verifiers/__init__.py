"""Verifiers: answer extraction and equivalence, format reward, Countdown/24, code sandbox, tasks.

One contract for every task (`Verifier`): ``score(completion, reference) -> float``,
``extract(completion) -> str | None`` for voting and ``equivalent(a, b) -> bool``. Every
verifier returns within a time limit on any input: sympy work runs in bounded worker processes
(`verifiers.timeout`), code runs in a sandboxed child process (`verifiers.code`).
"""

from verifiers.code import SandboxLimits, SandboxResult, humaneval_program, run_code, run_many, score_humaneval
from verifiers.countdown import check_countdown, check_game24, evaluate_expression, extract_expression
from verifiers.format import R1_FORMAT, FormatSpec, format_reward
from verifiers.math import extract_answer, verify, verify_many
# tasks first: it registers the arithmetic task, which imports its types.
from verifiers.tasks import TASKS, VERIFIERS, CompositeReward, Problem, Task, Verifier, format_component, load_task, reward
from verifiers.arithmetic import ARITHMETIC_ALPHABET, Difficulty, arithmetic_task, check_steps, load_arithmetic, step_value  # noqa: E402

__all__ = [
    "ARITHMETIC_ALPHABET",
    "Difficulty",
    "arithmetic_task",
    "check_steps",
    "load_arithmetic",
    "step_value",
    "TASKS",
    "VERIFIERS",
    "R1_FORMAT",
    "CompositeReward",
    "FormatSpec",
    "Problem",
    "SandboxLimits",
    "SandboxResult",
    "Task",
    "Verifier",
    "check_countdown",
    "check_game24",
    "evaluate_expression",
    "extract_answer",
    "extract_expression",
    "format_component",
    "format_reward",
    "humaneval_program",
    "load_task",
    "reward",
    "run_code",
    "run_many",
    "score_humaneval",
    "verify",
    "verify_many",
]
