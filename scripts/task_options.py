"""The data options on the command line, the same names and defaults in every script that loads a task.

`add_data_arguments` adds --task, --task_path, --split and --limit. The split's default says what a
script is for: "train" in the training scripts, "test" in the evaluation scripts (solve, scaling),
and each script's --help says which. ``--task custom --task_path qa.jsonl`` reads your own
question/answer file (docs/data.md); the custom task's options pick its fields and answer kind. They
are given to `verifiers.load_task` only when set, so another task given one of them fails with
load_task's error naming the task's own options.
"""

from __future__ import annotations

import argparse

from rl.cli import at_least
from verifiers.answer_kinds import ANSWER_KINDS

TASK_HELP = ("task name (verifiers.TASKS): arithmetic, gsm8k, math500, countdown, game24, humaneval, custom "
             "(your own file: docs/data.md)")

OPTIONS = {
    "question_field": "custom task: the field (CSV column) holding each question (default: question)",
    "answer_field": "custom task: the field (CSV column) holding each reference answer, a number or text "
                    "(default: answer)",
    "answer_kind": "custom task: how answers are graded: auto (a number when the answer reads as one, else math), "
                   "number, math (LaTeX, math-verify) or text (default: auto)",
    "instruction": "custom task: text appended to each question (default: put the final answer in \\boxed{}; "
                   "'' for none)",
}


def add_data_arguments(group, split: str, task_default: str | None = None, task_required: bool = False,
                       task_group=None) -> None:
    """--task (in `task_group` when given, e.g. a mutually exclusive one), --task_path, --split (default `split`:
    "train" to train, "test" to evaluate), --limit and the custom task's options, in `group`."""
    purpose = "training" if split == "train" else "evaluation"
    (task_group or group).add_argument("--task", required=task_required, default=task_default,
                                       help=TASK_HELP + ("" if task_default is None else f" (default: {task_default})"))
    group.add_argument("--task_path", default=None, help="the task's data file: a local JSONL/CSV file, or a Hugging "
                                                         "Face dataset id (default: the task's copy in ../shared/data)")
    group.add_argument("--split", default=split,
                       help=f"dataset split (default: {split}, as in every {purpose} script)")
    group.add_argument("--limit", type=at_least(1), default=None, help="use only the first N problems (default: all)")
    add_task_options(group)


def resolve_model_option(model: str) -> str:
    """--model's folder: a name of planner.policy.local_models.NAMED_MODELS (converted once) or a save_pretrained
    folder, as in every script; a bad one raises FileNotFoundError naming --model."""
    from planner.policy.local_models import resolve_model  # imports torch

    try:
        return str(resolve_model(model))
    except FileNotFoundError as error:
        raise FileNotFoundError(f"--model: {error}") from None


def add_task_options(group) -> None:
    """Add --question_field, --answer_field, --answer_kind and --instruction to `group`."""
    for name, help_text in OPTIONS.items():
        group.add_argument(f"--{name}", default=argparse.SUPPRESS, help=help_text,
                           choices=list(ANSWER_KINDS) if name == "answer_kind" else None)


def task_options(args: argparse.Namespace) -> dict[str, str]:
    """The options given on the command line, as keyword arguments of `verifiers.load_task`."""
    return {name: getattr(args, name) for name in OPTIONS if hasattr(args, name)}
