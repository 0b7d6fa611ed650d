r"""Search-guided RL: grow search trees with the current policy and critic, train both from them.

    python scripts/train.py --model runs/demo/sft --task arithmetic --loop.iterations 20 \
        --search.strategy mcts --search.mcts.num_simulations 8 --search.mcts.step_delimiter $'\n'
    python scripts/train.py --model runs/demo/sft --task arithmetic --loop.output_dir runs/x --resume
    python scripts/train.py --model smollm2 --task custom --task_path mine.jsonl --preset cpu --loop.iterations 2
    torchrun --nproc_per_node 2 scripts/train.py --model runs/demo/sft --task arithmetic   # 2 learner ranks

Every TrainConfig option can be given, named by its part: --engine.*, --search.*, --algorithm.*,
--learner.*, --value.*, --loop.* (rl/config.py). The search settings are the planner's own
(--search.best_of_n.*, --search.beam.*, --search.dvts.*, --search.mcts.*: the one named by
--search.strategy is used, its temperature included). `--resume` continues a killed run from its
newest valid checkpoint in --loop.output_dir (rl/checkpoint.py). Metrics: <output_dir>/metrics.jsonl,
metrics.csv and tensorboard/; every key, its meaning and unit, and what the progress bar shows:
docs/metrics.md.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from planner.logs import configure_logging
from rl.checkpoint import CheckpointError
from rl.cli import ArgumentParser, add_dataclass_arguments, dataclass_from_args
from rl.config import TREE_STRATEGIES, TrainConfig
from rl.presets import PRESETS, preset_config
from task_options import add_data_arguments, resolve_model_option, task_options
from verifiers import load_task


SHORT_OPTIONS = ("task", "task_path", "split", "limit", "resume", "preset", "model", "engine.backend",
                 "search.strategy",
                 *(f"search.{name}.temperature" for name in TREE_STRATEGIES), "algorithm.estimator", "learner.lr",
                 "loop.iterations", "loop.prompts_per_iteration", "loop.output_dir")
"""The options `--help` shows; `--help-all` shows every one."""


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(description=__doc__, short_options=SHORT_OPTIONS)
    data = parser.add_argument_group("data")
    add_data_arguments(data, split="train", task_required=True)
    run = parser.add_argument_group("run")
    run.add_argument("--resume", action="store_true", help="continue from the newest valid checkpoint in "
                                                           "<loop.output_dir>/checkpoints (an error if there is none)")
    run.add_argument("--preset", choices=sorted(PRESETS), default=None,
                     help="start from a preset's settings (rl/presets.py; cpu: GRPO on best-of-4 groups for a "
                          "~135M model on a few cores); the options given here override them")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--verbose", action="store_true", help="the engines' INFO logs and the libraries' progress "
                                                            "bars too (default: warnings and errors only)")
    add_dataclass_arguments(parser, TrainConfig)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from rl.trainer import SearchTrainer

    configure_logging(args.verbose)
    try:
        defaults = preset_config(args.preset, model="") if args.preset else None
        config = dataclass_from_args(TrainConfig, args, defaults=defaults)
        task = load_task(args.task, args.task_path, split=args.split, **task_options(args))  # data before the model
        config.model = resolve_model_option(config.model)
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
              f"metrics in {Path(config.loop.output_dir) / 'metrics.jsonl'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
