"""What the command lines of the trainers beside GRPO share (scripts/train_dpo.py, train_rs_sft.py):
the task options and the TrainConfig parts that grow the trees (model, engine, search, loop), without
the parts of the GRPO/PPO update (`ROUND_TRAINER_SKIPS`), which these trainers do not use."""

from __future__ import annotations

import argparse
from pathlib import Path

from planner.logs import configure_logging
from rl.cli import (ArgumentParser, add_dataclass_arguments, dataclass_from_args, input_file, model_dir,
                    output_dir)
from rl.config import TREE_STRATEGIES, TrainConfig
from task_options import add_data_arguments, resolve_model_option, task_options
from verifiers import load_task

ROUND_TRAINER_SKIPS = ("algorithm", "learner", "value")
"""TrainConfig parts of the GRPO/PPO update, which these trainers do not use (each has its own lr and
learning step; the learner part keeps its defaults)."""


def short_options(prefix: str) -> tuple[str, ...]:
    """The options `--help` shows for a round trainer whose own config is under `--{prefix}.`."""
    return ("task", "task_path", "split", "limit", "model", "search.strategy",
            *(f"search.{name}.temperature" for name in TREE_STRATEGIES), "loop.iterations",
            "loop.prompts_per_iteration", "loop.output_dir", f"{prefix}.lr")


def add_task_arguments(parser: argparse.ArgumentParser) -> None:
    add_data_arguments(parser.add_argument_group("data"), split="train", task_default="arithmetic")
    run = parser.add_argument_group("run")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--verbose", action="store_true", help="the engines' INFO logs and the libraries' progress "
                                                            "bars too (default: warnings and errors only)")


def add_store_arguments(parser: argparse.ArgumentParser, model_help: str, output_help: str) -> None:
    """The options of a trainer that reads a tree store: --model, --store, --output_dir, --min_version."""
    parser.add_argument("--model", required=True, type=model_dir, help=model_help)
    parser.add_argument("--store", required=True, type=input_file,
                        help="the JSONL tree store to read (rl/tree_store.py)")
    parser.add_argument("--output_dir", required=True, type=output_dir, help=output_help)
    parser.add_argument("--min_version", type=int, default=None, help="only trees of policy versions >= this")


def online_parser(doc: str, method_config, prefix: str) -> argparse.ArgumentParser:
    """Task options, the tree-growing TrainConfig options, and `method_config`'s options under `--{prefix}.`."""
    parser = ArgumentParser(description=doc, short_options=short_options(prefix))
    add_task_arguments(parser)
    add_dataclass_arguments(parser, TrainConfig, skip=ROUND_TRAINER_SKIPS)
    add_dataclass_arguments(parser, method_config, prefix=f"{prefix}.")
    return parser


def online_configs(parser, args, method_config, prefix: str):
    """(TrainConfig, the method's config, the task's problems, the task) from parsed options; bad input ends
    the program with one clear error."""
    try:
        config = dataclass_from_args(TrainConfig, args)
        method = dataclass_from_args(method_config, args, prefix=f"{prefix}.")
        task = load_task(args.task, args.task_path, split=args.split, **task_options(args))  # data before the model
        config.model = resolve_model_option(config.model)  # a name such as "smollm2", or a save_pretrained folder
    except (ValueError, FileNotFoundError, ImportError) as error:
        parser.error(str(error))
    problems = task.problems[: args.limit] if args.limit else task.problems
    return config, method, problems, task


def run_online(argv, doc: str, method_config, prefix: str, trainer_class, report) -> int:
    """Parse, train `trainer_class(train_config, method_config, problems, reward, extract=)` for its rounds,
    save the policy to <output_dir>/policy and print `report(history)`."""

    parser = online_parser(doc, method_config, prefix)
    args = parser.parse_args(argv)
    configure_logging(args.verbose)
    config, method, problems, task = online_configs(parser, args, method_config, prefix)
    trainer = trainer_class(config, method, problems, task.reward, extract=task.verifier.extract)
    history = trainer.run(progress=not args.quiet)
    print(f"{len(history)} rounds; {report(history)}; policy in {trainer.save_policy()}")
    return 0
