"""Task loading, the shared verifier contract, rewards and composite rewards."""

from __future__ import annotations

import importlib
import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from verifiers import arithmetic, countdown, math as vmath
from verifiers.tasks import DATA_DIR, TASKS, VERIFIERS, CompositeReward, format_component, load_task, reward
from verifiers.types import GradeReward, Problem, Task, Verifier

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def test_default_data_dir_is_shared_data():
    assert DATA_DIR == DATA


@pytest.mark.parametrize(
    "name, count, marker", [("gsm8k", 1319, "\\boxed{}"), ("math500", 500, "\\boxed{}"), ("countdown", 2001, "<answer>"), ("game24", 1362, "<answer>"), ("humaneval", 164, "```python")]
)
def test_load_each_task(name, count, marker):
    task = load_task(name)
    assert task.name == name and len(task.problems) == count
    problem = task.problems[0]
    assert problem.task == name and marker in problem.question
    assert problem.chat_messages() == [{"role": "user", "content": problem.question}]
    assert problem.chat_messages("be brief")[0] == {"role": "system", "content": "be brief"}
    assert len({p.id for p in task.problems}) == count
    assert task.verifier is VERIFIERS[name]


def test_explicit_path_and_split():
    task = load_task("gsm8k", path=DATA / "gsm8k" / "train.jsonl", split="train")
    assert len(task.problems) == 7473 and task.problems[0].id == "gsm8k/train/0"
    assert load_task("countdown", split="train").problems[0].reference == {"nums": [44, 19, 35], "target": 98}


def test_rewards_for_every_task():
    gsm = load_task("gsm8k").problems[0]
    assert gsm.reference == "18"
    assert reward("She makes $18.\n\\boxed{18}", gsm) == 1.0
    assert reward("\\boxed{17}", gsm) == 0.0
    assert reward(None, gsm) == 0.0
    math = load_task("math500").problems[0]
    assert reward("\\boxed{(3, \\frac{\\pi}{2})}", math) == 1.0
    countdown = load_task("countdown").problems[0]  # 96, 7, 37, 74 -> 55
    assert reward("<answer>74 - 96 + 37 + 7 - 7</answer>", countdown) == 0.0
    assert reward("<answer>96 - 37 - 74 + 7 * 10</answer>", countdown) == 0.0
    game = load_task("game24").problems[0]  # 1 1 4 6
    assert reward("<answer>(1 + 1 + 4) * 6</answer>", game) == 0.0
    assert reward("<answer>(1 + 1) * 4 + 6 * 1</answer>", game) == 0.0
    assert reward("<answer>6 * 4 * 1 * 1</answer>", game) == 1.0
    human = load_task("humaneval").problems[2]
    task = load_task("humaneval")
    assert task.reward(human.meta["canonical_solution"], human) == 1.0
    assert task.reward("    return 0.0\n", human) == 0.0


def test_extract_and_equivalent_for_voting():
    math = VERIFIERS["math500"]
    answers = [math.extract(c) for c in ("so \\boxed{\\frac12}", "thus \\boxed{0.5}", "\\boxed{2}")]
    assert math.equivalent(answers[0], answers[1]) and not math.equivalent(answers[0], answers[2])
    game = VERIFIERS["game24"]
    a, b, c = (game.extract(f"<answer>{e}</answer>") for e in ("6 * 4 * 1 * 1", "1 * (4 * 6) * 1", "(1 + 1 + 4) * 4"))
    assert game.equivalent(a, b) and not game.equivalent(a, c)
    code = VERIFIERS["humaneval"]
    assert code.equivalent(code.extract("```python\nx = 1\n```"), "x  =  1")


def test_composite_reward_skips_not_applicable():
    problem = load_task("gsm8k").problems[0]
    not_applicable = lambda completion, p: None  # noqa: E731
    composite = CompositeReward([(reward, 1.0), (format_component(), 0.5), (not_applicable, 10.0)])
    assert composite("<think>16-3-4=9, 9*2=18</think> \\boxed{18}", problem) == 1.0
    assert composite("\\boxed{18}", problem) == pytest.approx(1.0 / 1.5)
    assert composite("<think>x</think> \\boxed{17}", problem) == pytest.approx(0.5 / 1.5)
    assert CompositeReward([(not_applicable, 1.0)])("x", problem) == 0.0
    with pytest.raises(ValueError, match="weight >= 0"):
        CompositeReward([(reward, -1.0)])
    with pytest.raises(ValueError, match="at least one"):
        CompositeReward([])


def test_errors_name_the_problem_and_the_fix(tmp_path):
    with pytest.raises(ValueError, match="unknown task 'gsm9k'; choose one of"):
        load_task("gsm9k")
    with pytest.raises(FileNotFoundError, match="does not exist; pass path="):
        load_task("gsm8k", path=tmp_path / "missing.jsonl")
    with pytest.raises(FileNotFoundError, match="game24 has only the split 'test'; pass split='test'"):
        load_task("game24", split="train")
    with pytest.raises(ValueError, match="unknown task"):
        reward("x", Problem(id="p", question="q", reference="1", task="nope"))


def test_local_csv_and_gzip_paths(tmp_path):
    path = tmp_path / "mini.jsonl"
    path.write_text(json.dumps({"index": 7, "target": 10, "nums": [2, 5]}) + "\n")
    task = load_task("countdown", path=path)
    assert task.problems[0].id == "countdown/test/7" and reward("<answer>2 * 5</answer>", task.problems[0]) == 1.0


def test_public_api():
    assert set(TASKS) == {"arithmetic", "gsm8k", "math500", "countdown", "game24", "humaneval", "custom"}
    assert set(TASKS) == set(VERIFIERS)
    assert VERIFIERS["arithmetic"] is arithmetic.VERIFIER and TASKS["arithmetic"] is arithmetic.load_arithmetic
    package = importlib.import_module("verifiers")
    expected = {"extract_answer", "verify", "format_reward", "check_countdown", "check_game24", "run_code",
                "SandboxResult", "load_task", "Problem", "Task", "TASKS", "CompositeReward", "reward",
                "Verifier", "RewardFn", "grade_humaneval"}
    assert expected <= set(package.__all__)
    assert len(package.__all__) == len(set(package.__all__))
    for name in package.__all__:
        assert getattr(package, name) is not None, name
    # "score" is the search scorers' word; no verifier API uses it any more.
    assert not any("score" in name for name in package.__all__)
    for module in (vmath, countdown, arithmetic, importlib.import_module("verifiers.code")):
        assert not any("score" in name for name in module.__all__), module.__name__


def test_arithmetic_imports_only_the_types_module():
    """No import cycle: in a fresh interpreter, with the package's __init__ (which imports
    everything) bypassed, importing the arithmetic task loads only itself and verifiers.types."""
    package_dir = Path(arithmetic.__file__).parent
    probe = (
        "import sys, types\n"
        f"package = types.ModuleType('verifiers'); package.__path__ = [{str(package_dir)!r}]\n"
        "sys.modules['verifiers'] = package\n"
        "import verifiers.arithmetic\n"
        "print(sorted(m for m in sys.modules if m.startswith('verifiers')))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['verifiers', 'verifiers.arithmetic', 'verifiers.types']"


def test_reward_shape_is_text_and_problem():
    problem = Problem(id="t/0", question="q", reference="0.5", task="math500")
    for name, verifier in VERIFIERS.items():
        assert isinstance(verifier, Verifier) and isinstance(verifier.reward, GradeReward), name
    assert VERIFIERS["math500"].reward("so \\boxed{\\frac{1}{2}}", problem) == 1.0
    assert VERIFIERS["math500"].reward("so \\boxed{2}", problem) == 0.0
    calls = []
    spy = Verifier(reward=lambda text, p: calls.append((text, p)) or 0.25, extract=lambda t: t, equivalent=str.__eq__)
    task = Task("spy", [problem], spy)
    assert task.reward("text", problem) == 0.25 and calls == [("text", problem)]  # the whole problem, not its reference
    assert task.reward(None, problem) == 0.0 and len(calls) == 1  # non-str text never reaches the verifier
    # A verifier (and a loaded task holding it) pickles, e.g. to hand a task to a worker process.
    arithmetic_task = load_task("arithmetic")
    again = pickle.loads(pickle.dumps(arithmetic_task))
    gold = arithmetic_task.problems[0]
    assert again.reward(gold.meta["solution"], gold) == 1.0 == reward(gold.meta["solution"], gold)
