"""Search-guided RL: grow search trees with the current policy and critic, train both from them.

    python scripts/train.py --model runs/demo/sft --task arithmetic --iterations 20 --strategy mcts \
        --mcts.num_simulations 8 --mcts.step_delimiter $'\n'
    python scripts/train.py --model runs/demo/sft --task arithmetic --output_dir runs/x --resume
    torchrun --nproc_per_node 2 scripts/train.py --model runs/demo/sft --task arithmetic   # 2 learner ranks

Every TrainConfig option below can be given; the search settings are the planner's own
(--best_of_n.*, --beam.*, --dvts.*, --mcts.*: the one named by --strategy is used). `--resume`
continues a killed run from its newest valid checkpoint in --output_dir (rl/checkpoint.py). Metrics:
<output_dir>/metrics.jsonl, metrics.csv and tensorboard/; every key, its meaning and unit, and what the
progress bar shows: docs/metrics.md.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from planner.logs import configure_logging
from rl.checkpoint import CheckpointError
from rl.cli import ArgumentParser, add_dataclass_arguments, at_least, dataclass_from_args
from task_options import add_task_options, task_options
from verifiers import load_task


def build_parser() -> argparse.ArgumentParser:
    from rl.config import TrainConfig

    parser = ArgumentParser(description=__doc__)
    data = parser.add_argument_group("data")
    data.add_argument("--task", required=True, help="task name (verifiers.TASKS): arithmetic, gsm8k, math500, "
                                                    "countdown, game24, humaneval, custom (your own file: "
                                                    "docs/data.md)")
    data.add_argument("--task_path", default=None, help="local file of the task (default: ../shared/data)")
    data.add_argument("--split", default="train", help="dataset split (default: train)")
    data.add_argument("--limit", type=at_least(1), default=None, help="use only the first N problems")
    add_task_options(data)
    parser.add_argument("--resume", action="store_true", help="continue from the newest valid checkpoint in "
                                                           "<output_dir>/checkpoints (an error if there is none)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--verbose", action="store_true", help="the engines' INFO logs and the libraries' progress "
                                                               "bars too (default: warnings and errors only)")
    parser.add_argument("--replicas", dest="engine_replicas", type=at_least(1), default=argparse.SUPPRESS, metavar="N",
                        help="the same as --engine_replicas (below): serving engines, N > 1 = an engine pool on Ray")
    add_dataclass_arguments(parser, TrainConfig)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from planner.policy.local_models import resolve_model
    from rl.config import TrainConfig
    from rl.trainer import SearchTrainer

    configure_logging(args.verbose)
    try:
        config = dataclass_from_args(TrainConfig, args)
        task = load_task(args.task, args.task_path, split=args.split, **task_options(args))  # data before the model
        config.model = str(resolve_model(config.model))
    except (ValueError, FileNotFoundError, ImportError) as error:
        parser.error(str(error))
    problems = task.problems[: args.limit] if args.limit else task.problems
    logging.getLogger("rl.checkpoint").setLevel(logging.INFO)  # the line naming the checkpoint --resume takes
    try:
        trainer = SearchTrainer(config, problems, task.reward, extract=task.verifier.extract, resume=args.resume)
    except CheckpointError as error:  # nothing (valid) to resume: one line, no traceback
        parser.exit(2, f"{parser.prog}: error: --resume: {error}\n")
    history = trainer.run(progress=not args.quiet)
    from rl import distributed
    if history and distributed.is_main():
        last = history[-1]
        print(f"iteration {last['iteration']}: reward {last['reward_mean']:.3f}, pass rate {last['pass_rate']:.3f}; "
              f"metrics in {Path(config.output_dir) / 'metrics.jsonl'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
