"""Grading whole completions: our own cases for the answer forms graders disagree on.

Each case says in plain words why the verdict is right. They were written for this repository
from the categories of the held-out suite described in docs/reliability.md ("Grading"), not
taken from another project's tests.
"""

from __future__ import annotations

import time

import pytest

import verifiers.math as vmath
from verifiers.math import extract_answer, extract_boxed, extract_last_item, grade, verify
from verifiers.math_forms import definition_value, reading_pairs, readings

# ------------------------------------------------------------------ LaTeX inside prose


@pytest.mark.parametrize(
    "completion, reference, expected",
    [
        # The only math in the sentence is the answer, even with words after it.
        ("So we conclude that $y \\leq -3$ holds for every solution.", "y <= -3", 1.0),
        ("Hence \\(\\frac{7}{12}\\) of the tank is full.", "7/12", 1.0),
        # A later plain number is the answer: the span was an intermediate step.
        ("Each box holds $4 \\times 6 = 24$ eggs, so 5 boxes hold 120 eggs.", "120", 1.0),
        # A span that names a variable answers nothing; the number after it does.
        ("The count of $n$ we need is 17.", "17", 1.0),
        # A wrong answer in prose stays wrong.
        ("So we conclude that $y \\geq -3$ holds.", "y <= -3", 0.0),
    ],
)
def test_latex_answer_inside_prose(completion, reference, expected):
    assert grade(completion, reference) == expected


def test_escaped_dollar_does_not_end_a_math_span():
    # "\$" is a literal dollar sign inside math, not the end of the span.
    assert extract_last_item("Cost: $ 3 \\$ + 4 \\$ = 7 \\$ $") == "3 \\$ + 4 \\$ = 7 \\$"


# ------------------------------------------------------------------ relations


@pytest.mark.parametrize(
    "gold, pred, equal",
    [
        ("y \\geq 2", "y >= 2", True),  # the same relation in LaTeX and in ASCII
        ("y < 7", "7 > y", True),  # a flipped inequality says the same
        ("y \\neq 0", "y != 0", True),
        ("y > 7", "y \\geq 7", False),  # strict and non-strict differ at y = 7
        ("y < 7", "y > 7", False),
    ],
)
def test_relations(gold, pred, equal):
    assert grade(pred, gold) == float(equal)


# ------------------------------------------------------------------ sets, tuples, lists


@pytest.mark.parametrize(
    "gold, completion, equal",
    [
        # A set written with bare braces is still a set: order does not matter.
        ("\\{3, 8\\}", "{8, 3}", True),
        # Two boxes joined by "and" answer together, as a solution list.
        ("-4, 6", "The roots are \\boxed{6} and \\boxed{-4}.", True),
        # Boxes inside one display span are one answer, whatever text sits between them.
        ("(2, 5), (5, 2)", "$$\\boxed{(5, 2)} \\text{ and also } \\boxed{(2, 5)}$$", True),
        # Boxes separated by prose are separate: only the last one answers.
        ("-4, 6", "First \\boxed{6}, then after checking again we get \\boxed{-4}", False),
        # "and" / "or" / "\text{ and }" between items are list separators.
        ("-1, 5, 9", "9, -1 \\text{ and } 5", True),
        ("2, 3", "$2$ or $3$", True),
        # A point is ordered: swapping its coordinates is another point.
        ("(4, -1)", "\\boxed{(-1, 4)}", False),
        ("(4, -1)", "The intersection is $(4, -1)$.", True),
    ],
)
def test_sets_tuples_and_lists(gold, completion, equal):
    assert grade(completion, gold) == float(equal), extract_answer(completion)


def test_adjacent_boxes_are_joined_only_across_separators():
    assert extract_boxed("\\boxed{1}, \\boxed{2} \\quad \\text{or} \\quad \\boxed{3}") == "1, 2, 3"
    assert extract_boxed("\\boxed{1} is wrong, it is \\boxed{2}") == "2"


# ------------------------------------------------------------------ intervals


@pytest.mark.parametrize(
    "gold, pred, equal",
    [
        ("[-2, 5)", "[-2,5)", True),
        ("(-\\infty, 0] \\cup (3, \\infty)", "(-\\infty,0]\\cup(3,\\infty)", True),
        ("[-2, 5)", "(-2, 5)", False),  # an open end excludes -2
        ("y \\in [1, 4]", "[1, 4]", True),  # "y \in" only names the variable
    ],
)
def test_intervals(gold, pred, equal):
    assert verify(gold, pred) is equal


# ------------------------------------------------------------------ units


@pytest.mark.parametrize(
    "gold, pred, equal",
    [
        ("36", "36 square meters", True),  # unit words after the number are not the answer
        ("36 \\text{ cm}^2", "36", True),
        ("12 days", "12", True),
        ("36", "63 square meters", False),
        ("4_{8}", "4_8", True),  # a base subscript with or without braces
    ],
)
def test_units(gold, pred, equal):
    assert verify(gold, pred) is equal


# ------------------------------------------------------------------ fractions and mixed numbers


@pytest.mark.parametrize(
    "gold, pred, equal",
    [
        ("\\frac{13}{5}", "2 3/5", True),  # a mixed number: 2 + 3/5
        ("-\\frac{13}{5}", "-2 3/5", True),
        ("2.6", "2\\frac35", True),  # MATH writes mixed numbers this way too
        ("\\frac{6}{5}", "2 3/5", False),  # not 2 * 3/5
        ("3", "2 5/5", False),  # an improper part is no mixed number
        ("\\frac{5}{8}", "10/16", True),
        ("\\frac{5}{8}", "\\\\frac{5}{8}", True),  # a doubled backslash, as JSON-escaped text writes it
    ],
)
def test_fractions_and_mixed_numbers(gold, pred, equal):
    assert verify(gold, pred) is equal
    assert verify(pred, gold) is equal


# ------------------------------------------------------------------ definitions and equations


def test_definitions_compare_by_value():
    # "g(t) = ..." and "h = ..." define the same value; the names are not the answer.
    assert definition_value("g(t) = 3t - 1") == "3t - 1" and definition_value("3t - 1") is None
    assert verify("g(t) = 3t - 1", "h = 3t - 1") and verify("g(t) = 3t - 1", "3t - 1")
    assert not verify("g(t) = 3t - 1", "g(t) = 3t + 1")
    # Two definitions compare one pair (their values), not every reading of each.
    assert reading_pairs("a = 4", "b = 4") == [("4", "4")]
    # A real equation (not "name = value") stays an equation.
    assert definition_value("3x + 2y = 6") is None


def test_groups_of_assignments_are_points():
    # "a=1, b=4; a=2, b=3" lists two solutions (a, b): the points (1, 4) and (2, 3).
    assert readings("a=1, b=4; a=2, b=3") == ["a=1, b=4; a=2, b=3", "(1, 4), (2, 3)"]
    assert verify("a=1, b=4; a=2, b=3", "(2, 3), (1, 4)")
    assert not verify("a=1, b=4; a=2, b=3", "(4, 1), (3, 2)")  # coordinates keep their order
    assert verify("u = 6, v = -1", "(6, -1)") and not verify("u = 6, v = -1", "(-1, 6)")


# ------------------------------------------------------------------ bare answers and plain numbers


@pytest.mark.parametrize(
    "completion, reference, expected",
    [
        ("\\frac{9}{14}", "9/14", 1.0),  # the whole text is the answer, not its last number "14"
        ("(1, 2, 3)", "(1, 2, 3)", 1.0),
        ("$even$", "\\text{even}", 1.0),  # one math span is the answer even without a digit
        ("2 500", "2500", 1.0),  # a space as thousands separator
        ("B7Q3", "3", 0.0),  # digits glued to letters are no number
        ("3 then 8", "8", 1.0),  # words: not a bare answer; the last number answers
    ],
)
def test_bare_answers(completion, reference, expected):
    assert grade(completion, reference) == expected


# ------------------------------------------------------------------ the final expression of a derivation


def test_final_answer_phrase_after_an_earlier_box():
    # An intermediate result was boxed; the final-answer line that comes later is the answer.
    text = "First part: $\\boxed{30}$.\nAdding both parts gives 75.\nFinal Answer: The final answer is $75$."
    assert extract_answer(text) == "75" and grade(text, "75") == 1.0
    # A box after the phrase wins: it is the latest marker.
    assert extract_answer("The answer is below.\n\\boxed{12}") == "12"


def test_final_answer_phrase_followed_by_prose():
    text = "Final Answer: The smallest such $k$ is 41. I hope it is correct."
    assert extract_answer(text) == "41"


def test_long_derivation_ends_in_its_expression():
    steps = " ".join(f"Step {i}: $a_{{{i}}} = {i * i}$." for i in range(1, 40))
    text = steps + " Therefore the required sum is $\\frac{3\\sqrt{2}}{4}$ after simplification."
    assert extract_answer(text) == "\\frac{3\\sqrt{2}}{4}"
    assert grade(text, "\\frac{3}{4}\\sqrt{2}") == 1.0 and grade(text, "\\frac{3}{4}") == 0.0


# ------------------------------------------------------------------ speed and time bounds


@pytest.mark.parametrize("opening", ["\\[", "\\(", "$$", "$"])
def test_unclosed_math_delimiters_are_scanned_in_linear_time(opening):
    start = time.monotonic()
    extract_answer(opening * 40_000 + " 5")
    assert time.monotonic() - start < 2.0


def test_long_digit_runs_are_read_in_linear_time():
    # A 4000-digit answer (the most verify reads) once took seconds: a separator pattern retried
    # every digit of the run as a start.
    start = time.monotonic()
    reading_pairs("3", "7" * 4000)
    reading_pairs("3", "7" * 3999 + ",5")
    assert time.monotonic() - start < 0.5


def test_worker_warmup_runs_a_real_comparison():
    # The warmup parses LaTeX once so the first timed call does not pay for building the parser.
    assert vmath._warm_worker() is True


def test_readings_keep_plain_answers_unchanged():
    assert readings("42") == ["42"] and readings("x + 1") == ["x + 1"]
