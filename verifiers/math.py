"""Math answers: extraction from a completion, equivalence of two answers, and the grade.

Extraction is a chain of small, separately tested functions: the last ``\\boxed{}``, GSM8K's
``#### N``, a final-answer phrase in English, Chinese, French, German or Spanish ("the answer
is", 答案是, "la réponse est", "Antwort:", "la respuesta es"), a math span that ends the text
(``Answer $ 9 $``, ``\\[ 9 \\]``), else the last number. Full-width digits and colons read as
ASCII.

Equivalence (`verify`) reads both answers by the rules of `verifiers.math_forms` (decimal comma
vs thousands separator, delimiters, trailing backslashes, ordered tuples vs sets vs solution
lists) and first tries cheap exact checks in-process (canonical strings, exact numbers,
collections of those). Whatever needs sympy goes to Hugging Face's math-verify in a worker
process bounded by a wall-clock limit (`verifiers.timeout.WorkerPool`), because sympy can hang
on hostile input and math-verify's own signal-based timeout fails outside the main thread.
Model output is never ``eval``-ed here.

`grade(completion, reference)` puts the two together: 1.0 when the completion's extracted answer
verifies against the reference answer (the math tasks' verifier rewards with it).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

from verifiers.math_forms import Undecided, braced, equal_readings, readings, to_ascii
from verifiers.timeout import CallTimeout, WorkerPool

__all__ = [
    "MAX_ANSWER_CHARS",
    "extract_answer",
    "extract_answer_phrase",
    "extract_boxed",
    "extract_hashes",
    "extract_last_number",
    "extract_math_span",
    "grade",
    "verify",
    "verify_many",
]

logger = logging.getLogger(__name__)

MAX_ANSWER_CHARS = 1000
"""Answers longer than this are compared as canonical strings only (never sent to sympy)."""

DEFAULT_TIMEOUT_S = 3.0
"""Wall-clock seconds one comparison may spend in sympy before it counts as wrong."""

_POOL = WorkerPool(
    size=int(os.environ.get("VERIFIERS_MATH_WORKERS", min(2, os.cpu_count() or 1))),
    memory_mb=2048,
    warmup="verifiers.math._warm_worker",
)

# ---------------------------------------------------------------- extraction


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
        inner = braced(text, i)
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


# Final-answer phrases; a colon is ASCII here because `extract_answer` maps full-width forms first.
_ANSWER_PHRASE = re.compile(
    r"answer\s+is\s*:?|answer\s*:"  # English (Minerva: "Final Answer: The final answer is X.")
    r"|答案\s*(?:是|为|:)"  # Chinese: 答案是 9, 最终答案：9 (Qwen2.5-Math's parser reads 答案是)
    r"|r[ée]ponse(?:\s+finale)?\s*(?:est\s*:?|:)"  # French: la réponse est 9, Réponse : 9
    r"|antwort\s*(?:(?:ist|lautet)\s*:?|:)"  # German: Die Antwort ist 9, Antwort: 9
    r"|respuesta(?:\s+final)?\s*(?:es\s*:?|:)",  # Spanish: la respuesta es 9, Respuesta: 9
    re.IGNORECASE,
)
_SPAN_CLOSERS = (("$$", "$$", True), ("\\[", "\\]", True), ("\\(", "\\)", False), ("$", "$", False))


def _math_span_at(text: str, end: bool) -> str | None:
    """Content of the math span that starts (``end`` False) or ends (``end`` True) the text.

    ``$...$`` and ``\\(...\\)`` may not cross a line (inline math); ``$$...$$`` and ``\\[...\\]`` may.
    """
    for opening, closing, multiline in _SPAN_CLOSERS:
        if end and text.endswith(closing) and len(text) > len(closing):
            start = text.rfind(opening, 0, len(text) - len(closing))
            content = text[start + len(opening) : len(text) - len(closing)] if start >= 0 else None
        elif not end and text.startswith(opening):
            stop = text.find(closing, len(opening))
            content = text[len(opening) : stop] if stop >= 0 else None
        else:
            continue
        if content is None or (not multiline and "\n" in content):
            return None
        return content.strip() or None
    return None


def extract_math_span(text: str) -> str | None:
    """The content of a math span that ends the text (after trailing whitespace and ``. , ; !``):
    ``Answer $ 9 $``, ``$$ 9 $$``, ``\\( 9 \\)``, ``\\[ 9 \\]``. None when the text ends otherwise,
    or when the span holds neither a digit nor a LaTeX command ("... is the value of $x$." names
    a variable, it does not answer)."""
    content = _math_span_at(text.rstrip().rstrip(".,;!。").rstrip(), end=True)
    return content if content and re.search(r"[0-9\\]", content) else None


def extract_answer_phrase(text: str) -> str | None:
    """What follows the last final-answer phrase (see the module docstring), up to the line end.

    A math span right after the phrase is the answer (Minerva's "The final answer is $X$. I hope
    it is correct."); otherwise the text stops at a sentence end ("。" or a full stop before a space).
    """
    last = None
    for last in _ANSWER_PHRASE.finditer(text):
        pass
    if last is None:
        return None
    rest = text[last.end() :].split("\n", 1)[0].strip()
    if rest.startswith(("$", "\\(", "\\[")):
        span = _math_span_at(rest, end=False)
        if span is not None:
            return span
    rest = re.split(r"。|\.\s", rest, maxsplit=1)[0]
    rest = re.sub(r"\.\s*$", "", rest).strip().strip("$").strip()
    return rest or None


_NUMBER = re.compile(r"-?\d+(?:,\d+)*(?:\.\d+)?(?:/\d+)?|-?\.\d+")


def extract_last_number(text: str) -> str | None:
    """The last number in the text (integer, decimal, ``a/b``); commas written between digits
    stay (``1,000``, ``1000,99``) for `verify` to read."""
    last = None
    for last in _NUMBER.finditer(text):
        pass
    return last.group(0) if last else None


def extract_answer(text: str) -> str | None:
    """The final answer of a completion: last ``\\boxed{}``, else ``#### N``, else a final-answer
    phrase, else a math span ending the text, else the last number. None when nothing
    answer-like is present or ``text`` is not str. Full-width forms are read as ASCII."""
    if not isinstance(text, str):
        return None
    text = to_ascii(text)
    for extractor in (extract_boxed, extract_hashes, extract_answer_phrase, extract_math_span, extract_last_number):
        answer = extractor(text)
        if answer:
            return answer
    return None


# ---------------------------------------------------------------- equivalence


def _warm_worker() -> bool:
    """Runs once in each new worker: import math-verify and silence its no-timeout warning."""
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    import math_verify  # noqa: F401

    return True


@lru_cache(maxsize=4096)
def _parse(answer: str):
    from math_verify import parse

    return parse("\\boxed{" + answer + "}", parsing_timeout=None)


def _math_verify_equal(gold: str, pred: str) -> bool:
    """math-verify on two readings; only inside a worker, signals off (the pool bounds time)."""
    from math_verify import verify as mv_verify

    gold_parsed, pred_parsed = _parse(gold), _parse(pred)
    if not gold_parsed or not pred_parsed:
        return False
    return bool(mv_verify(gold_parsed, pred_parsed, timeout_seconds=None))


def _verify_in_worker(pairs: list[tuple[str, str]]) -> bool:
    """Whether any (gold, pred) reading pair is equal, math-verify deciding what is left."""
    return any(equal_readings(gold, pred, _math_verify_equal) for gold, pred in pairs)


def _needs_sympy(gold: str, pred: str) -> bool:
    raise Undecided


def verify(gold: str, pred: str | None, timeout: float = DEFAULT_TIMEOUT_S) -> bool:
    """True when the answer ``pred`` is mathematically equal to the reference answer ``gold``.

    Handles thousands separators and decimal commas, decimals vs fractions, percentages, LaTeX
    fractions/roots/pi, math delimiters, trailing backslashes, intervals, ordered tuples, sets and
    solution lists (see `verifiers.math_forms` for the rules), matrices, ``x = 3`` vs ``3`` and
    unit text (via math-verify). Symmetric in its two arguments. Returns within about ``timeout``
    seconds on any input, from any thread or process: the sympy work runs in a worker process
    that is killed when it overruns (the answer then counts as wrong). ``pred`` None (nothing
    extracted) is False; ``gold`` must be a str.
    """
    if not isinstance(gold, str):
        raise TypeError(f"verify: gold must be a str (the reference answer), got {type(gold).__name__}; "
                        "pass the reference answer text, e.g. str(reference)")
    if not isinstance(pred, str):
        return False
    limit = MAX_ANSWER_CHARS * 4
    pairs = [(g, p) for g in readings(gold[:limit]) for p in readings(pred[:limit])]
    try:
        if any(equal_readings(g, p, _needs_sympy) for g, p in pairs):
            return len(pred) <= limit
    except Undecided:
        pass
    else:
        return False
    if len(gold) > MAX_ANSWER_CHARS or len(pred) > MAX_ANSWER_CHARS:
        return False
    try:
        return bool(_POOL.call("verifiers.math._verify_in_worker", (pairs,), timeout=timeout))
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
