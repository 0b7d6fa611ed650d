"""Math answers: extraction from a completion, equivalence of two answers, and the grade.

Extraction (`extract_answer` and its steps) lives in `verifiers.math_extract` and is re-exported
here: the last ``\\boxed{}`` or final-answer phrase, GSM8K's ``#### N``, a bare answer, else the
last answer-like item of the prose.

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
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

from verifiers.math_extract import (
    extract_answer,
    extract_answer_phrase,
    extract_boxed,
    extract_hashes,
    extract_last_item,
    extract_last_number,
    extract_math_span,
)
from verifiers.math_forms import Undecided, equal_readings, reading_pairs
from verifiers.timeout import CallTimeout, WorkerPool

__all__ = [
    "MAX_ANSWER_CHARS",
    "extract_answer",
    "extract_answer_phrase",
    "extract_boxed",
    "extract_hashes",
    "extract_last_item",
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

# ---------------------------------------------------------------- equivalence


def _warm_worker() -> bool:
    """Runs once in each new worker, outside any call's time limit: import math-verify, silence
    its no-timeout warning, and run one comparison, because the first LaTeX parse in a process
    builds the parser (about 2 s on a loaded core) -- charged to the first real call, it would
    time that call out, and the replacement worker's first call after it."""
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    import math_verify  # noqa: F401

    return _math_verify_equal("\\frac{1}{2}", "0.5")


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
    pairs = reading_pairs(gold[:limit], pred[:limit])
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
