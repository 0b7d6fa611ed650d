"""Compute-scaling curves: accuracy against generated tokens and FLOPs per strategy, size and seed.

    python scripts/scaling.py --model smollm2 --backend vllm --task gsm8k --limit 50 \
        --strategies best_of_n budget_forcing --size best_of_n=1,2,4,8,16 \
        --size budget_forcing=32,64,128,256 --seeds 0 1 --max_tokens 256 --out runs/scaling

Writes results.csv (one row per strategy x size x seed), problems.csv (one row per problem of each),
summary.json (seed means with 95% bootstrap intervals over problems), accuracy_vs_tokens.png and
accuracy_vs_flops.png into --out. Everything here can be done from Python with `planner.scaling.run`
(Snell et al. 2024's compute-optimal scaling curves); see that module for what a strategy's "size"
is and how best-of-N is sub-sampled from one pass at the largest N.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

from planner.logs import configure_logging
from planner.scaling_report import SIZE_KNOBS, curve
from rl.cli import ArgumentParser, add_dataclass_arguments, at_least, dataclass_from_args, output_dir
from task_options import add_data_arguments, task_options

SHORT_OPTIONS = ("task", "task_path", "split", "limit", "model", "backend", "strategies", "sizes", "size", "seeds",
                 "max_tokens", "temperature", "out")
"""The options `--help` shows; `--help-all` shows every one."""
DATA_FIELDS = ("task", "task_path", "split", "limit")
"""ScalingConfig fields given by the data options every script shares (task_options.add_data_arguments)."""



def _size_epilog() -> str:
    from planner.scaling import DEFAULT_SIZES

    lines = ["size of each strategy (its size knob) and its default sizes:"]
    lines += [f"  {name}: {knob}, default {','.join(map(str, DEFAULT_SIZES[name]))}"
              for name, knob in SIZE_KNOBS.items()]
    lines.append("  (budget_forcing also sets min_thinking_tokens = round(forcing_min_fraction * size))")
    from planner.strategies import options_help

    return "\n".join(lines) + "\n\n" + options_help("--set STRATEGY.NAME=VALUE")


def build_parser() -> argparse.ArgumentParser:
    from planner.scaling import ScalingConfig

    parser = ArgumentParser(description=__doc__.split("\n\n")[0], epilog=_size_epilog(), short_options=SHORT_OPTIONS)
    add_data_arguments(parser.add_argument_group("data"), split="test", task_default=ScalingConfig.task)
    parser.add_argument("--out", required=True, type=output_dir,
                        help="output folder for results.csv, problems.csv, summary.json and the PNGs")
    parser.add_argument("--sizes", type=at_least(1), nargs="+", metavar="S",
                        help="sizes for every strategy that has no --size of its own")
    parser.add_argument("--size", action="append", default=[], metavar="STRATEGY=S1,S2,...",
                        help="sizes of one strategy, e.g. best_of_n=1,2,4,8,16 (repeatable)")
    parser.add_argument("--set", action="append", default=[], metavar="STRATEGY.NAME=VALUE",
                        help="a strategy config option, e.g. beam.beam_width=2; VALUE is a Python literal or a string")
    parser.add_argument("--band", choices=["interval", "minmax", "std"], default="interval",
                        help="band around the seed mean in the plots: the 95%% bootstrap interval over problems, "
                             "min-max or +-std over seeds (default: interval)")
    parser.add_argument("--verbose", action="store_true", help="the engines' INFO logs and the libraries' progress "
                                                               "bars too (default: warnings and errors only)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    add_dataclass_arguments(parser, ScalingConfig, skip=("sizes", "options", "progress", "task_options", *DATA_FIELDS))
    return parser


def _sizes(args, parser, strategies: list[str]) -> dict[str, list[int]]:
    sizes = {name: list(args.sizes) for name in strategies} if args.sizes else {}
    for item in args.size:
        name, sep, text = item.partition("=")
        try:
            values = [int(v) for v in text.split(",") if v.strip()]
        except ValueError:
            values = []
        if not sep or not values:
            parser.error(f"--size expects STRATEGY=S1,S2,... with integer sizes; got {item!r}")
        sizes[name] = values
    return sizes


def _options(pairs: list[str], parser) -> dict[str, dict]:
    options: dict[str, dict] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        strategy, dot, name = key.partition(".")
        if not sep or not dot or not strategy or not name:
            parser.error(f"--set expects STRATEGY.NAME=VALUE; got {pair!r}")
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = text
        options.setdefault(strategy, {})[name] = value
    return options


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.verbose)

    from planner.scaling import ScalingConfig, load_inputs, run

    strategies = getattr(args, "strategies", ScalingConfig().strategies)
    try:
        config = dataclass_from_args(ScalingConfig, args, sizes=_sizes(args, parser, strategies),
                                     options=_options(args.set, parser), progress=not args.quiet,
                                     task_options=task_options(args),
                                     **{name: getattr(args, name) for name in DATA_FIELDS})
        inputs = load_inputs(config)
    except (ValueError, FileNotFoundError, TypeError, ImportError) as error:
        parser.error(str(error))
    rows = run(config, args.out, inputs=inputs, band=args.band)

    print(f"{'strategy':>16} {'size':>7} {'accuracy':>9} {'95% interval':>14} {'tokens/problem':>15} "
          f"{'FLOPs/problem':>14}")
    for strategy in dict.fromkeys(row["strategy"] for row in rows):  # with --votes, best_of_n_<rule> too
        for p in curve(rows, strategy):
            interval = f"{p['accuracy_low']:.3f}-{p['accuracy_high']:.3f}"
            print(f"{strategy:>16} {p['size']:>7} {p['accuracy_mean']:>9.3f} {interval:>14} "
                  f"{p['generated_tokens_per_problem_mean']:>15.1f} {p['flops_per_problem_mean']:>14.3g}")
    print(f"wrote {Path(args.out) / 'results.csv'}, problems.csv, summary.json and the PNGs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
