"""Countdown and Game of 24: check an arithmetic expression over given numbers, exactly.

The expression is parsed with ``ast`` (never ``eval``) and only integer literals, ``+ - * /`` and
parentheses are accepted, so there is no way to call functions, take huge powers or touch names.
Arithmetic uses ``fractions.Fraction``, so ``8 / (3 - 8 / 3)`` is exactly 24 and no float
rounding can pass a wrong answer. Countdown allows each given number at most once; Game of 24
requires each exactly once. Inputs longer than `MAX_EXPRESSION_CHARS` are rejected unparsed.
`grade_countdown` / `grade_game24` grade a whole completion against ``{"nums", "target"}``.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Sequence
from fractions import Fraction

from verifiers.math import extract_boxed

__all__ = [
    "MAX_EXPRESSION_CHARS",
    "check_countdown",
    "check_game24",
    "evaluate_expression",
    "extract_expression",
    "grade_countdown",
    "grade_game24",
]

MAX_EXPRESSION_CHARS = 200
"""Longest expression accepted (a 4-number solution needs about 20 characters)."""

_OPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
}


def evaluate_expression(expression: str) -> tuple[Fraction, list[int]] | None:
    """Exact value of an arithmetic expression and the integer literals it uses, in order.

    None when the text is too long, does not parse, contains anything but non-negative integer
    literals, ``+ - * /`` and parentheses, or divides by zero.
    """
    if not isinstance(expression, str) or len(expression) > MAX_EXPRESSION_CHARS:
        return None
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    numbers: list[int] = []

    def value(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Constant) and type(node.value) is int and node.value >= 0:
            numbers.append(node.value)
            return Fraction(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](value(node.left), value(node.right))
        raise ValueError(f"disallowed syntax: {type(node).__name__}")

    try:
        return value(tree.body), numbers
    except (ValueError, ZeroDivisionError, RecursionError):
        return None


_EXPRESSION_LINE = re.compile(r"[\d\s+\-*/×÷().=]+")


def extract_expression(completion: str) -> str | None:
    """The expression a completion answers with.

    Takes the last ``<answer>...</answer>`` (TinyZero's format), else the last ``\\boxed{}``, else
    the last line made only of digits, operators, parentheses and ``=``. A trailing ``= N`` (the
    claimed result) is dropped; ``×``/``÷`` become ``*``/``/``. None when nothing is found.
    """
    if not isinstance(completion, str):
        return None

    start = completion.rfind("<answer>")
    end = completion.find("</answer>", start) if start >= 0 else -1
    candidate = completion[start + len("<answer>") : end] if end >= 0 else extract_boxed(completion)
    if candidate is None:
        for line in reversed(completion.strip().splitlines()[-50:]):
            line = line.strip().strip("$").strip()
            if line and _EXPRESSION_LINE.fullmatch(line) and re.search(r"\d", line):
                candidate = line
                break
    if candidate is None:
        return None
    candidate = candidate.replace("×", "*").replace("÷", "/").replace("\\times", "*").replace("\\div", "/")
    candidate = candidate.strip().strip("$").strip()
    if "=" in candidate:
        candidate = candidate.split("=")[0].strip()
    return candidate or None


def check_countdown(expression: str, numbers: Sequence[int], target: int) -> bool:
    """True when ``expression`` equals ``target`` using each of ``numbers`` at most once."""
    result = evaluate_expression(expression)
    if result is None:
        return False
    value, used = result
    if Counter(used) - Counter(int(n) for n in numbers):
        return False  # a number used more often than given, or one not given at all
    return value == target


def check_game24(expression: str, numbers: Sequence[int], target: int = 24) -> bool:
    """True when ``expression`` equals ``target`` (24) using each of ``numbers`` exactly once."""
    result = evaluate_expression(expression)
    if result is None:
        return False
    value, used = result
    return Counter(used) == Counter(int(n) for n in numbers) and value == target


def grade_countdown(completion: str, reference: dict) -> float:
    """1.0 when the completion's expression solves ``reference = {"nums": [...], "target": N}``."""
    expression = extract_expression(completion)
    return 1.0 if expression and check_countdown(expression, reference["nums"], reference["target"]) else 0.0


def grade_game24(completion: str, reference: dict) -> float:
    """1.0 when the completion's expression makes 24 from ``reference = {"nums": [...]}``."""
    expression = extract_expression(completion)
    target = reference.get("target", 24)
    return 1.0 if expression and check_game24(expression, reference["nums"], target) else 0.0
