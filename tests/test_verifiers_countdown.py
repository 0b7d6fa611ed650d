"""Countdown and Game of 24: brute-force solutions from the data verify; cheats are rejected."""

from __future__ import annotations

import csv
import json
import random
import time
from fractions import Fraction
from pathlib import Path

from verifiers.countdown import (
    MAX_EXPRESSION_CHARS,
    check_countdown,
    check_game24,
    evaluate_expression,
    extract_expression,
    grade_countdown,
    grade_game24,
)

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def solve(numbers: list[int], target: int, use_all: bool) -> str | None:
    """Brute force: repeatedly combine two of the remaining terms with + - * /."""
    def search(terms: list[tuple[Fraction, str]]) -> str | None:
        if not use_all or len(terms) == 1:
            for value, text in terms:
                if value == target and (not use_all or len(terms) == 1):
                    return text
        for i in range(len(terms)):
            for j in range(len(terms)):
                if i == j:
                    continue
                (a, ta), (b, tb) = terms[i], terms[j]
                rest = [t for k, t in enumerate(terms) if k not in (i, j)]
                options = [(a + b, f"({ta} + {tb})"), (a - b, f"({ta} - {tb})"), (a * b, f"({ta} * {tb})")]
                if b != 0:
                    options.append((a / b, f"({ta} / {tb})"))
                for option in options:
                    found = search(rest + [option])
                    if found:
                        return found
        return None

    return search([(Fraction(n), str(n)) for n in numbers])


def test_countdown_rows_solutions_verify():
    rows = [json.loads(line) for line in (DATA / "countdown" / "test.jsonl").read_text().splitlines()]
    assert len(rows) == 2001
    sample = random.Random(0).sample(rows, 300)
    solved = 0
    for row in sample:
        expression = solve(row["nums"], row["target"], use_all=False)
        if expression is None:
            continue  # the brute force proves this row has no solution
        solved += 1
        assert check_countdown(expression, row["nums"], row["target"]), (expression, row)
        reference = {"nums": row["nums"], "target": row["target"]}
        assert grade_countdown(f"<think>try</think> <answer>{expression}</answer>", reference) == 1.0
        assert not check_countdown(expression, row["nums"], row["target"] + 1)
    assert solved >= 250


def test_game24_all_rows_have_a_verified_solution():
    with open(DATA / "game24" / "24.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 1362
    start = time.monotonic()
    for row in rows:
        numbers = [int(n) for n in row["Puzzles"].split()]
        expression = solve(numbers, 24, use_all=True)
        assert expression is not None, row
        assert check_game24(expression, numbers), (expression, numbers)
    assert time.monotonic() - start < 60


def test_evaluate_is_exact():
    assert evaluate_expression("8 / (3 - 8 / 3)") == (Fraction(24), [8, 3, 8, 3])
    assert check_game24("8 / (3 - 8 / 3)", [3, 3, 8, 8])
    assert evaluate_expression("1 / 0") is None


def test_cheats_rejected():
    assert not check_countdown("96 - 37 - 7 + 7", [96, 7, 37, 74], 59)  # 7 reused
    assert not check_countdown("50 + 5", [96, 7, 37, 74], 55)  # unlisted numbers
    assert check_countdown("74 - 96 + 37 + 7 - 7", [96, 7, 37, 74, 7], 15)  # listed twice: fine
    assert not check_game24("(1 + 1) * 12", [1, 1, 4, 6])  # 12 not given, 4 and 6 unused
    assert not check_game24("4 * 6", [1, 1, 4, 6])  # exactly once: all numbers needed
    assert check_countdown("4 * 6", [1, 1, 4, 6], 24)  # at most once: fine for Countdown
    for cheat in (
        "__import__('os').system('true')",
        "abs(24)",
        "2 ** 10",
        "9 ** 9 ** 9 ** 9",
        "-(-24)",
        "24.0",
        "x",
        "[24][0]",
        "24 if True else 0",
        "(lambda: 24)()",
    ):
        assert evaluate_expression(cheat) is None, cheat
        assert not check_countdown(cheat, [24, 2, 10, 9, 0], 24)


def test_long_and_malformed_input_rejected_fast():
    start = time.monotonic()
    assert evaluate_expression("1+" * 100_000 + "1") is None
    assert evaluate_expression("(" * MAX_EXPRESSION_CHARS + "1" + ")" * MAX_EXPRESSION_CHARS) is None
    assert evaluate_expression("(" * 90 + "1" + ")" * 90) == (Fraction(1), [1])
    assert evaluate_expression("1 +") is None
    assert evaluate_expression(None) is None
    assert extract_expression("x" * 1_000_000) is None
    assert extract_expression("<answer>" * 200_000 + "1 + 2</answer>") == "1 + 2"
    assert extract_expression("<answer>1 + 2" + "</answer>" * 200_000) == "1 + 2"
    assert time.monotonic() - start < 2.0


def test_extract_expression_forms():
    assert extract_expression("<answer>(1 + 2) * 8</answer>") == "(1 + 2) * 8"
    assert extract_expression("so \\boxed{3 \\times 8 = 24}") == "3 * 8"
    assert extract_expression("Let me think.\n(6 - 2) × 6 = 24\n") == "(6 - 2) * 6"
    assert extract_expression("no expression here") is None
    assert grade_game24("<answer>(6 - 2) * 6</answer>", {"nums": [6, 2, 6, 1]}) == 0.0  # 1 unused
    assert grade_game24("<answer>(6 - 2) * (5 + 1)</answer>", {"nums": [6, 2, 5, 1]}) == 1.0
