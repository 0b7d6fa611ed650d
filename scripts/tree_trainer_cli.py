"""What the command lines of the trainers beside GRPO share (scripts/train_dpo.py, train_rs_sft.py):
the task options and the TrainConfig options that grow the trees, without the GRPO/PPO learner's own."""

from __future__ import annotations

import argparse
from pathlib import Path

from planner.logs import configure_logging
from rl.cli import (ArgumentParser, add_dataclass_arguments, dataclass_from_args, input_file, model_dir,
                    output_dir)
from task_options import add_task_options, task_options
from verifiers import load_task

GRPO_ONLY = ("estimator", "gamma", "lam", "lr", "epochs", "minibatches", "old_logprobs", "max_grad_norm", "loss",
             "kl_placement", "kl_reward_coef", "kl_target", "drop_zero_variance_groups", "critic", "reference_device",
             "micro_batch_tokens", "tis_cap", "engine_sleep", "checkpoint_every", "checkpoints_kept",
             "debug")
"""TrainConfig fields of the GRPO/PPO learner, which these trainers do not use (each has its own lr)."""


def add_task_arguments(parser: argparse.ArgumentParser) -> None:
    from rl.cli import at_least

    data = parser.add_argument_group("data")
    data.add_argument("--task", default="arithmetic", help="task name (verifiers.TASKS): arithmetic, gsm8k, math500, "
                                                           "countdown, game24, humaneval, custom (your own file: "
                                                           "docs/data.md) (default: arithmetic)")
    data.add_argument("--task_path", default=None, help="local file of the task (default: ../shared/data)")
    data.add_argument("--split", default="train", help="dataset split (default: train)")
    data.add_argument("--limit", type=at_least(1), default=None, help="use only the first N problems")
    add_task_options(data)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--verbose", action="store_true", help="the engines' INFO logs and the libraries' progress "
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
    from rl.config import TrainConfig

    parser = ArgumentParser(description=doc)
    add_task_arguments(parser)
    add_dataclass_arguments(parser, TrainConfig, skip=GRPO_ONLY)
    add_dataclass_arguments(parser, method_config, prefix=f"{prefix}.")
    return parser


def online_configs(parser, args, method_config, prefix: str):
    """(TrainConfig, the method's config, the task's problems, the task) from parsed options; bad input ends
    the program with one clear error."""
    from rl.config import TrainConfig

    try:
        config = dataclass_from_args(TrainConfig, args)
        method = dataclass_from_args(method_config, args, prefix=f"{prefix}.")
        task = load_task(args.task, args.task_path, split=args.split, **task_options(args))  # data before the model
        if not config.model or not (Path(config.model) / "config.json").is_file():
            raise FileNotFoundError(f"--model {config.model!r} is not a model folder (no config.json); "
                                    "pass a save_pretrained folder, e.g. the demo's runs/demo/sft")
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
