"""The final answer of a math completion, as a string (for `verifiers.math.grade` and answer votes).

A chain of small, separately tested extractors; the first that finds something answers:

1. the last ``\\boxed{}``, when no final-answer phrase comes after it. Boxes in one math span,
   or separated only by "and", "or", commas, ``\\quad`` or math delimiters, are one answer
   joined with ", " (``\\boxed{1} and \\boxed{2}`` answers "1, 2");
2. GSM8K's ``#### N``;
3. what follows the last final-answer phrase in English, Chinese, French, German or Spanish
   ("the answer is", 答案是, "la réponse est", "Antwort:", "la respuesta es"), so Minerva's
   "Final Answer: The final answer is $X$" after an earlier ``\\boxed{}`` answers X; a phrase
   followed by prose ("Final Answer: The largest $n$ is 34.") answers with the last item of
   that sentence (step 6);
4. the last ``\\boxed{}`` (a phrase came after it but gave nothing);
5. the **whole text** when it is a bare answer: math spans and nothing else but "and", "or" or
   commas between them (``$odd$``, ``$$f(y) = y$$``, ``$2$ or $3$``), or one line with no word
   of two or more letters outside LaTeX commands (``x >= 5``, ``\\frac{10}{9}``, ``(1, 2, 3)``,
   ``1 000``);
6. in prose, the **last answer-like item**: the last math span that holds a digit or a LaTeX
   command and at most one word (``Therefore $x \\geq 5$ is the solution.``), or the last number
   written after it (``$3 \\times 4 = 12$ a day, so 84 in a week`` answers 84). A number glued
   to letters (``AZYUK2A``) is no number.

Full-width digits and colons read as ASCII. Everything here is linear-time string work: no
sympy, nothing evaluated.
"""

from __future__ import annotations

import re

from verifiers.math_forms import braced, to_ascii

__all__ = [
    "extract_answer",
    "extract_answer_phrase",
    "extract_boxed",
    "extract_hashes",
    "extract_last_item",
    "extract_last_number",
    "extract_math_span",
]

MAX_JOINED_BOXES = 32
"""At most this many adjacent boxes are joined into one answer."""
MAX_BARE_CHARS = 1000
"""A longer text is never taken whole as the answer."""

_BOX_GAP = re.compile(
    r"(?:\s|[,;]|\$|\\[()\[\]]|\\q?quad\b|\\[,;:! ]|\b(?:and|or)\b|\\text\{\s*(?:and|or|,)?\s*\})*"
)
_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}")
_LATEX_COMMAND = re.compile(r"\\(?:begin|end)\s*\{[A-Za-z*]*\}|\\[A-Za-z]+")
_TEXT_ARGUMENT = re.compile(r"\\(?:text|textbf|mathrm|mbox|textnormal|operatorname)\s*\{[^{}]*\}")


def _box_at(text: str, pos: int) -> tuple[str, int] | None:
    """(content, end) of the ``\\boxed``/``\\fbox`` starting at ``pos``; None when unclosed."""
    i = pos + (6 if text.startswith("\\boxed", pos) else 5)
    while i < len(text) and text[i] == " ":
        i += 1
    if i < len(text) and text[i] == "{":
        inner = braced(text, i)
        return (inner.strip(), i + len(inner) + 2) if inner is not None else None
    match = re.match(r"[^\s$]+", text[i:])
    if match and i > pos + 5 and text[i - 1] == " ":
        return match.group(0).strip(), i + match.end()
    return None


def _last_box_start(text: str, before: int) -> int:
    return max(text.rfind("\\boxed", 0, before), text.rfind("\\fbox", 0, before))


def extract_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``), nested braces allowed, joined
    with the boxes before it in the same math span (``$$\\boxed{(3, 3)} \\text{ for (a) and }
    \\boxed{(1, 1)}$$``) or separated from it only by "and", "or", commas, ``\\quad`` or math
    delimiters. Also accepts the brace-less ``\\boxed 5``. None when there is none or the last
    one is unclosed."""
    pos = _last_box_start(text, len(text))
    found = _box_at(text, pos) if pos >= 0 else None
    if found is None:
        return None
    parts = [found[0]]
    span_start = -1
    while len(parts) < MAX_JOINED_BOXES:
        previous = _last_box_start(text, pos)
        box = _box_at(text, previous) if previous >= 0 else None
        if box is None or box[1] > pos:
            break
        if span_start < 0:
            span_start = next((a for a, b, _ in _spans(text) if a <= pos < b), len(text))
        if previous < span_start and not _BOX_GAP.fullmatch(text, box[1], pos):
            break
        parts.insert(0, box[0])
        pos = previous
    return ", ".join(parts)


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


def _words(text: str) -> int:
    """Words of two or more letters outside LaTeX commands and their text arguments."""
    return len(_WORD.findall(_LATEX_COMMAND.sub(" ", _TEXT_ARGUMENT.sub(" ", text))))


def _answer_like(content: str | None) -> bool:
    """A span content that can be an answer: a digit or a LaTeX command, at most one word."""
    return bool(content) and re.search(r"[0-9\\]", content) is not None and _words(content) <= 1


def extract_math_span(text: str) -> str | None:
    """The content of a math span that ends the text (after trailing whitespace and ``. , ; !``):
    ``Answer $ 9 $``, ``$$ 9 $$``, ``\\( 9 \\)``, ``\\[ 9 \\]``. None when the text ends otherwise,
    or when the span holds neither a digit nor a LaTeX command ("... is the value of $x$." names
    a variable, it does not answer)."""
    content = _math_span_at(text.rstrip().rstrip(".,;!。").rstrip(), end=True)
    return content if _answer_like(content) else None


_OPENING = re.compile(r"\$\$|\\\[|\\\(|(?<!\\)\$")
_CLOSING = {"$$": "$$", "\\[": "\\]", "\\(": "\\)", "$": "$"}


def _closing_at(text: str, closing: str, start: int) -> int:
    """Index of the first ``closing`` at or after ``start`` (an escaped ``\\$`` does not close)."""
    i = text.find(closing, start)
    while closing == "$" and i > 0 and text[i - 1] == "\\":
        i = text.find(closing, i + 1)
    return i


def _spans(text: str):
    """(start, end, content) of each math span, left to right; inline ``$..$`` and ``\\(..\\)``
    do not cross a line. Linear time: once a closing delimiter is missing after some point, later
    openings of that kind are not searched again."""
    missing: set[str] = set()
    pos = 0
    while True:
        opening = _OPENING.search(text, pos)
        if opening is None:
            return
        closing = _CLOSING[opening.group(0)]
        close = -1 if closing in missing else _closing_at(text, closing, opening.end())
        if close < 0:
            missing.add(closing)
            pos = opening.end()
            continue
        content = text[opening.end() : close]
        if closing in ("$", "\\)") and "\n" in content:
            pos = close if closing == "$" else opening.end()
            continue
        yield opening.start(), close + len(closing), content.strip()
        pos = close + len(closing)
_NUMBER = re.compile(r"(?<![A-Za-z_])(?:-?\d+(?:,\d+)*(?:\.\d+)?(?:/\d+)?|-?\.\d+)")


def extract_last_number(text: str) -> str | None:
    """The last number in the text (integer, decimal, ``a/b``); commas written between digits
    stay (``1,000``, ``1000,99``) for `verify` to read. Digits glued after letters (``AZYUK2A``,
    ``x_2``) are no number."""
    last = None
    for last in _NUMBER.finditer(text):
        pass
    return last.group(0) if last else None


def extract_last_item(text: str) -> str | None:
    """The last answer-like item of prose: the last math span that holds a digit or a LaTeX
    command and at most one word, unless a number outside every span comes after it."""
    span_end, span_content, masked = -1, None, []
    last = 0
    for start, end, content in _spans(text):
        masked += [text[last:start], " " * (end - start)]
        last = end
        if _answer_like(content):
            span_end, span_content = end, content
    masked.append(text[last:])
    number = None
    for number in _NUMBER.finditer("".join(masked)):
        pass
    if number is not None and number.start() >= span_end:
        return number.group(0)
    return span_content


def extract_answer_phrase(text: str) -> str | None:
    """What follows the last final-answer phrase (see the module docstring), up to the line end.

    A math span right after the phrase is the answer (Minerva's "The final answer is $X$. I hope
    it is correct."); otherwise the text stops at a sentence end ("。" or a full stop before a
    space), and a sentence with prose in it answers with its last item (`extract_last_item`).
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
    rest = re.sub(r"\.\s*$", "", rest).strip()
    if _words(rest) >= 2:
        return extract_last_item(rest)
    return rest.strip("$").strip() or None


def _phrase_end(text: str) -> int:
    last = None
    for last in _ANSWER_PHRASE.finditer(text):
        pass
    return last.end() if last else -1


def extract_bare(text: str) -> str | None:
    """The whole text when it is a bare answer: math spans separated only by "and", "or" or
    commas (``$odd$``; ``$2$ or $3$`` answers "2, 3"), or one line without words."""
    s = text.strip().rstrip(".").strip()
    if not s or len(s) > MAX_BARE_CHARS:
        return None
    if s.startswith(("$", "\\(", "\\[")):
        contents, last = [], 0
        for start, end, content in _spans(s):
            if not _BOX_GAP.fullmatch(s, last, start):
                return None
            contents.append(content)
            last = end
        return ", ".join(contents) if contents and last == len(s) and all(contents) else None
    if "\n" in s or "$" in s or "\\(" in s or "\\[" in s or _words(s) > 0:
        return None
    return s


def extract_answer(text: str) -> str | None:
    """The final answer of a completion by the chain in the module docstring; None when nothing
    answer-like is present or ``text`` is not str. Full-width forms are read as ASCII."""
    if not isinstance(text, str):
        return None
    text = to_ascii(text)
    boxed = extract_boxed(text)
    if boxed and _phrase_end(text) <= _last_box_start(text, len(text)):
        return boxed
    for extractor in (extract_hashes, extract_answer_phrase):
        answer = extractor(text)
        if answer:
            return answer
    return boxed or extract_bare(text) or extract_last_item(text)
