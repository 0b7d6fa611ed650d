"""The embedded arithmetic task: generation, the outcome verifier and the process oracle."""

from __future__ import annotations

import pytest

from planner.policy.local_models import build_char_tokenizer
from verifiers.arithmetic import (ARITHMETIC_ALPHABET, DIFFICULTIES, STEP_DELIMITER, THINK_CLOSE, Difficulty,
                                  arithmetic_task, check_steps, equivalent, extract, grade, make_problem,
                                  solution_steps, step_value)
from verifiers.types import Problem


def test_worked_examples_match_the_documented_format():
    assert make_problem(347, "+", 589).meta["solution"] == "<think>7+9=16\n4+8+1=13\n3+5+1=9\n</think>936"
    assert make_problem(347, "-", 189).meta["solution"] == "<think>17-9=8\n14-8-1=5\n3-1-1=1\n</think>158"
    problem = make_problem(1000, "-", 999)
    assert problem.question == "1000-999=?" and problem.reference == "1"
    assert solution_steps(1000, "-", 999) == ["10-9=1", "10-9-1=0", "10-9-1=0", "1-0-1=0"]
    with pytest.raises(ValueError, match="a >= b"):
        solution_steps(3, "-", 5)


def test_generation_is_reproducible_by_seed():
    first, again, other = arithmetic_task(50, seed=3), arithmetic_task(50, seed=3), arithmetic_task(50, seed=4)
    assert [p.question for p in first] == [p.question for p in again]
    assert [p.meta for p in first] == [p.meta for p in again]
    assert [p.question for p in first] != [p.question for p in other]
    assert all(isinstance(p, Problem) and p.task == "arithmetic" for p in first)
    assert len({p.id for p in first}) == 50
    assert first[0].chat_messages() == [{"role": "user", "content": first[0].question}]


@pytest.mark.parametrize("difficulty", sorted(DIFFICULTIES))
def test_every_gold_solution_verifies_and_passes_the_oracle(difficulty):
    for p in arithmetic_task(300, difficulty, seed=1):
        a, op, b = p.meta["a"], p.meta["op"], p.meta["b"]
        assert int(p.reference) == (a + b if op == "+" else a - b) >= 0
        assert p.question == f"{a}{op}{b}=?"
        solution = p.meta["solution"]
        assert grade(solution, p.reference) == 1.0 and extract(solution) == p.reference
        assert check_steps(p, solution) == [True] * (len(p.meta["steps"]) + 1)
        assert step_value(p, solution) == 1.0
        assert set(p.question + solution) <= set(ARITHMETIC_ALPHABET)


def test_char_tokenizer_spends_one_token_per_character():
    tokenizer = build_char_tokenizer(ARITHMETIC_ALPHABET)
    assert len(tokenizer) <= 40
    solution = make_problem(347, "+", 589).meta["solution"]
    ids = tokenizer.encode(solution, add_special_tokens=False)
    assert len(ids) == len(solution) and tokenizer.decode(ids) == solution


def test_difficulty_knob_sets_digits_and_operations():
    def digits(problems):
        return {len(str(p.meta[k])) for p in problems for k in ("a", "b")}

    assert digits(arithmetic_task(100, "easy")) == {2}
    assert digits(arithmetic_task(200, "hard")) == {3, 4}
    four = arithmetic_task(100, Difficulty(4, 4, "+"))
    assert digits(four) == {4} and {p.meta["op"] for p in four} == {"+"}
    assert all(len(p.meta["steps"]) == 4 for p in four)
    assert {p.meta["op"] for p in arithmetic_task(100, "medium")} == {"+", "-"}
    with pytest.raises(ValueError, match="min_digits"):
        Difficulty(3, 2)
    with pytest.raises(ValueError, match="ops"):
        Difficulty(2, 2, "*")
    with pytest.raises(ValueError, match="unknown difficulty"):
        arithmetic_task(3, "impossible")


def test_wrong_answer_grades_zero_and_the_oracle_flags_the_answer_step():
    p = make_problem(347, "+", 589)
    wrong = p.meta["solution"].replace("</think>936", "</think>937")
    assert grade(wrong, p.reference) == 0.0
    assert check_steps(p, wrong) == [True, True, True, False] and step_value(p, wrong) == 0.0


def test_wrong_step_is_flagged_at_that_step():
    p = make_problem(347, "+", 589)
    wrong = p.meta["solution"].replace("4+8+1=13", "4+8+1=12")
    assert check_steps(p, wrong) == [True, False, True, True]
    assert step_value(p, wrong) == 0.0
    assert grade(wrong, p.reference) == 1.0  # the outcome verifier only reads the answer
    assert check_steps(p, "<think>7+9=16\n4+8=12\n") == [True, False]


def test_missing_or_malformed_answer_is_caught():
    p = make_problem(347, "+", 589)
    no_close = p.meta["solution"].replace(THINK_CLOSE, "")
    assert extract(no_close) is None and grade(no_close, p.reference) == 0.0
    assert extract(p.meta["solution"] + "</think>936") is None
    assert extract("<think>x\n</think>936 and more") is None
    assert extract("<think>x\n</think> 936\n") == "936"
    assert not equivalent(None, "936") and equivalent("0936", "936")
    assert grade(None, "936") == 0.0


def test_answers_of_any_length_are_compared_exactly_and_never_raise():
    import time

    from verifiers import reward
    from verifiers.arithmetic import canonical_integer

    long = "9" * 5000  # past Python's 4300-digit limit on int(), where int() raised ValueError
    start = time.perf_counter()
    assert grade("<think>x</think>" + long, "5") == 0.0
    assert grade("<think>x</think>" + long, long) == 1.0  # identical long answers score 1
    assert grade("<think>x</think>-000" + "7" * 100_000, "-" + "7" * 100_000) == 1.0
    assert grade("<think>x</think>" + long + "8", long + "9") == 0.0
    assert extract("<think>x</think>" + long) == long
    assert equivalent(long, "0" + long) and not equivalent(long, "-" + long)
    assert reward("<think>x</think>" + long, make_problem(12, "+", 30)) == 0.0
    assert time.perf_counter() - start < 1.0
    assert [canonical_integer(t) for t in ("-0", "007", " -12 ", "٣٤", "1.5", "", "--1")] == [
        "0", "7", "-12", "34", None, None, None]


def test_partial_responses_count_completed_steps_only():
    p = make_problem(347, "+", 589)
    assert check_steps(p, "") == [] and step_value(p, "") == 1.0
    assert check_steps(p, "<think>7+9=1") == []
    assert check_steps(p, "<think>7+9=16" + STEP_DELIMITER + "4+8") == [True]
    assert check_steps(p, "7+9=16\n") == [False]  # the first step must open the thinking
    too_long = "<think>7+9=16\n4+8+1=13\n3+5+1=9\n0+0=0\n"
    assert check_steps(p, too_long) == [True, True, True, False]
    premature = "<think>7+9=16\n</think>936"
    assert check_steps(p, premature) == [True, False]


def test_load_arithmetic_gives_fixed_splits_with_the_shared_verifier():
    from verifiers.arithmetic import SPLITS, VERIFIER, load_arithmetic

    test = load_arithmetic(split="test")
    n, seed = SPLITS["test"]
    assert test.name == "arithmetic" and len(test) == n and test.verifier is VERIFIER
    assert [p.question for p in test.problems] == [p.question for p in arithmetic_task(n, "medium", seed=seed)]
    assert len(load_arithmetic(split="train")) == SPLITS["train"][0]
    assert VERIFIER.reward(test.problems[0].meta["solution"], test.problems[0]) == 1.0
    with pytest.raises(ValueError, match="generated"):
        load_arithmetic("some.jsonl")
    from verifiers.arithmetic import held_out_questions, training_problems, validation_problems

    tested = {p.question for p in test.problems}
    assert held_out_questions() == tested
    validation = {p.question for p in load_arithmetic(split="validation").problems}
    assert len(validation) == SPLITS["validation"][0] and not validation & tested  # selection apart from the test
    assert not {p.question for p in validation_problems(64, seed_offset=3)} & tested
    drawn = {p.question for p in arithmetic_task(4000, "medium", seed=1)}
    assert drawn & tested  # short problems repeat across draws: without the filter, training would see test questions
    train = training_problems(4000, "medium", seed=1, exclude=validation)
    assert len(train) == 4000 and not {p.question for p in train} & (tested | validation)
    with pytest.raises(ValueError, match="unknown arithmetic split"):
        load_arithmetic(split="dev")
