"""Math answer extraction and equivalence: unit cases, full GSM8K and MATH-500, hostile input."""

from __future__ import annotations

import json
import multiprocessing
import re
import threading
import time
from fractions import Fraction
from pathlib import Path

import pytest

import verifiers.math as vmath
from verifiers.math import (
    extract_answer,
    extract_answer_phrase,
    extract_boxed,
    extract_hashes,
    extract_last_number,
    grade,
    verify,
    verify_many,
)
from verifiers.math_forms import normalize_answer

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _rows(relative: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / relative).read_text().splitlines() if line.strip()]


# ------------------------------------------------------------------ extraction


def test_extract_boxed_nested_and_last():
    assert extract_boxed(r"first \boxed{1} then \boxed{\frac{1}{\sqrt{2}}}.") == r"\frac{1}{\sqrt{2}}"
    assert extract_boxed(r"\fbox{7}") == "7"
    assert extract_boxed(r"so \boxed 5 done") == "5"
    assert extract_boxed(r"\boxed{unclosed {") is None
    assert extract_boxed("no box") is None


def test_extract_hashes():
    assert extract_hashes("work\n#### 1,234\n") == "1,234"
    assert extract_hashes("#### 1\nmore\n#### 2") == "2"
    assert extract_hashes("none here") is None


def test_extract_answer_phrase():
    assert extract_answer_phrase("So the answer is $\\frac{1}{2}$.") == "\\frac{1}{2}"
    assert extract_answer_phrase("The final answer is: 42") == "42"
    assert extract_answer_phrase("the answer is 3.\nthen The answer is 4.") == "4"
    assert extract_answer_phrase("nothing") is None


def test_extract_last_number():
    assert extract_last_number("I got 3 then 4.5 apples") == "4.5"
    assert extract_last_number("cost 1,000 dollars") == "1,000"
    assert extract_last_number("ratio 3/4") == "3/4"
    assert extract_last_number("-7 is it") == "-7"
    assert extract_last_number("no digits") is None


def test_extract_answer_priority():
    assert extract_answer("#### 5 but \\boxed{6}") == "6"
    assert extract_answer("x = 3\n#### 5") == "5"
    assert extract_answer("3 and the answer is 7 apples.") == "7 apples"
    assert extract_answer("12 then 13") == "13"
    assert extract_answer("no answer") is None
    assert extract_answer(None) is None


# ------------------------------------------------------------------ equivalence


@pytest.mark.parametrize(
    "gold, pred",
    [
        ("1000", "1,000"),
        ("\\frac{1}{2}", "0.5"),
        ("\\frac{1}{2}", "1/2"),
        ("\\dfrac{3}{4}", "\\frac{3}{4}"),
        ("50\\%", "0.5"),
        ("\\frac{\\sqrt{2}}{2}", "\\sqrt{2}/2"),
        ("2\\pi", "2 \\pi"),
        ("(1, 2]", "(1,2]"),
        ("\\{1, 2, 3\\}", "\\{3, 1, 2\\}"),
        ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3, \\pi/2)"),
        ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}"),
        ("3", "x = 3"),
        ("10", "10 \\text{ cm}"),
        ("18", "\\$18"),
    ],
)
def test_verify_equivalent(gold, pred):
    assert verify(gold, pred)


@pytest.mark.parametrize(
    "gold, pred",
    [("1000", "100"), ("\\frac{1}{2}", "0.25"), ("(1, 2]", "[1, 2]"), ("(1, 2)", "(2, 1)"), ("\\sqrt{2}", "2"), ("3", "")],
)
def test_verify_different(gold, pred):
    assert not verify(gold, pred)


def test_verify_bad_arguments():
    assert verify("3", None) is False
    with pytest.raises(TypeError, match="gold must be a str"):
        verify(3, "3")


def test_normalize_answer():
    assert normalize_answer("\\left( 1, 000 \\right)") == "(1,000)"  # a pair: commas in brackets separate
    assert normalize_answer("\\left( 1,\\! 000 \\right)") == "(1000)"  # MATH's ,\! is a thousands separator
    assert normalize_answer("11,\\! 111,\\! 100") == "11111100"
    assert normalize_answer("\\text{(A)}") == "(A)"
    assert normalize_answer("\\dfrac{1}{2}.") == "\\frac{1}{2}"


def test_grade():
    assert grade("so \\boxed{\\dfrac{1}{2}}", "0.5") == 1.0
    assert grade("so \\boxed{3}", "0.5") == 0.0


# ------------------------------------------------------------------ datasets


def test_gsm8k_gold_solutions_verify_and_other_rows_do_not():
    rows = _rows("gsm8k/test.jsonl")
    assert len(rows) == 1319
    references = [extract_hashes(r["answer"]).replace(",", "") for r in rows]
    predictions = [extract_answer(r["answer"]) for r in rows]
    assert all(verify_many(zip(references, predictions)))
    others = [references[(i + 1) % len(rows)] for i in range(len(rows))]
    shifted = verify_many(zip(others, predictions))
    # Neighbouring rows sometimes share the answer (15 do, e.g. both 10): those are true matches.
    false_positives = [(o, p) for o, p, ok in zip(others, predictions, shifted) if ok and o != p.replace(",", "")]
    assert len(false_positives) / len(rows) <= 0.01, false_positives
    assert sum(shifted) < 0.02 * len(rows)


def _split_top(s: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for c in s:
        depth += c in "({[" and 1 or (c in ")}]" and -1 or 0)
        if c == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += c
    return parts + [current.strip()]


def _rewrites(answer: str) -> list[str]:
    """Equivalent rewrites of a MATH answer (independent of the verifier's own normalisation)."""
    out = []
    if "\\frac" in answer:
        out.append(answer.replace("\\frac", "\\dfrac"))
    if "\\dfrac" in answer:
        out.append(answer.replace("\\dfrac", "\\frac"))
    m = re.fullmatch(r"(-?)\\d?frac\{([\w\\]+)\}\{([\w\\]+)\}", answer)
    if m:
        out.append(f"{m[1]}({m[2]})/({m[3]})")
    m = re.fullmatch(r"(-?)\\d?frac\{(\d+)\}\{(\d+)\}", answer)
    if m:
        value = Fraction(int(m[2]), int(m[3]))
        d = value.denominator
        while d % 2 == 0:
            d //= 2
        while d % 5 == 0:
            d //= 5
        if d == 1:
            out.append(m[1] + str(float(value)))
    if re.fullmatch(r"-?\d+", answer):
        out += [f"x = {answer}", f"{answer} \\text{{ units}}"]
        if abs(int(answer)) >= 1000:
            out.append(f"{int(answer):,}")
    m = re.fullmatch(r"\\\{(.*)\\\}", answer)
    if m and len(_split_top(m[1])) > 1:
        out.append("\\{" + ", ".join(reversed(_split_top(m[1]))) + "\\}")
    is_number_with_commas = re.fullmatch(r"[\d,\\! ]+", answer)
    if not is_number_with_commas and not re.match(r"^[(\[\\]", answer) and len(_split_top(answer)) > 1:
        out.append(", ".join(reversed(_split_top(answer))))  # an unordered list of solutions
    if "\\left" in answer:
        out.append(answer.replace("\\left", "").replace("\\right", ""))
    return out


def _truly_equal(a: str, b: str) -> bool:
    strip = lambda s: re.sub(r"^[a-z]\s*=\s*", "", normalize_answer(s))  # noqa: E731
    return strip(a) == strip(b)


def test_math500_boxed_answers_rewrites_and_other_rows():
    rows = _rows("math500/test.jsonl")
    assert len(rows) == 500
    answers = [r["answer"] for r in rows]
    own = [grade(f"... so the answer is $\\boxed{{{a}}}$.", a) for a in answers]
    assert all(own)
    pairs = [(a, rewrite) for a in answers for rewrite in _rewrites(a)]
    assert len(pairs) > 400
    results = verify_many(pairs)
    assert [p for p, ok in zip(pairs, results) if not ok] == []
    shifted = [(answers[i], answers[(i + 1) % 500]) for i in range(500)]
    results = verify_many(shifted)
    assert [p for p, ok in zip(shifted, results) if ok and not _truly_equal(*p)] == []


# ------------------------------------------------------------------ hostile input

TOWER = "9^{9^{9^{9}}}"
HUGE = "1" * 1_000_000
NESTED = "{" * 10_000 + "1" + "}" * 10_000


def _timed(fn, *args):
    start = time.monotonic()
    fn(*args)
    return time.monotonic() - start


def test_extract_hostile_input_fast():
    for text in (HUGE, NESTED, "\\boxed{" * 10_000, "answer is " * 100_000):
        assert _timed(extract_answer, text) < 2.0


def test_verify_hostile_input_from_thread():
    verify("x^2", "x**2")  # start a worker outside the timed part
    results: dict[str, tuple[bool, float]] = {}

    def run(name, pred):
        start = time.monotonic()
        results[name] = (verify("3", pred), time.monotonic() - start)

    for name, pred in (("tower", TOWER), ("huge", HUGE), ("nested", NESTED)):
        thread = threading.Thread(target=run, args=(name, pred))
        thread.start()
        thread.join(10)
    assert set(results) == {"tower", "huge", "nested"}
    for name, (ok, seconds) in results.items():
        assert ok is False and seconds < 5.0, (name, seconds)


def test_verify_nested_braces_reaching_sympy_is_bounded(monkeypatch):
    monkeypatch.setattr(vmath, "MAX_ANSWER_CHARS", 10**7)  # let it through to the worker
    assert _timed(verify, "3", NESTED) < 5.0
    assert verify("\\frac{1}{2}", "0.5")  # the pool still works afterwards


def test_verify_hostile_input_from_daemonic_worker_process():
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:  # Pool workers are daemonic: they may not use multiprocessing children
        assert pool.apply(verify, ("x^2", "x*x"))  # warm: start the math worker
        for pred in (TOWER, HUGE, NESTED):
            start = time.monotonic()
            assert pool.apply(verify, ("3", pred)) is False
            assert time.monotonic() - start < 5.0
