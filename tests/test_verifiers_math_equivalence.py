"""Answer equivalence rules that public graders document, each case citing the grader it follows.

Sources:
- [MV] huggingface/Math-Verify, tests/test_all.py (number extraction, LaTeX notation, additional
  cases); where math-verify is the reference the test also asserts math-verify's own verdict on
  the same inputs (`math_verify_says`), and says why where we intentionally differ.
- [QWEN] QwenLM/Qwen2.5-Math, evaluation/parser.py (extract_answer reads "答案是" and Minerva's
  "final answer is $X$. I hope") and evaluation/grader.py (compare_lists: bracketed lists and
  tuples equal element by element, in order; parse_digits drops a "\\" before "%").
- [MINERVA] Lewkowycz et al. 2022, the "Final Answer: The final answer is X. I hope it is
  correct." format.
- [MATH] Hendrycks et al. 2021, the MATH-500 answers in ../shared/data (``,\\!`` thousands
  separators, ``-2,1`` root lists).
"""

from __future__ import annotations

import pytest

from verifiers.math import extract_answer, extract_answer_phrase, extract_math_span, grade, verify
from verifiers.math_forms import normalize_answer, readings


def math_verify_says(gold: str, pred: str, targets: tuple[str, ...] = ("latex", "expr")) -> bool:
    """math-verify's own verdict, configured like its test helper `compare_strings` ([MV])."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse
    from math_verify import verify as mv_verify

    configs = [LatexExtractionConfig(boxed_match_priority=0)] if "latex" in targets else []
    configs += [ExprExtractionConfig()] if "expr" in targets else []
    return bool(mv_verify(parse(gold, configs), parse(pred, configs)))


# ------------------------------------------------------------------ decimal comma vs thousands


@pytest.mark.parametrize(
    "gold, pred",
    [
        ("1000.99", "1000,99"),  # [MV] test_number_extraction: "Test decimal separator as ,"
        ("1.22", "1,22"),  # [MV] same
        ("0.111", "0,111"),  # [MV] ("0,111", "0.111"): a leading 0 group is no thousands group
        ("7425000", "7,425,000"),  # [MV] thousands separator
        ("1000.99", "1,000.99"),  # [MV] thousands separator with a decimal point
        ("1000", "1 000"),  # [MV] a space as thousands separator
    ],
)
def test_decimal_comma_and_thousands_as_math_verify_reads_them(gold, pred):
    assert verify(gold, pred) and verify(pred, gold)
    assert math_verify_says(gold, pred, ("expr",))  # the peer library agrees


def test_thousands_rule_resolves_1000_and_explicit_separators():
    # Three-digit groups are thousands, so 1,000 is never 1.0 (the decimal-comma reading) nor the
    # list 1, 0: GSM8K and MATH write thousands this way. math-verify agrees ([MV] 7,425,000).
    assert verify("1000", "1,000") and not verify("1", "1,000") and not verify("1.22", "1,220")
    assert readings("12,345,678") == ["12345678"]
    # [MATH] ",\!" is the dataset's thousands separator; [MV] "11,\! 111,\! 111,\! 100" == 11111111100.
    assert verify("11111111100", "11,\\! 111,\\! 111,\\! 100") and verify("10080", "10,\\!080")
    assert math_verify_says("$11111111100$", "$11,\\! 111,\\! 111,\\! 100$", ("latex",))
    # [MV] "\boxed{32, 349}" is not 32349: a comma followed by a space separates list elements.
    assert not verify("32349", "32, 349")
    assert not math_verify_says("\\[ \\boxed{32349} \\]", "is $\\boxed{32, 349}$")
    # Inside brackets a comma separates elements: (2,100) is a point, not 2100.
    assert verify("(2,100)", "(2, 100)") and not verify("(2,100)", "2100")


def test_a_lone_comma_is_read_both_ways():
    # "-2,1" is MATH-500's answer for the roots -2 and 1 [MATH]; "2,5" is 2.5 with a decimal comma [MV].
    assert readings("-2,1") == ["-2.1", "-2,1"] and readings("-2, 1") == ["-2, 1"]
    assert verify("-2,1", "1, -2") and verify("1,-2", "-2, 1")
    assert verify("2.5", "2,5") and not verify("2.5", "2, 5")
    # The price of keeping both readings: an answer written "-2,1" also matches -2.1.
    assert verify("-2,1", "-2.1")


def test_decimal_comma_extracted_from_free_text():
    # [MV] ("2.74", "Soucis : 2,74 $ a..") and ("1000.99", "1000,99"): the number keeps its comma.
    assert extract_answer("We got 1000,99 in total") == "1000,99"
    assert grade("We got 1000,99 in total", "1000.99") == 1.0
    assert grade("La réponse est 1,22.", "1.22") == 1.0


# ------------------------------------------------------------------ spaced delimiters

HALF = "\\frac{1}{2}"  # not a single number: a last-number fallback would read "2"


@pytest.mark.parametrize(
    "completion",
    [
        f"Answer $ {HALF} $",  # [MV] test_latex_notation: "Answer $ 9 $"
        f"Answer $$ {HALF} $$",  # [MV] "Answer $$ 9 $$"
        f"Answer \\( {HALF} \\)",  # [MV] "Answer \\( 9 \\)"
        f"Answer \\[ {HALF} \\]",  # [MV] "Answer \\[ 9 \\]"
        f"Answer \\[ \n {HALF} \n \\]",  # [MV] block math may span lines
        f"Answer $$ \n {HALF} \n $$",  # [MV] same
        f"So we get \\( {HALF} \\).",  # trailing sentence punctuation
    ],
)
def test_answer_in_spaced_delimiters(completion):
    assert extract_answer(completion) == HALF
    assert grade(completion, "0.5") == 1.0
    assert math_verify_says(f"${HALF}$", completion, ("latex",))


def test_inline_math_does_not_span_lines_and_delimited_answers_verify():
    # [MV] "Answer $ \n 9 \n $" and "Answer \\( \n 9 \n \\)" are not inline math: no span.
    assert extract_math_span(f"Answer $ \n {HALF} \n $") is None
    assert extract_math_span(f"Answer \\( \n {HALF} \n \\)") is None
    assert not math_verify_says("$9$", "Answer $ \n 9 \n $", ("latex",))
    # We differ on the whole completion on purpose: our chain ends with GSM8K's last-number
    # fallback, which still reads the 9.
    assert extract_math_span("Answer $ \n 9 \n $") is None and grade("Answer $ \n 9 \n $", "9") == 1.0
    for delimited in ("$ 9 $", "$$ 9 $$", "\\( 9 \\)", "\\[ 9 \\]", "$9$."):
        assert verify("9", delimited) and verify(delimited, "9"), delimited
    assert not verify("9", "$ 8 $")
    # A span that only names a variable is no answer: the last number is.
    assert extract_answer("So 9 is the value of $x$.") == "9" and extract_math_span("the value of $x$.") is None


# ------------------------------------------------------------------ non-English final answers


@pytest.mark.parametrize(
    "completion",
    [
        f"所以答案是 ${HALF}$",  # [QWEN] parser.extract_answer splits at "答案是"
        f"最终答案：{HALF}",  # full-width colon
        f"答案为 {HALF}。",  # ideographic full stop
        "最终答案：１／２",  # full-width digits and slash
        f"Réponse : {HALF}",  # French typography: a space before the colon
        f"Réponse\u00a0: {HALF}",  # ... a no-break space, as French typesetting writes it
        f"La réponse est ${HALF}$. On a vérifié 3 cas.",
        f"La réponse finale est {HALF}",
        f"Antwort: {HALF}",
        f"Die Antwort ist {HALF}. Probe mit 4 Werten.",
        f"La respuesta es {HALF}",
        f"Respuesta: ${HALF}$",
    ],
)
def test_final_answer_in_non_english_text(completion):
    assert grade(completion, "0.5") == 1.0, extract_answer(completion)


def test_non_english_phrases_are_whole_words_and_math_verify_differs_on_chinese_colon():
    assert extract_answer_phrase("Die Antworten sind unklar, wir rechnen 7") is None
    assert extract_answer_phrase("答案是 ９") == "9" or extract_answer("答案是 ９") == "9"
    assert grade("答案是 ９", "9") == 1.0
    # math-verify reads "答案是 9" but not full-width digits or "最终答案：9": we map full-width
    # forms to ASCII first, which is how the text is meant to be read.
    assert math_verify_says("$9$", "答案是 9") and not math_verify_says("$9$", "答案是 ９")
    assert not math_verify_says("$9$", "最终答案：9") and grade("最终答案：9", "9") == 1.0


def test_minerva_final_answer_format():
    # [MINERVA] / [QWEN] "final answer is $X$. I hope": the span, not the rest of the sentence.
    completion = "Final Answer: The final answer is $28 \\%$. I hope it is correct."
    assert extract_answer(completion) == "28 \\%"
    assert grade(completion, "28\\%") == 1.0


# ------------------------------------------------------------------ tuples, sets, solution lists


@pytest.mark.parametrize(
    "gold, pred, equal",
    [
        ("(1, 2)", "(2, 1)", False),  # a point: order matters ([QWEN] compare_lists, in order)
        ("(1, 2)", "\\left( 1,2 \\right)", True),
        ("(1, 2, 3)", "(1, 3, 2)", False),
        ("\\left( 3, \\frac{\\pi}{2} \\right)", "(\\frac{\\pi}{2}, 3)", False),
        ("(\\frac{1}{2}, \\sqrt{4})", "(0.5, 2)", True),  # elements compared by sympy, in order
        ("(\\frac{1}{2}, 2)", "(2, 0.5)", False),
        ("\\{1, 2\\}", "\\{2, 1\\}", True),  # a set: order does not matter
        ("\\{\\sqrt{2}, 1\\}", "\\{1, \\sqrt 2\\}", True),
        ("1, 2", "2, 1", True),  # a bare list is a solution list: unordered
        ("1, 2", "\\{2, 1\\}", True),
        ("3, 5, 7", "7, 3, 5", True),  # [MATH] answer "3, 5, 7"
        ("1, 1, 2", "1, 2", False),  # counted as multisets: a repeated root counts
        ("(1, 3)", "\\{1, 3\\}", True),  # [MV] ("$(1,3)$", "${1,3}$") -> 1
        ("(3, 1)", "\\{1, 3\\}", False),  # [MV] ("$(3,1)$", "${1,3}$") -> 0
        ("(1, 2]", "(1,2]", True),  # intervals are left to math-verify
        ("[1, 2)", "(1, 2]", False),
    ],
)
def test_tuples_sets_and_solution_lists(gold, pred, equal):
    assert verify(gold, pred) is equal
    assert verify(pred, gold) is equal  # symmetric


def test_a_point_is_never_reordered_to_match_a_set():
    # math-verify sorts a predicted tuple when the gold is a set, so it takes the point (2, 1)
    # for the gold list 1, 2 -- but not the other way round. We differ on purpose: a tuple is
    # compared in its written order whichever side it is on, so the verdict is symmetric.
    assert math_verify_says("$1,2$", "$(2,1)$") and not math_verify_says("$(2,1)$", "$1,2$")
    assert math_verify_says("$\\{1,2\\}$", "$(2,1)$")
    assert not verify("1, 2", "(2, 1)") and not verify("(2, 1)", "1, 2")
    assert not verify("\\{1, 2\\}", "(2, 1)")
    # [MV] test_latex_notation_math: "$-2,1$" vs "\\boxed{-2,1}" and the root list "1,-2".
    assert math_verify_says("$-2,1$", "so the roots are $\\boxed{1,-2}$.") and verify("-2,1", "1,-2")


# ------------------------------------------------------------------ trailing backslash


@pytest.mark.parametrize(
    "gold, pred",
    [
        ("9", "9\\"),
        ("\\frac{1}{2}", "\\frac{1}{2}\\"),
        ("\\frac{1}{2}", "\\frac{1}{2} \\\\"),  # a LaTeX line break at the end
        ("(1, 2)", "(1,2)\\"),
        ("\\{1, 2\\}", "\\{2, 1\\}\\"),  # escaped braces stay intact
        ("50\\%", "50\\%\\"),
    ],
)
def test_trailing_backslash_is_dropped(gold, pred):
    assert verify(gold, pred) and verify(pred, gold)


def test_trailing_backslash_in_completions():
    assert grade("\\boxed{9\\}", "9") == 1.0  # the brace group ends in a stray "\"
    assert grade("so the answer is \\frac{1}{2}\\", "0.5") == 1.0
    assert normalize_answer("\\frac{1}{2}\\") == "\\frac{1}{2}"
    # math-verify reads "9\" in free text, but not inside \boxed{} (how our worker calls it).
    assert math_verify_says("$9$", "9\\") and not math_verify_says("$9$", "\\boxed{9\\}")
