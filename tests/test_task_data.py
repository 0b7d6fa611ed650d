"""Task data checked at load: the custom question/answer task, its answer kinds, and one clear
error (file, row, expected form) for each kind of bad row, raised before any model loads."""

from __future__ import annotations

import importlib
import json
import pickle
import sys
from pathlib import Path

import pytest

from verifiers import answer_kinds
from verifiers.tasks import VERIFIERS, load_task, reward, task_options

REPO = Path(__file__).resolve().parents[1]
GOOD = [{"question": "What is 3 + 5?", "answer": 8},  # a JSON number
        {"question": "Half of one?", "answer": "\\frac{1}{2}"},  # LaTeX
        {"question": "Capital of France?", "answer": "Paris"},  # text
        {"question": "Ten thousand?", "answer": "10,000"}]  # a number written as text


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


def test_custom_task_loads_numbers_latex_and_text(tmp_path):
    task = load_task("custom", path=write_jsonl(tmp_path / "qa.jsonl", GOOD))
    assert [p.reference for p in task.problems] == [
        {"answer": "8", "kind": "number"}, {"answer": "\\frac{1}{2}", "kind": "math"},
        {"answer": "Paris", "kind": "math"}, {"answer": "10,000", "kind": "number"}]
    first = task.problems[0]
    assert first.id == "custom/test/0" and first.task == "custom" and task.verifier is VERIFIERS["custom"]
    assert first.question.startswith("What is 3 + 5?\n\n") and "\\boxed{}" in first.question
    assert reward("3 + 5 = 8, so \\boxed{8}", first) == 1.0 == reward("The answer is 8.0", first)
    assert reward("The answer is 8 apples.", first) == 1.0 == reward("\\boxed{x = 8}", first)
    assert reward("\\boxed{9}", first) == 0.0 and reward("no number here", first) == 0.0
    assert reward("\\boxed{0.5}", task.problems[1]) == 1.0 and reward("\\boxed{1/3}", task.problems[1]) == 0.0
    assert reward("\\boxed{10000}", task.problems[3]) == 1.0
    again = pickle.loads(pickle.dumps(task))  # a task pickles (to worker processes)
    assert again.reward("\\boxed{8}", again.problems[0]) == 1.0


def test_text_kind_fields_and_instruction_options(tmp_path):
    path = write_jsonl(tmp_path / "qa.jsonl", [{"prompt": "Capital of France?", "target": "Paris", "level": 2}])
    task = load_task("custom", path=path, question_field="prompt", answer_field="target", answer_kind="text",
                     instruction="")
    problem = task.problems[0]
    assert problem.question == "Capital of France?" and problem.meta == {"raw_question": "Capital of France?",
                                                                          "level": 2}
    assert reward("The answer is paris.", problem) == 1.0 == reward("\\boxed{ PARIS }", problem)
    assert reward("\\boxed{Lyon}", problem) == 0.0 and reward("Paris", problem) == 0.0  # no final answer given
    assert task_options("custom") == ["question_field", "answer_field", "answer_kind", "instruction"]
    assert task_options("gsm8k") == []


def test_custom_task_from_csv(tmp_path):
    path = tmp_path / "qa.csv"
    path.write_text("question,answer\nWhat is 3 + 5?,8\n\"Half, of one?\",\\frac{1}{2}\n")
    task = load_task("custom", path=path)
    assert [p.meta["raw_question"] for p in task.problems] == ["What is 3 + 5?", "Half, of one?"]
    assert [p.reference["kind"] for p in task.problems] == ["number", "math"]


def test_custom_task_from_a_json_list_and_parquet(tmp_path):
    import pandas as pd

    (tmp_path / "qa.json").write_text(json.dumps(GOOD[:2]))
    answers = [p.reference["answer"] for p in load_task("custom", path=tmp_path / "qa.json").problems]
    assert answers == ["8", "\\frac{1}{2}"]
    pd.DataFrame({"question": ["a?", "b?"], "answer": [8, 2.5]}).to_parquet(tmp_path / "qa.parquet")
    assert [p.reference for p in load_task("custom", path=tmp_path / "qa.parquet").problems] == [
        {"answer": "8", "kind": "number"}, {"answer": "2.5", "kind": "number"}]  # float64 8.0 reads as 8
    pd.DataFrame({"question": ["a?", "b?"], "answer": [8, None]}).to_parquet(tmp_path / "gap.parquet")
    with pytest.raises(ValueError, match=r"gap.parquet row 2: field 'answer' is empty"):
        load_task("custom", path=tmp_path / "gap.parquet")


@pytest.mark.parametrize("text, value", [("8", 8), ("-0.5", -0.5), ("1,000", 1000), ("$3/4$", 0.75), ("8.", 8)])
def test_parse_number(text, value):
    assert answer_kinds.parse_number(text) == value


@pytest.mark.parametrize("text", ["x", "1e5", "\\frac{1}{2}", "3 apples", "1/0", "", None, "9" * 300])
def test_parse_number_refuses(text):
    assert answer_kinds.parse_number(text) is None


@pytest.mark.parametrize("answer, value", [("8 apples", 8), ("x = 8", 8), ("8 \\text{ cm}", 8), ("y=-2.5 m/s", -2.5),
                                           ("8 or 9", None), ("apples", None), ("between 3 and 5", None)])
def test_response_number_allows_a_name_and_units(answer, value):
    assert answer_kinds.response_number(answer) == value


def test_voting_equivalence():
    assert answer_kinds.equivalent("8", "8.0") and not answer_kinds.equivalent("8", "9")
    assert answer_kinds.equivalent("Paris", "paris") and answer_kinds.equivalent("\\frac{1}{2}", "0.5")


Q = "What is 3 + 5?"
# (file name, content, load_task options, error type, what the one message must say)
BAD = [
    ("missing.jsonl", None, {}, FileNotFoundError, r"data file .*missing.jsonl does not exist"),
    ("empty.jsonl", "", {}, ValueError, r"empty.jsonl has no rows \(it is empty\); expected one row per problem"),
    ("bad.jsonl", f'{{"question": "{Q}", "answer": 8}}\n{{"question": "x", "answer": 8\n', {}, ValueError,
     r"bad.jsonl row 2 \(line 2\): not valid JSON .*; expected one JSON object per line"),
    ("list.jsonl", '["What?", 8]\n', {}, ValueError, r"list.jsonl row 1 \(line 1\): a JSON list, not an object"),
    ("noanswer.jsonl", f'{{"question": "{Q}"}}\n', {}, ValueError,
     r"noanswer.jsonl row 1 \(line 1\): no field 'answer' \(its fields: 'question'\); expected .*answer_field="),
    ("wrongfield.jsonl", f'{{"question": "{Q}", "answer": 8}}\n', {"answer_field": "solution"}, ValueError,
     r"row 1 \(line 1\): no field 'solution' \(its fields: 'question', 'answer'\)"),
    ("empty_answer.jsonl", f'{{"question": "{Q}", "answer": "  "}}\n', {}, ValueError,
     r"empty_answer.jsonl row 1 \(line 1\): field 'answer' is empty"),
    ("null_answer.jsonl", f'{{"question": "{Q}", "answer": null}}\n', {}, ValueError, r"field 'answer' is empty"),
    ("list_answer.jsonl", f'{{"question": "{Q}", "answer": [8]}}\n', {}, ValueError,
     r"row 1 \(line 1\): field 'answer' holds list '\[8\]', not text or a number"),
    ("bool_answer.jsonl", f'{{"question": "{Q}", "answer": true}}\n', {}, ValueError, r"holds bool 'True'"),
    ("number_question.jsonl", '{"question": 3, "answer": 8}\n', {}, ValueError,
     r"field 'question' holds int '3', not text;"),
    ("not_a_number.jsonl", f'{{"question": "{Q}", "answer": "eight"}}\n', {"answer_kind": "number"}, ValueError,
     r"row 1 \(line 1\): answer 'eight' is not a number .*answer_kind='auto' or 'math'"),
    ("kind.jsonl", f'{{"question": "{Q}", "answer": 8}}\n', {"answer_kind": "numeric"}, ValueError,
     r"answer_kind must be one of \['auto', 'number', 'math', 'text'\]; got 'numeric'"),
    ("noheader.csv", f"{Q},8\nWhat is 2 + 2?,4\n", {}, ValueError,
     r"noheader.csv row 1 \(line 2\): no field 'question' .*a CSV's first line is its header"),
    ("headeronly.csv", f"{Q},8\n", {}, ValueError,
     r"headeronly.csv has a header line \(What is 3 \+ 5\?, 8\) and no rows"),
    ("blank_cell.csv", f"question,answer\n{Q},8\n{Q},\n", {}, ValueError,
     r"blank_cell.csv row 2 \(line 3\): field 'answer' is empty"),
]


@pytest.mark.parametrize("name, content, options, error, message", BAD, ids=[case[0] for case in BAD])
def test_bad_custom_data_gives_one_clear_error(tmp_path, name, content, options, error, message):
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    with pytest.raises(error, match=message) as raised:
        load_task("custom", path=path, **options)
    assert "\n" not in str(raised.value)  # one message, one line


@pytest.mark.parametrize("task, row, message", [
    ("gsm8k", {"question": Q, "answer": 8}, r"row 1 \(line 1\): field 'answer' \('8'\) has no final answer after "
                                            r"'#### '; .*use the custom task"),
    ("gsm8k", {"question": Q, "answer": "8"}, r"has no final answer after '#### '"),
    ("math500", {"question": Q, "answer": "8"}, r"no field 'problem' \(its fields: 'question', 'answer'\)"),
    ("countdown", {"nums": "two five", "target": 10}, r"holds 'two five', not a list of integers"),
    ("countdown", {"nums": [2, 5], "target": "ten"}, r"field 'target' holds 'ten', not an integer"),
    ("humaneval", {"task_id": "t", "prompt": "def f():"}, r"no field 'test'"),
])
def test_every_task_checks_its_rows(tmp_path, task, row, message):
    with pytest.raises(ValueError, match=message):
        load_task(task, path=write_jsonl(tmp_path / "rows.jsonl", [row]))


def test_options_and_splits_fail_at_load(tmp_path):
    with pytest.raises(ValueError, match=r"load_task\('gsm8k'\): unknown option\(s\) \['answer_field'\]"):
        load_task("gsm8k", answer_field="x")
    with pytest.raises(ValueError, match="load_task\\('custom'\\) needs path="):
        load_task("custom")
    with pytest.raises(FileNotFoundError, match="math500 has only the split 'test'; pass split='test'"):
        load_task("math500", split="train")


def test_missing_math_verify_fails_at_load_not_at_reward(tmp_path, monkeypatch):
    """With math-verify not importable (``sys.modules[name] = None`` is Python's own marker for
    that), the math tasks refuse to load; a custom task whose answers are all numbers still loads,
    since its grade never needs sympy."""
    monkeypatch.setitem(sys.modules, "math_verify", None)
    assert len(load_task("custom", path=write_jsonl(tmp_path / "n.jsonl", [GOOD[0], GOOD[3]]))) == 2
    for name in ("gsm8k", "math500"):
        with pytest.raises(ImportError, match=f"load_task\\('{name}'\\): the {name} verifier needs the package "
                                              "math-verify .*pip install 'math-verify>=0.8'"):
            load_task(name)
    with pytest.raises(ImportError, match="the custom verifier needs the package math-verify"):
        load_task("custom", path=write_jsonl(tmp_path / "m.jsonl", GOOD))


@pytest.mark.parametrize("command", [
    ["train.py", "--task", "custom", "--task_path", "{data}", "--answer_field", "solution"],
    ["scaling.py", "--task", "custom", "--task_path", "{data}", "--answer_field", "solution", "--out", "{out}"],
    ["train_rs_sft.py", "--task", "custom", "--task_path", "{data}", "--answer_field", "solution"],
], ids=["train", "scaling", "rs_sft"])
def test_scripts_report_bad_data_before_the_model(tmp_path, command, capsys, monkeypatch):
    """A bad data file and a model that does not exist: the script names the data error (file, row,
    field, the option to pick another), exits with argparse's status 2 and prints no traceback.
    The script's `main(argv)` runs in this process (no process of its own to import torch again): any
    exception but the parser's exit would fail the test, as a traceback would."""
    data = write_jsonl(tmp_path / "mine.jsonl", [{"question": Q, "answer": 8}])
    args = [a.format(data=data, out=tmp_path / "out") for a in command]
    monkeypatch.chdir(REPO)
    with pytest.raises(SystemExit) as done:
        importlib.import_module(args[0].removesuffix(".py")).main([*args[1:], "--model",
                                                                   str(tmp_path / "no-such-model")])
    stderr = capsys.readouterr().err
    assert done.value.code == 2, stderr
    assert f"error: {data} row 1 (line 1): no field 'solution' (its fields: 'question', 'answer')" in stderr
    assert "--answer_field" in stderr and "Traceback" not in stderr
    assert "no-such-model" not in stderr  # the data was checked first
