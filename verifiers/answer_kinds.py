"""Answer kinds of the custom task (your own question/answer file): how a reference is graded.

- **number**: the completion's final answer (``verifiers.math.extract_answer``: the last
  ``\\boxed{}``, ``#### N``, "the answer is N", ..., else the last number) read as an exact number
  (an integer, decimal or ``a/b``, read after `verifiers.math_forms.normalize_answer` drops
  thousands separators, math delimiters and spacing) equals the reference's value.
  A leading ``x =`` and trailing unit words are allowed in the response (``8 apples``).
  In-process, no sympy: ``8``, ``8.0``, ``16/2`` and ``x = 8 cm`` all match ``8``.
- **math**: math-verify equivalence (`verifiers.math.grade`, time-bounded in a worker process):
  LaTeX such as ``\\frac{\\pi}{2}``, intervals, sets, ``x = 3``.
- **text**: the final answer (``\\boxed{}`` or a final-answer phrase such as "the answer is") is
  the reference text, compared without case, surrounding whitespace, quotes or a final full stop.
- **auto** (the default, chosen per row when the task is loaded): number when the reference
  reads as a number, else math.

A problem's reference is ``{"answer": text, "kind": "number" | "math" | "text"}`` and `grade`
dispatches on the kind, so the task keeps one `Verifier` like every other task.
"""

from __future__ import annotations

import re
from fractions import Fraction

from verifiers import math as vmath
from verifiers.math_forms import normalize_answer, to_ascii

__all__ = ["ANSWER_KINDS", "equivalent", "grade", "parse_number", "resolve_kind", "response_number", "same_text"]

ANSWER_KINDS = ("auto", "number", "math", "text")
"""The custom task's ``answer_kind`` values (see the module docstring)."""

_PLAIN_NUMBER = re.compile(r"-?(?:\d+(?:\.\d*)?|\.\d+)(?:/\d+)?")
_NAME_EQUALS = re.compile(r"^\s*[A-Za-z]\s*=\s*")  # "x = 8"
_UNIT_WORDS = re.compile(r"(?:\s*\\text\{[^{}]*\}|\s+[A-Za-z][A-Za-z./]*)+\s*$")  # "8 apples", "8 \text{ cm}"


def parse_number(text: str | None) -> Fraction | None:
    """The exact value of a plain number (``12``, ``-0.5``, ``1,000``, ``$3/4$``), None otherwise.
    No exponents (``1e9999999`` would be a huge integer), no expressions."""
    if not isinstance(text, str) or len(text) > 200:
        return None
    canonical = normalize_answer(text)
    if not _PLAIN_NUMBER.fullmatch(canonical):
        return None
    try:
        return Fraction(canonical)
    except (ValueError, ZeroDivisionError):
        return None


def response_number(answer: str | None) -> Fraction | None:
    """The value of a response's final answer: a plain number, allowing a leading ``x =`` and
    trailing unit words (``8 apples``, ``8 \\text{ cm}``); None for anything else (``8 or 9``)."""
    if not isinstance(answer, str):
        return None
    return parse_number(_UNIT_WORDS.sub("", _NAME_EQUALS.sub("", answer)))


def resolve_kind(answer: str, answer_kind: str) -> str:
    """The kind a reference is graded as: ``answer_kind`` itself, or for "auto" number when
    ``answer`` reads as a number, else math. Raises ValueError for "number" with a non-number."""
    if answer_kind not in ANSWER_KINDS:
        raise ValueError(f"answer_kind must be one of {list(ANSWER_KINDS)}; got {answer_kind!r}")
    if answer_kind == "auto":
        return "number" if parse_number(answer) is not None else "math"
    if answer_kind == "number" and parse_number(answer) is None:
        raise ValueError(f"answer {answer[:60]!r} is not a number (integer, decimal or fraction); "
                         "use answer_kind='auto' or 'math' for LaTeX answers, 'text' for words")
    return answer_kind


def _normal_text(text: str) -> str:
    return " ".join(to_ascii(text).strip().strip("\"'`").rstrip(".").split()).casefold()


def same_text(a: str, b: str) -> bool:
    """Equal text answers: no case, extra whitespace, surrounding quotes or final full stop."""
    return bool(_normal_text(a)) and _normal_text(a) == _normal_text(b)


def _text_answer(completion: str) -> str | None:
    """A text answer: the last ``\\boxed{}``, else what follows the last final-answer phrase."""
    return vmath.extract_boxed(completion) or vmath.extract_answer_phrase(completion)


def grade(completion: str, reference: dict) -> float:
    """1.0 when ``completion``'s final answer matches ``reference["answer"]`` by ``reference["kind"]``."""
    kind, answer = reference["kind"], reference["answer"]
    if kind == "number":
        value = response_number(vmath.extract_answer(completion))
        return 1.0 if value is not None and value == parse_number(answer) else 0.0
    if kind == "math":
        return vmath.grade(completion, answer)
    if kind == "text":
        found = _text_answer(completion)
        return 1.0 if found is not None and same_text(found, answer) else 0.0
    raise ValueError(f"reference kind must be one of ['number', 'math', 'text']; got {kind!r}")


def equivalent(a: str, b: str) -> bool:
    """Two extracted answers vote together: equal numbers or text (in-process), else math-verify."""
    number_a, number_b = parse_number(a), parse_number(b)
    if number_a is not None and number_b is not None:
        return number_a == number_b
    return same_text(a, b) or vmath.verify(a, b)
