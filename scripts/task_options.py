"""The custom task's options on the command line, shared by the scripts that load a task.

``--task custom --task_path qa.jsonl`` reads your own question/answer file (docs/data.md); these
options pick its fields and answer kind. They are given to `verifiers.load_task` only when set,
so another task given one of them fails with load_task's error naming the task's own options.
"""

from __future__ import annotations

import argparse

from verifiers.answer_kinds import ANSWER_KINDS

OPTIONS = {
    "question_field": "custom task: the field (CSV column) holding each question (default: question)",
    "answer_field": "custom task: the field (CSV column) holding each reference answer, a number or text "
                    "(default: answer)",
    "answer_kind": "custom task: how answers are graded: auto (a number when the answer reads as one, else math), "
                   "number, math (LaTeX, math-verify) or text (default: auto)",
    "instruction": "custom task: text appended to each question (default: put the final answer in \\boxed{}; "
                   "'' for none)",
}


def add_task_options(group) -> None:
    """Add --question_field, --answer_field, --answer_kind and --instruction to `group`."""
    for name, help_text in OPTIONS.items():
        group.add_argument(f"--{name}", default=argparse.SUPPRESS, help=help_text,
                           choices=list(ANSWER_KINDS) if name == "answer_kind" else None)


def task_options(args: argparse.Namespace) -> dict[str, str]:
    """The options given on the command line, as keyword arguments of `verifiers.load_task`."""
    return {name: getattr(args, name) for name in OPTIONS if hasattr(args, name)}
