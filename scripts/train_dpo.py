"""DPO from search trees: sibling-step pairs (Step-DPO style) and whole-response pairs (rl/dpo.py).

Online (iterative: fresh trees from the current policy every round, pairs, DPO, push, repeat):
    python scripts/train_dpo.py online --model runs/demo/sft --task arithmetic --loop.iterations 10 \
        --search.strategy mcts --search.mcts.num_simulations 8 --search.mcts.step_delimiter $'\n' \
        --dpo.beta 0.1 --dpo.loss_type sigmoid
Offline (the trees of a tree store, written by any trainer with --loop.tree_store):
    python scripts/train_dpo.py offline --model runs/demo/sft --store runs/train/trees.jsonl --output_dir runs/dpo

`python scripts/train_dpo.py online --help` and `... offline --help` list every option of each mode.
Online metrics go to <loop.output_dir>/metrics.jsonl, metrics.csv and tensorboard/, the trained policy to
<output_dir>/policy; offline, the trained policy goes to --output_dir.
"""

from __future__ import annotations

import argparse
import sys

from rl.cli import ArgumentParser, add_dataclass_arguments, at_least, dataclass_from_args
from tree_trainer_cli import add_store_arguments, run_online


def offline_parser(doc: str) -> argparse.ArgumentParser:
    from rl.dpo import DPOConfig

    parser = ArgumentParser(description=doc)
    add_store_arguments(parser, "the policy folder to train (and the reference with --dpo.reference model)",
                        "where the trained policy is saved")
    parser.add_argument("--max_version", type=int, default=None, help="only trees of policy versions <= this")
    parser.add_argument("--device", default="cpu", help='"cpu", "cuda" or "auto" (default: cpu)')
    parser.add_argument("--threads", type=at_least(1), default=1, help="torch CPU threads (default: 1)")
    add_dataclass_arguments(parser, DPOConfig, prefix="dpo.")
    return parser


def main(argv: list[str] | None = None) -> int:
    from rl.dpo import DPOConfig

    from rl.cli import ArgumentParser

    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if not argv or argv[0] not in ("online", "offline"):
        ArgumentParser().error(f"the first argument is the mode, online or offline; got {argv[0] if argv else None!r}")
    mode, rest = argv[0], argv[1:]
    if mode == "online":
        from rl.dpo import OnlineDPO

        return run_online(rest, __doc__, DPOConfig, "dpo", OnlineDPO,
                          lambda history: f"pairs per round {[m['pairs'] for m in history]}")
    from rl.dpo import train_dpo_offline

    parser = offline_parser(__doc__)
    args = parser.parse_args(rest)
    try:
        dpo = dataclass_from_args(DPOConfig, args, prefix="dpo.")
        result = train_dpo_offline(args.model, args.store, dpo, args.output_dir, min_version=args.min_version,
                                   max_version=args.max_version, device=args.device, threads=args.threads)
    except (ValueError, FileNotFoundError) as error:
        parser.error(str(error))
    print(f"DPO on {result.metrics['pairs']} pairs from {result.metrics['trees']} trees: loss "
          f"{result.metrics.get('dpo_loss', float('nan')):.4f}; policy in {result.policy_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
