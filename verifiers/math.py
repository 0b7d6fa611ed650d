"""Math answers: extraction from a completion, and equivalence of two answers.

Extraction is a chain of small, separately tested functions (last ``\\boxed{}``, GSM8K's
``#### N``, "The answer is ...", last number). Equivalence (`verify`) first tries cheap exact
checks in-process (normalised strings, plain numbers as exact fractions) and otherwise hands the
two strings to Hugging Face's math-verify (sympy) in a worker process bounded by a wall-clock
limit (`verifiers.timeout.WorkerPool`), because sympy can hang on hostile input and math-verify's
own signal-based timeout fails outside the main thread. Model output is never ``eval``-ed here.
`grade(completion, reference)` puts the two together: 1.0 when the completion's extracted answer
verifies against the reference answer (the math tasks' verifier rewards with it).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from functools import lru_cache

from verifiers.timeout import CallTimeout, WorkerPool

__all__ = [
    "MAX_ANSWER_CHARS",
    "extract_answer",
    "extract_answer_phrase",
    "extract_boxed",
    "extract_hashes",
    "extract_last_number",
    "grade",
    "normalize_answer",
    "verify",
    "verify_many",
]

logger = logging.getLogger(__name__)

MAX_ANSWER_CHARS = 1000
"""Answers longer than this are compared as normalised strings only (never sent to sympy)."""

DEFAULT_TIMEOUT_S = 3.0
"""Wall-clock seconds one sympy comparison may take before it counts as wrong."""

_POOL = WorkerPool(
    size=int(os.environ.get("VERIFIERS_MATH_WORKERS", min(2, os.cpu_count() or 1))),
    memory_mb=2048,
    warmup="verifiers.math._warm_worker",
)

# ---------------------------------------------------------------- extraction


def _braced(text: str, start: int) -> str | None:
    """Content of the brace group opening at ``text[start] == '{'``; None if unbalanced."""
    depth = 0
    for i in range(start, len(text)):
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i]
    return None


def extract_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``), nested braces allowed.

    Also accepts the brace-less ``\\boxed 5``. Returns None when there is none or it is unclosed.
    """
    pos = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if pos < 0:
        return None
    i = pos + (6 if text.startswith("\\boxed", pos) else 5)
    while i < len(text) and text[i] == " ":
        i += 1
    if i < len(text) and text[i] == "{":
        inner = _braced(text, i)
        return inner.strip() if inner is not None else None
    match = re.match(r"[^\s$]+", text[i:])
    if match and i > pos + 5 and text[i - 1] == " ":
        return match.group(0).strip()
    return None


def extract_hashes(text: str) -> str | None:
    """The text after the last GSM8K-style ``#### `` marker, up to the end of its line."""
    pos = text.rfind("####")
    if pos < 0:
        return None
    line = text[pos + 4 :].split("\n", 1)[0].strip()
    return line or None


_ANSWER_IS = re.compile(r"answer\s+is\s*:?\s*", re.IGNORECASE)


def extract_answer_phrase(text: str) -> str | None:
    """What follows the last "the answer is" (optionally "final answer is:"), up to line end,
    without a trailing full stop or surrounding ``$``."""
    last = None
    for last in _ANSWER_IS.finditer(text):
        pass
    if last is None:
        return None
    rest = text[last.end() :].split("\n", 1)[0].strip()
    rest = re.sub(r"\.\s*$", "", rest).strip().strip("$").strip()
    return rest or None


_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?|-?\.\d+")


def extract_last_number(text: str) -> str | None:
    """The last number in the text (integer, decimal, ``a/b``; ``1,000`` keeps its separators)."""
    last = None
    for last in _NUMBER.finditer(text):
        pass
    return last.group(0) if last else None


def extract_answer(text: str) -> str | None:
    """The final answer of a completion: last ``\\boxed{}``, else ``#### N``, else "the answer is
    X", else the last number. None when nothing answer-like is present or ``text`` is not str."""
    if not isinstance(text, str):
        return None
    for extractor in (extract_boxed, extract_hashes, extract_answer_phrase, extract_last_number):
        answer = extractor(text)
        if answer:
            return answer
    return None


# ---------------------------------------------------------------- equivalence

_STRIP_TOKENS = ("\\left", "\\right", "\\!", "\\,", "\\;", "\\:", "\\ ", "$", "^\\circ", "^{\\circ}")


def _unwrap_command(s: str, command: str) -> str:
    """Replace every ``\\command{X}`` by ``X`` (nested braces respected)."""
    out = []
    i = 0
    while True:
        j = s.find(command + "{", i)
        if j < 0:
            out.append(s[i:])
            return "".join(out)
        inner = _braced(s, j + len(command))
        if inner is None:
            out.append(s[i:])
            return "".join(out)
        out.append(s[i:j])
        out.append(inner)
        i = j + len(command) + len(inner) + 2


def normalize_answer(answer: str) -> str:
    """A canonical string for cheap exact comparison: no spacing commands, ``$``, ``\\left``/
    ``\\right``, ``\\text{}`` wrappers or degree signs; ``\\dfrac``/``\\tfrac`` become ``\\frac``;
    whitespace and a trailing full stop removed; digit-group commas (``1,000``) dropped."""
    s = answer.strip()
    for cmd in ("\\text", "\\textbf", "\\mathrm", "\\mbox", "\\boxed"):
        if cmd + "{" in s:
            s = _unwrap_command(s, cmd)
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    for token in _STRIP_TOKENS:
        s = s.replace(token, "")
    s = re.sub(r"\s+", "", s).rstrip(".")
    if re.fullmatch(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?", s):
        s = s.replace(",", "")
    return s


_PLAIN_NUMBER = re.compile(r"(-?)(\d+(?:\.\d+)?|\.\d+)(?:/(\d+))?")
_LATEX_FRAC = re.compile(r"(-?)\\frac\{(\d+)\}\{(\d+)\}")


def _as_number(s: str) -> Fraction | None:
    """The exact value of a normalised plain number (``12``, ``-0.5``, ``3/4``, ``\\frac{3}{4}``)."""
    m = _PLAIN_NUMBER.fullmatch(s)
    if m and len(s) <= 100:
        sign, num, den = m.groups()
        value = Fraction(num) / (Fraction(den) if den else 1)
        if den and Fraction(den) == 0:
            return None
        return -value if sign else value
    m = _LATEX_FRAC.fullmatch(s)
    if m and len(s) <= 100 and int(m.group(3)) != 0:
        value = Fraction(int(m.group(2)), int(m.group(3)))
        return -value if m.group(1) else value
    return None


def _warm_worker() -> bool:
    """Runs once in each new worker: import math-verify and silence its no-timeout warning."""
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    import math_verify  # noqa: F401

    return True


@lru_cache(maxsize=4096)
def _parse(answer: str):
    from math_verify import parse

    return parse("\\boxed{" + answer + "}", parsing_timeout=None)


def _verify_in_worker(gold: str, pred: str) -> bool:
    """math-verify on two answers; runs inside a worker, signals off (the pool bounds time)."""
    from math_verify import verify as mv_verify

    gold_parsed, pred_parsed = _parse(gold), _parse(pred)
    if not gold_parsed or not pred_parsed:
        return False
    return bool(mv_verify(gold_parsed, pred_parsed, timeout_seconds=None))


def verify(gold: str, pred: str | None, timeout: float = DEFAULT_TIMEOUT_S) -> bool:
    """True when the answer ``pred`` is mathematically equal to the reference answer ``gold``.

    Handles thousands separators, decimals vs fractions, percentages, LaTeX fractions/roots/pi,
    intervals, sets, tuples, matrices, ``x = 3`` vs ``3`` and unit text (via math-verify).
    Returns within about ``timeout`` seconds on any input, from any thread or process: the sympy
    work runs in a worker process that is killed when it overruns (the answer then counts as
    wrong). ``pred`` None (nothing extracted) is False; ``gold`` must be a str.
    """
    if not isinstance(gold, str):
        raise TypeError(f"verify: gold must be a str (the reference answer), got {type(gold).__name__}")
    if not isinstance(pred, str):
        return False
    gold_norm, pred_norm = normalize_answer(gold[: MAX_ANSWER_CHARS * 4]), normalize_answer(pred[: MAX_ANSWER_CHARS * 4])
    if gold_norm == pred_norm and len(pred) <= MAX_ANSWER_CHARS * 4:
        return bool(gold_norm)
    if not gold_norm or not pred_norm or len(gold) > MAX_ANSWER_CHARS or len(pred) > MAX_ANSWER_CHARS:
        return False
    gold_num, pred_num = _as_number(gold_norm), _as_number(pred_norm)
    if gold_num is not None and pred_num is not None:
        if gold_num == pred_num:
            return True
        if gold_num.denominator == 1 and pred_num.denominator == 1:
            return False  # two different integers: no rounding rule can make them equal
    try:
        return bool(_POOL.call("verifiers.math._verify_in_worker", (gold, pred), timeout=timeout))
    except CallTimeout:
        logger.warning("verify timed out after %.1f s (pred %r...): counted as wrong", timeout, pred[:60])
        return False
    except RuntimeError as exc:
        logger.warning("verify failed in worker (%s): counted as wrong", exc)
        return False


def verify_many(pairs: Iterable[tuple[str, str | None]], timeout: float = DEFAULT_TIMEOUT_S) -> list[bool]:
    """`verify` over (gold, pred) pairs, spread over the worker pool; results in input order."""
    pairs = list(pairs)
    with ThreadPoolExecutor(max_workers=_POOL.size) as executor:
        return list(executor.map(lambda gp: verify(gp[0], gp[1], timeout), pairs))


def grade(completion: str, reference: str) -> float:
    """1.0 when the answer extracted from ``completion`` verifies against ``reference``, else 0.0."""
    return 1.0 if verify(reference, extract_answer(completion)) else 0.0
