"""How a math answer string is read before two answers are compared (for `verifiers.math.verify`).

Pure string functions, no sympy, nothing evaluated: they run in the caller's process for the
cheap checks and again inside the bounded worker, where `equal_readings` gets math-verify as its
comparison of last resort. The rules (tests/test_verifiers_math_equivalence.py cites the grader
each follows):

- **Full-width forms** (U+FF01..U+FF5E: ``９``, ``：``, ``（``) read as their ASCII characters and
  the ideographic space as a space, as Chinese and Japanese text writes them.
- **Delimiters**: math delimiters around the whole answer are dropped (``$ 9 $``, ``$$ 9 $$``,
  ``\\( 9 \\)``, ``\\[ 9 \\]``), then trailing backslashes (``9\\``, ``\\frac{1}{2}\\``: a stray
  ``\\`` or a LaTeX line break ``\\\\`` ends no answer) and trailing ``. , ;``.
- **Commas between digits.** A comma written with no space, outside any bracket, followed by
  groups of exactly three digits (the first group 1-3 digits without a leading zero) is a
  thousands separator: ``1,000`` = 1000, ``12,345,678``, ``1,000.5``. So ``1,000`` is never read
  as 1.0 (a decimal comma) nor as the list 1, 0: GSM8K and MATH write thousands this way and
  never a decimal comma, and math-verify reads it the same. MATH's ``,\\!`` and LaTeX's ``{,}``
  are number-internal wherever they stand (``10,\\!080`` = 10080, ``1{,}5`` = 1.5). An answer
  that is one number with one other comma and no space (``1000,99``, ``1,22``, ``0,111``) is
  ambiguous: a decimal comma (1000.99, as math-verify's tests read it) or a two-element list (as
  MATH writes the roots ``-2,1``). `readings` keeps both, and two answers are equal when some
  reading of each agrees. Every other comma (after a space, inside brackets, ``1,2,3``)
  separates elements.
- **Written forms.** ``and``, ``or`` and ``\\text{ and }`` between items are commas
  (``7, -2 \\text{ and } -5``); a mixed number is one fraction (``4 4/9``, ``2\\frac58``; an
  improper part such as ``11 7/6`` is not); a doubled backslash before a command is one
  (``\\\\frac``, as JSON-escaped text writes it); ``x_{1}`` reads as ``x_1``. Extra readings: a
  number without the unit words after it (``10 weeks``), a definition's value (``f(x) = 2x + 3``
  also reads ``2x + 3``; two definitions compare by value only), groups of assignments as
  points (``p=5, q=2; p=7, q=2`` also reads ``(5, 2), (7, 2)``).
- **Collections.** ``(a, b)`` with two or more elements is an ordered tuple (a point; an open
  interval compares the same way, endpoint by endpoint); ``\\{a, b\\}`` (or ``{a, b}``) is a
  set; a bare ``a, b`` is a list of solutions, unordered. Tuple vs tuple: same length and equal element by
  element in order, so ``(1, 2)`` != ``(2, 1)``. Set or list vs set or list: a one-to-one
  matching of equal elements (repeated elements count). Tuple vs set or list: element by
  element in the written order -- a tuple is never reordered to match. This agrees with
  math-verify's own tests (``(1,3)`` ~ ``{1,3}``, ``(3,1)`` !~ ``{1,3}``) and, unlike
  math-verify, is symmetric: math-verify sorts a tuple compared against a gold set, so it accepts
  the point ``(2, 1)`` for the gold list ``1, 2``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from fractions import Fraction

__all__ = [
    "Undecided",
    "braced",
    "clean",
    "definition_value",
    "equal_readings",
    "normalize_answer",
    "reading_pairs",
    "readings",
    "to_ascii",
]

MAX_ELEMENTS = 32
"""Collections with more elements are left to math-verify whole (the matching is quadratic)."""
MAX_DEPTH = 3
"""Nesting of collections compared element by element (deeper ones go to math-verify whole)."""

_FULL_WIDTH = {code: code - 0xFEE0 for code in range(0xFF01, 0xFF5F)} | {0x3000: ord(" ")}
_DELIMITERS = (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$"))
_EXPLICIT_SEPARATOR = re.compile(r"(?<=\d)(?:,\s*\\!\s*|\{,\})(?=\d)")
_MARK = "\x1f"  # stands for an explicit number separator while numbers are rewritten
_MARKED_NUMBER = re.compile(rf"(?<!\d)\d+(?:{_MARK}\d+)+")  # from a digit run's start: linear
_THOUSANDS = re.compile(r"(?<![\w.,])[1-9]\d{0,2}(?:,\d{3})+(?![\w,])")
_DECIMAL_COMMA = re.compile(r"-?\d+,\d+")
_TRAILING_PUNCTUATION = re.compile(r"(?<!\.)[.,;]\s*$")  # one mark, never part of an ellipsis
_STRIP_TOKENS = ("\\left", "\\right", "\\!", "\\,", "\\;", "\\:", "\\ ", "$", "^\\circ", "^{\\circ}")
_LEFT_RIGHT = re.compile(r"\\(?:left|right)(?![a-zA-Z])")
_PLAIN_NUMBER = re.compile(r"(-?)(\d+(?:\.\d+)?|\.\d+)(?:/(\d+))?")
_LATEX_FRAC = re.compile(r"(-?)\\frac\{(\d+)\}\{(\d+)\}")
_DOUBLED_BACKSLASH = re.compile(r"(?<!\\)\\\\(?=[A-Za-z])")  # "\\\\frac" as JSON-escaped text writes "\\frac"
_CONNECTOR = re.compile(r"\s*,?\s*(?:\\text\{\s*(?:and|or)\s*\}|(?<![A-Za-z\\])(?:and|or)(?![A-Za-z]))\s*")
_QUAD = re.compile(r"\\q?quad(?![A-Za-z])")
_MIXED_PLAIN = re.compile(r"(-?)(\d+)\s+(\d+)/(\d+)")
_MIXED_LATEX = re.compile(r"(-?)(\d+)\s*\\[dt]?frac\s*(?:\{(\d+)\}|(\d))\s*(?:\{(\d+)\}|(\d))")
_DEFINITION = re.compile(r"\s*[A-Za-z](?:_\{?\w+\}?)?(?:\([^()=]*\))?\s*=([^=<>]+)")
_UNIT_WORDS = re.compile(r"(-?\d[\d.]*)\s+[A-Za-z]{2,}(?:\s+[A-Za-z]+)*(?:\^\{?\d\}?)?")
_SINGLE_INDEX = re.compile(r"([_^])\{(\w)\}")


class Undecided(Exception):
    """Raised by a comparison that needs sympy where none may run (the caller's process)."""


def to_ascii(text: str) -> str:
    """``text`` with full-width forms and the ideographic space replaced by ASCII."""
    return text.translate(_FULL_WIDTH)


def clean(answer: str) -> str:
    """The answer without surrounding math delimiters, trailing backslashes or trailing ``. , ;``."""
    s = to_ascii(answer).strip()
    while True:
        before = s
        for opening, closing in _DELIMITERS:
            if len(s) >= len(opening) + len(closing) and s.startswith(opening) and s.endswith(closing):
                s = s[len(opening) : -len(closing)].strip()
        s = _TRAILING_PUNCTUATION.sub("", s.rstrip("\\").rstrip())
        if s == before:
            return s


def _depths(s: str) -> list[int]:
    """Bracket depth before each character (any of ``( [ {`` opens, any of ``) ] }`` closes)."""
    depths, depth = [], 0
    for c in s:
        depths.append(depth)
        depth += (c in "([{") - (c in ")]}")
    return depths


def _join_marked(match: re.Match) -> str:
    groups = match.group(0).split(_MARK)
    if all(len(g) == 3 for g in groups[1:]):
        return "".join(groups)  # thousands: 10,\!080
    return ".".join(groups) if len(groups) == 2 else "".join(groups)  # a decimal comma: 1{,}5


def _rewrite_separators(s: str) -> str:
    """Explicit separators (``,\\!``, ``{,}``) and top-level thousands commas made plain digits."""
    s = _MARKED_NUMBER.sub(_join_marked, _EXPLICIT_SEPARATOR.sub(_MARK, s))
    depths = _depths(s)
    out, last = [], 0
    for match in _THOUSANDS.finditer(s):
        if depths[match.start()] == 0:
            out += [s[last : match.start()], match.group(0).replace(",", "")]
            last = match.end()
    return "".join(out) + s[last:]


def _mixed_number(s: str) -> str:
    """A whole answer that is a mixed number (``4 4/9``, ``-2\\frac58``, ``1\\frac{1}{2}``)
    written as one fraction; anything else (an improper part ``11 7/6`` too) unchanged."""
    m = _MIXED_PLAIN.fullmatch(s) or _MIXED_LATEX.fullmatch(s)
    if m is None:
        return s
    sign, whole, *parts = m.groups()
    numerator, denominator = (int(p) for p in parts if p is not None)
    if not 0 <= numerator < denominator:
        return s
    return f"{sign}\\frac{{{int(whole) * denominator + numerator}}}{{{denominator}}}"


def _prepared(answer: str) -> str:
    """The answer cleaned, connectors made commas, separators rewritten, a mixed number joined."""
    s = _DOUBLED_BACKSLASH.sub(r"\\", clean(answer))
    s = _QUAD.sub(" ", _CONNECTOR.sub(", ", s)).strip()
    return _mixed_number(_rewrite_separators(s))


def readings(answer: str) -> list[str]:
    """The ways ``answer`` can be read (see the module rules), each cleaned, with thousands
    separators removed and list connectors made commas: two for a lone decimal-or-list comma
    (``1,22`` -> ``["1.22", "1,22"]``); a number without the unit words after it (``10 weeks``
    also reads ``10``); assignments as points (``p=5, q=2; p=7, q=2`` also reads
    ``(5, 2), (7, 2)``)."""
    return _readings_of(_prepared(answer))


def _assignments_as_points(s: str) -> str | None:
    """``p=5, q=2; p=7, q=2`` as ``(5, 2), (7, 2)``: groups of assignments (groups split at
    top-level ``;``) read as the points of their values. None when any part is no assignment."""
    if "=" not in s or len(s) > 2000:
        return None
    points = []
    for group in _split_top(s, ";"):
        values = [_definition_of(part) for part in _split_top(group)]
        if not all(values):
            return None
        points.append(values[0] if len(values) == 1 else "(" + ", ".join(values) + ")")
    return ", ".join(points) if len(points) > 1 or points[0].startswith("(") else None


def _readings_of(s: str) -> list[str]:
    found = [s.replace(",", "."), s] if _DECIMAL_COMMA.fullmatch(s) else [s]
    for extra in (_UNIT_WORDS.fullmatch(s), _assignments_as_points(s)):
        value = extra.group(1) if isinstance(extra, re.Match) else extra
        if value and value not in found:
            found.append(value)
    return found


def _definition_of(s: str) -> str | None:
    m = _DEFINITION.fullmatch(s)
    return m.group(1).strip() if m else None


def definition_value(answer: str) -> str | None:
    """The right side of a definition ``name = value`` or ``f(x) = value`` (one ``=``), else None."""
    return _definition_of(_prepared(answer))


def reading_pairs(gold: str, pred: str) -> list[tuple[str, str]]:
    """The (gold, pred) reading pairs to compare: every reading of one against every reading of
    the other. A definition's value is one more reading (``f(x) = 2x + 3`` vs ``2x + 3``); when
    both answers are definitions only their values are compared (``f(x) = 2x + 3`` vs
    ``y = 2x + 3``), which also keeps sympy from comparing two whole equations."""
    g, p = _prepared(gold), _prepared(pred)
    g_value, p_value = _definition_of(g), _definition_of(p)
    if g_value and p_value:
        return [(a, b) for a in readings(g_value) for b in readings(p_value)]
    g_all = _readings_of(g) + ([g_value] if g_value else [])
    p_all = _readings_of(p) + ([p_value] if p_value else [])
    return [(a, b) for a in g_all for b in p_all]


def _unwrap_command(s: str, command: str) -> str:
    """Replace every ``\\command{X}`` by ``X`` (nested braces respected)."""
    out, i = [], 0
    while True:
        j = s.find(command + "{", i)
        inner = braced(s, j + len(command)) if j >= 0 else None
        if inner is None:
            return "".join(out) + s[i:]
        out += [s[i:j], inner]
        i = j + len(command) + len(inner) + 2


def braced(text: str, start: int) -> str | None:
    """Content of the brace group opening at ``text[start] == '{'``; None if unbalanced."""
    depth = 0
    for i in range(start, len(text)):
        depth += (text[i] == "{") - (text[i] == "}")
        if depth == 0:
            return text[start + 1 : i]
    return None


def _canonical(reading: str) -> str:
    """A reading as a string for exact comparison (no spacing, wrappers, ``$``, degree signs)."""
    s = reading
    for command in ("\\text", "\\textbf", "\\mathrm", "\\mbox", "\\boxed"):
        if command + "{" in s:
            s = _unwrap_command(s, command)
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = _SINGLE_INDEX.sub(r"\1\2", s)  # x_{1} as x_1, 4210_{7} as 4210_7
    for token in _STRIP_TOKENS:
        s = s.replace(token, "")
    return _TRAILING_PUNCTUATION.sub("", re.sub(r"\s+", "", s))


def normalize_answer(answer: str) -> str:
    """A canonical string of ``answer``'s first reading (see the module rules): no delimiters,
    spacing commands, ``\\left``/``\\right``, ``\\text{}`` wrappers, ``$`` or degree signs;
    ``\\dfrac``/``\\tfrac`` as ``\\frac``; thousands separators dropped; no whitespace."""
    return _canonical(readings(answer)[0])


def _as_number(canonical: str) -> Fraction | None:
    """The exact value of a canonical plain number (``12``, ``-0.5``, ``3/4``, ``\\frac{3}{4}``)."""
    if len(canonical) > 100:
        return None
    m = _PLAIN_NUMBER.fullmatch(canonical) or _LATEX_FRAC.fullmatch(canonical)
    if m is None:
        return None
    sign, numerator, denominator = m.groups()
    if denominator is not None and int(denominator) == 0:
        return None
    value = Fraction(numerator) / Fraction(denominator or 1)
    return -value if sign else value


def _split_top(s: str, separator: str = ",") -> list[str]:
    """``s`` split at the ``separator`` outside every bracket, each part stripped."""
    parts, start = [], 0
    for i, depth in enumerate(_depths(s)):
        if s[i] == separator and depth == 0:
            parts.append(s[start:i].strip())
            start = i + 1
    return parts + [s[start:].strip()]


def _closes_at_end(s: str) -> bool:
    """Whether the bracket opening ``s`` is the one its last character closes."""
    depths = _depths(s)
    return all(d > 0 for d in depths[1:])


def _collection(reading: str) -> tuple[str, list[str]] | None:
    """("tuple" | "set" | "list", elements) when the reading is a collection, else None."""
    s = _LEFT_RIGHT.sub("", reading).strip()
    if s.startswith("\\{") and s.endswith("\\}") and _closes_at_end(s[1:]):
        inner = s[2:-2].strip()
        return "set", (_split_top(inner) if inner else [])
    if s.startswith("{") and s.endswith("}") and _closes_at_end(s) and len(_split_top(s[1:-1])) >= 2:
        return "set", _split_top(s[1:-1])  # {1, 2}: a set written without escaped braces
    if s.startswith("(") and s.endswith(")") and _closes_at_end(s):
        parts = _split_top(s[1:-1])
        return ("tuple", parts) if len(parts) >= 2 else None
    parts = _split_top(s)
    return ("list", parts) if len(parts) >= 2 else None


def _one_to_one(gold: list[str], pred: list[str], equal: Callable[[str, str], bool]) -> bool:
    """Whether every gold element pairs with its own equal pred element (bipartite matching)."""
    if len(gold) != len(pred):
        return False
    cache: dict[tuple[int, int], bool] = {}
    owner = [-1] * len(pred)

    def same(i: int, j: int) -> bool:
        if (i, j) not in cache:
            cache[i, j] = equal(gold[i], pred[j])
        return cache[i, j]

    def place(i: int, tried: set[int]) -> bool:
        for j in range(len(pred)):
            if j not in tried and same(i, j):
                tried.add(j)
                if owner[j] < 0 or place(owner[j], tried):
                    owner[j] = i
                    return True
        return False

    return all(place(i, set()) for i in range(len(gold)))


def equal_readings(gold: str, pred: str, symbolic: Callable[[str, str], bool], depth: int = 0) -> bool:
    """Whether two readings are the same answer.

    Decided here when the canonical strings match, both are plain numbers, or both are
    collections (element by element, by the module rules); otherwise ``symbolic(gold, pred)``
    decides (math-verify in the worker; raising `Undecided` in the caller's process).
    """
    g, p = _canonical(gold), _canonical(pred)
    if g == p:
        return bool(g)
    if not g or not p:
        return False
    g_number, p_number = _as_number(g), _as_number(p)
    if g_number is not None and p_number is not None:
        if g_number == p_number:
            return True
        if g_number.denominator == 1 and p_number.denominator == 1:
            return False  # two different integers: no rounding rule can make them equal
    g_parts, p_parts = _collection(gold), _collection(pred)
    if g_parts and p_parts and depth < MAX_DEPTH and max(len(g_parts[1]), len(p_parts[1])) <= MAX_ELEMENTS:
        (g_kind, g_items), (p_kind, p_items) = g_parts, p_parts

        def element(a: str, b: str) -> bool:
            return equal_readings(a, b, symbolic, depth + 1)

        if "tuple" in (g_kind, p_kind):
            return len(g_items) == len(p_items) and all(element(a, b) for a, b in zip(g_items, p_items))
        return _one_to_one(g_items, p_items, element)
    return symbolic(gold, pred)
