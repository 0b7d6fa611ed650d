"""Verifiers: answer extraction and equivalence, format reward, Countdown/24, code sandbox, tasks.

One contract for every task (`Verifier`, in ``verifiers.types``): ``reward(completion, problem)
-> float`` in [0, 1], ``extract(completion) -> str | None`` for voting and ``equivalent(a, b) ->
bool``. Each domain module has a ``grade...(completion, reference)`` checker against a bare
reference (``math.grade``, ``countdown.grade_countdown``/``grade_game24``,
``code.grade_humaneval``, ``arithmetic.grade``); a verifier's reward is its grade against
``problem.reference``. Every verifier returns within a time limit on any input: sympy work runs
in bounded worker processes (`verifiers.timeout`), code runs in sandboxed child processes
(`verifiers.sandbox`), HumanEval completions under a judge that holds the tests (`verifiers.code_judge`).
"""

from verifiers.provenance import check_packages

check_packages()  # another distribution may provide `planner`, `rl` or `verifiers` too: fail here with the fix

from verifiers.arithmetic import ARITHMETIC_ALPHABET, Difficulty, arithmetic_task, check_steps, load_arithmetic, step_value
from verifiers.code import SandboxResult, grade_humaneval, humaneval_program, run_code, run_many
from verifiers.code_judge import JudgeResult, judge_humaneval
from verifiers.countdown import check_countdown, check_game24, evaluate_expression, extract_expression
from verifiers.format import R1_FORMAT, FormatSpec, format_reward
from verifiers.math import extract_answer, verify, verify_many
from verifiers.sandbox import SandboxLimits
from verifiers.tasks import TASKS, VERIFIERS, CompositeReward, format_component, load_task, reward
from verifiers.types import GradeReward, Problem, RewardFn, Task, Verifier

__all__ = [
    "ARITHMETIC_ALPHABET",
    "R1_FORMAT",
    "TASKS",
    "VERIFIERS",
    "CompositeReward",
    "Difficulty",
    "FormatSpec",
    "GradeReward",
    "JudgeResult",
    "Problem",
    "RewardFn",
    "SandboxLimits",
    "SandboxResult",
    "Task",
    "Verifier",
    "arithmetic_task",
    "check_countdown",
    "check_game24",
    "check_steps",
    "evaluate_expression",
    "extract_answer",
    "extract_expression",
    "format_component",
    "format_reward",
    "grade_humaneval",
    "humaneval_program",
    "judge_humaneval",
    "load_arithmetic",
    "load_task",
    "reward",
    "run_code",
    "run_many",
    "step_value",
    "verify",
    "verify_many",
]
