"""Tasks: load problems (GSM8K, MATH-500, Countdown, Game of 24, HumanEval) and reward them.

Every task pairs a list of `Problem` with one `Verifier` (the project's single verifier
contract): ``score(completion, reference) -> float``, ``extract(completion) -> str | None`` for
majority voting, and ``equivalent(a, b) -> bool`` to group equal answers. `reward` scores a
completion for any problem; `CompositeReward` adds weighted rewards (e.g. correctness + format).

Data comes from a local file (JSONL, CSV, gzip JSONL, parquet), by default the copies in
``../shared/data`` next to this repository, or else from a Hugging Face dataset id via
``datasets``.
"""

from __future__ import annotations

import csv
import gzip
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verifiers import code, countdown, format as fmt, math as vmath

__all__ = [
    "DATA_DIR",
    "TASKS",
    "VERIFIERS",
    "CompositeReward",
    "Problem",
    "Task",
    "Verifier",
    "format_component",
    "load_task",
    "reward",
]

DATA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data"
"""Default location of the local datasets (``../shared/data`` from the repository root)."""

MATH_INSTRUCTION = "Solve the problem step by step, then put the final answer in \\boxed{}."
COUNTDOWN_INSTRUCTION = (
    "Answer with an expression that uses only the given numbers, + - * / and parentheses, "
    "inside <answer></answer>, for example <answer>(1 + 2) / 3</answer>."
)
CODE_INSTRUCTION = "Complete the function. Answer with the whole function in one ```python code block."


@dataclass(frozen=True)
class Verifier:
    """The verifier contract shared by every task."""

    score: Callable[[str, Any], float]
    """Reward of a completion against the problem's reference, in [0, 1]."""
    extract: Callable[[str], str | None]
    """The answer a completion gives (for voting), None when it gives none."""
    equivalent: Callable[[str, str], bool]
    """Whether two extracted answers are the same answer (groups votes)."""


@dataclass
class Problem:
    """One problem of a task."""

    id: str
    """Stable id, e.g. ``gsm8k/test/17`` or ``HumanEval/0``."""
    question: str
    """Plain prompt text: the problem followed by the answer-format instruction."""
    reference: Any
    """What the task's verifier scores against: an answer string (math), ``{"nums", "target"}``
    (countdown, game24), ``{"prompt", "test", "entry_point"}`` (humaneval)."""
    task: str
    """Name of the task in `TASKS`."""
    meta: dict = field(default_factory=dict)
    """Everything else from the row (worked solution, level, subject, raw question, ...)."""

    def chat_messages(self, system_prompt: str | None = None) -> list[dict[str, str]]:
        """The question as chat messages (for ``tokenizer.apply_chat_template``)."""
        messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
        return messages + [{"role": "user", "content": self.question}]


def _same_expression(a: str, b: str) -> bool:
    """Two arithmetic answers are the same when both are valid, use the same numbers and have
    the same value (so ``3*8`` and ``8*3`` vote together)."""
    ea, eb = countdown.evaluate_expression(a), countdown.evaluate_expression(b)
    return ea is not None and eb is not None and ea[0] == eb[0] and sorted(ea[1]) == sorted(eb[1])


def _same_code(a: str, b: str) -> bool:
    return " ".join(a.split()) == " ".join(b.split())


_MATH = Verifier(score=vmath.score, extract=vmath.extract_answer, equivalent=vmath.verify)
VERIFIERS: dict[str, Verifier] = {
    "gsm8k": _MATH,
    "math500": _MATH,
    "countdown": Verifier(countdown.score_countdown, countdown.extract_expression, _same_expression),
    "game24": Verifier(countdown.score_game24, countdown.extract_expression, _same_expression),
    "humaneval": Verifier(code.score_humaneval, code.extract_code, _same_code),
}
"""Task name -> its verifier."""


def reward(completion: str, problem: Problem) -> float:
    """The task's reward of ``completion`` for ``problem`` (0.0 for non-string completions)."""
    if problem.task not in VERIFIERS:
        raise ValueError(f"reward: problem {problem.id!r} has unknown task {problem.task!r}; known: {sorted(VERIFIERS)}")
    if not isinstance(completion, str):
        return 0.0
    return float(VERIFIERS[problem.task].score(completion, problem.reference))


@dataclass
class Task:
    """A loaded task: its problems and its verifier."""

    name: str
    problems: list[Problem]
    verifier: Verifier

    def reward(self, completion: str, problem: Problem) -> float:
        """This task's verifier score of ``completion`` for ``problem`` (0.0 for non-string completions)."""
        if not isinstance(completion, str):
            return 0.0
        return float(self.verifier.score(completion, problem.reference))

    def __len__(self) -> int:
        return len(self.problems)


RewardFn = Callable[[str, Problem], "float | None"]


@dataclass(frozen=True)
class CompositeReward:
    """Weighted mean of reward functions ``fn(completion, problem) -> float | None``.

    A component that returns None is "not applicable" to this problem and is left out of both
    the sum and the total weight. When no component applies the reward is 0.0.
    """

    components: Sequence[tuple[RewardFn, float]]

    def __post_init__(self) -> None:
        if not self.components:
            raise ValueError("CompositeReward needs at least one (reward_fn, weight) pair, got none")
        for fn, weight in self.components:
            if not callable(fn) or not isinstance(weight, (int, float)) or weight < 0:
                raise ValueError(f"CompositeReward: each component must be (callable, weight >= 0), got ({fn!r}, {weight!r})")

    def __call__(self, completion: str, problem: Problem) -> float:
        total, weight_sum = 0.0, 0.0
        for fn, weight in self.components:
            value = fn(completion, problem)
            if value is None:
                continue
            total += weight * float(value)
            weight_sum += weight
        return total / weight_sum if weight_sum > 0 else 0.0


def format_component(spec: fmt.FormatSpec = fmt.R1_FORMAT) -> RewardFn:
    """`format_reward` with the reward-function signature, for use in `CompositeReward`."""

    def format_score(completion: str, problem: Problem) -> float:
        return fmt.format_reward(completion, spec)

    return format_score


# ---------------------------------------------------------------- reading rows


def _read_rows(path: Path) -> list[dict]:
    """Rows of a JSONL (optionally .gz), JSON list, CSV or parquet file."""
    name = path.name.lower()
    if name.endswith(".parquet"):
        import pandas as pd

        return pd.read_parquet(path).to_dict("records")
    opener = gzip.open if name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        if name.endswith((".csv", ".csv.gz")):
            return list(csv.DictReader(f))
        text = f.read()
    if name.endswith((".json", ".json.gz")) and text.lstrip().startswith("["):
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


_LOCAL_FILES = {
    ("gsm8k", "train"): "gsm8k/train.jsonl",
    ("gsm8k", "test"): "gsm8k/test.jsonl",
    ("math500", "test"): "math500/test.jsonl",
    ("countdown", "train"): "countdown/train.jsonl",
    ("countdown", "test"): "countdown/test.jsonl",
    ("game24", "test"): "game24/24.csv",
    ("humaneval", "test"): "humaneval/HumanEval.jsonl.gz",
}
_HF_IDS = {
    "gsm8k": ("openai/gsm8k", "main"),
    "math500": ("HuggingFaceH4/MATH-500", None),
    "countdown": ("Jiayi-Pan/Countdown-Tasks-3to4", None),
    "humaneval": ("openai/openai_humaneval", None),
}
_FILE_SUFFIX = re.compile(r"\.(jsonl|json|csv|parquet)(\.gz)?$", re.IGNORECASE)


def _rows_for(task: str, path: str | Path | None, split: str) -> list[dict]:
    """Rows from ``path`` (a file or a Hugging Face dataset id) or the default location."""
    if path is None:
        relative = _LOCAL_FILES.get((task, split))
        if relative and (DATA_DIR / relative).is_file():
            return _read_rows(DATA_DIR / relative)
        if task not in _HF_IDS:
            raise FileNotFoundError(
                f"load_task({task!r}, split={split!r}): no local file at {DATA_DIR / (relative or task)} and no "
                f"Hugging Face default for this task; pass path= to a local copy (see {DATA_DIR}/README.md)"
            )
        return _rows_from_hub(task, _HF_IDS[task][0], split)
    path_obj = Path(path)
    if path_obj.is_file():
        return _read_rows(path_obj)
    if _FILE_SUFFIX.search(str(path)) or path_obj.is_absolute() or str(path).startswith("."):
        raise FileNotFoundError(
            f"load_task({task!r}): data file {path_obj} does not exist; pass path= to an existing "
            f"JSONL/CSV/gzip file (local copies live in {DATA_DIR}) or a Hugging Face dataset id"
        )
    return _rows_from_hub(task, str(path), split)


def _rows_from_hub(task: str, dataset_id: str, split: str) -> list[dict]:
    """Rows of a Hugging Face dataset (needs network or the datasets cache)."""
    import datasets

    default_id, default_config = _HF_IDS.get(task, (None, None))
    config = default_config if dataset_id == default_id else None
    return list(datasets.load_dataset(dataset_id, config, split=split))


# ---------------------------------------------------------------- one loader per task


def _load_gsm8k(path=None, split="test") -> Task:
    problems = []
    for i, row in enumerate(_rows_for("gsm8k", path, split)):
        final = vmath.extract_hashes(row["answer"]) or ""
        problems.append(
            Problem(
                id=f"gsm8k/{split}/{i}",
                question=f"{row['question']}\n\n{MATH_INSTRUCTION}",
                reference=final.replace(",", ""),
                task="gsm8k",
                meta={"raw_question": row["question"], "solution": row["answer"]},
            )
        )
    return Task("gsm8k", problems, VERIFIERS["gsm8k"])


def _load_math500(path=None, split="test") -> Task:
    problems = []
    for i, row in enumerate(_rows_for("math500", path, split)):
        problems.append(
            Problem(
                id=row.get("unique_id") or f"math500/{split}/{i}",
                question=f"{row['problem']}\n\n{MATH_INSTRUCTION}",
                reference=row["answer"],
                task="math500",
                meta={"raw_question": row["problem"], **{k: row[k] for k in ("solution", "subject", "level") if k in row}},
            )
        )
    return Task("math500", problems, VERIFIERS["math500"])


def _countdown_question(nums: list[int], target: int, exactly_once: bool) -> str:
    rule = "each number exactly once" if exactly_once else "each number at most once"
    return f"Using the numbers {nums}, create an expression that equals {target}, {rule}.\n\n{COUNTDOWN_INSTRUCTION}"


def _load_countdown(path=None, split="test") -> Task:
    problems = []
    for i, row in enumerate(_rows_for("countdown", path, split)):
        nums, target = [int(n) for n in row["nums"]], int(row["target"])
        problems.append(
            Problem(
                id=f"countdown/{split}/{row.get('index', i)}",
                question=_countdown_question(nums, target, exactly_once=False),
                reference={"nums": nums, "target": target},
                task="countdown",
                meta={},
            )
        )
    return Task("countdown", problems, VERIFIERS["countdown"])


def _load_game24(path=None, split="test") -> Task:
    problems = []
    for i, row in enumerate(_rows_for("game24", path, split)):
        nums = [int(n) for n in str(row["Puzzles"]).split()]
        problems.append(
            Problem(
                id=f"game24/{row.get('Rank', i + 1)}",
                question=_countdown_question(nums, 24, exactly_once=True),
                reference={"nums": nums, "target": 24},
                task="game24",
                meta={"rank": int(row.get("Rank", i + 1)), "solved_rate": row.get("Solved rate")},
            )
        )
    return Task("game24", problems, VERIFIERS["game24"])


def _load_humaneval(path=None, split="test") -> Task:
    problems = []
    for row in _rows_for("humaneval", path, split):
        problems.append(
            Problem(
                id=row["task_id"],
                question=f"{CODE_INSTRUCTION}\n\n```python\n{row['prompt']}```",
                reference={"prompt": row["prompt"], "test": row["test"], "entry_point": row["entry_point"]},
                task="humaneval",
                meta={"canonical_solution": row["canonical_solution"], "raw_question": row["prompt"]},
            )
        )
    return Task("humaneval", problems, VERIFIERS["humaneval"])


TASKS: dict[str, Callable[..., Task]] = {
    "gsm8k": _load_gsm8k,
    "math500": _load_math500,
    "countdown": _load_countdown,
    "game24": _load_game24,
    "humaneval": _load_humaneval,
}
"""Task name -> loader ``(path=None, split="test") -> Task``."""


def load_task(name: str, path: str | Path | None = None, split: str = "test") -> Task:
    """Load a task's problems and verifier.

    ``path``: a local JSONL/CSV/gzip/parquet file or a Hugging Face dataset id; by default the
    copy in `DATA_DIR`, else the task's Hugging Face dataset. Raises ValueError for an unknown
    task and FileNotFoundError for a missing file, each naming the fix.
    """
    if name not in TASKS:
        raise ValueError(f"load_task: unknown task {name!r}; choose one of {sorted(TASKS)}")
    return TASKS[name](path=path, split=split)


# The embedded, generated task imports this module's types, so it registers itself last.
from verifiers import arithmetic  # noqa: E402

VERIFIERS["arithmetic"] = arithmetic.VERIFIER
TASKS["arithmetic"] = arithmetic.load_arithmetic
