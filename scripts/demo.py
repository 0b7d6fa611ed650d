"""The whole loop on a CPU in the RLVR setting: cold-start SFT on a fixed gold budget -> scaling curves ->
search-guided RL (MCTS trees valued by the loop's own value, which trains on the trees' verified leaves;
the policy trains on the trees) -> scaling curves again and the values graded -> runs/demo/report.md.

    python scripts/demo.py                   # the full demo
    python scripts/demo.py --value teacher   # searches valued by a teacher trained beyond the gold budget
    python scripts/demo.py --tiny            # every stage at a tiny size (the smoke test)
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from lab.recipe import TINY, DemoConfig, run_demo
from planner.logs import configure_logging
from rl.cli import ArgumentParser, add_dataclass_arguments, dataclass_from_args


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--tiny", action="store_true", help="every stage at the smoke-test size (TINY)")
    parser.add_argument("--verbose", action="store_true", help="the engines' INFO logs and the libraries' progress "
                                                               "bars too (default: one progress bar per stage, "
                                                               "warnings and errors)")
    add_dataclass_arguments(parser, DemoConfig)
    args = parser.parse_args(argv)
    configure_logging(args.verbose)
    base = TINY if args.tiny else DemoConfig()
    try:
        config = dataclass_from_args(DemoConfig, args, **{k: v for k, v in dataclasses.asdict(base).items()
                                                          if k not in vars(args) and k != "verbose"})
    except ValueError as error:
        parser.error(str(error))
    summary = run_demo(config)
    out = Path(config.output_dir)
    print(f"\npass@1 {summary['pass@1_before_rl']:.3f} -> {summary['pass@1_after_rl']:.3f} "
          f"({summary['rl_gain_points']:+.1f} points) in {summary['seconds']:.0f} s; report: {out / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
