"""Train an outcome reward model with a Bradley-Terry loss on correct-vs-incorrect response pairs from the
trees of a tree store (rl/reward_model.py); the folder loads as a planner scorer for best-of-N reranking
(`planner.prm_scorers.load_scorer(folder)`).

    python scripts/train_reward_model.py --model runs/demo/sft --store runs/train/trees.jsonl --output_dir runs/orm
"""

from __future__ import annotations

import sys

from rl.cli import ArgumentParser, add_dataclass_arguments, dataclass_from_args
from rl.tree_store import TreeStore
from tree_trainer_cli import add_store_arguments


def main(argv: list[str] | None = None) -> int:
    from rl.reward_model import RewardModelConfig

    parser = ArgumentParser(description=__doc__)
    add_store_arguments(parser, "the policy folder whose trunk the reward model starts from",
                        "where the reward model folder is saved")
    parser.add_argument("--max_version", type=int, default=None, help="only trees of policy versions <= this")
    add_dataclass_arguments(parser, RewardModelConfig)
    args = parser.parse_args(argv)
    from rl.reward_model import train_reward_model

    try:
        config = dataclass_from_args(RewardModelConfig, args)
        trees = [s.tree for s in TreeStore(args.store).load(args.min_version, args.max_version)]
        result = train_reward_model(args.model, trees, config, args.output_dir)
    except (ValueError, FileNotFoundError) as error:
        parser.error(str(error))
    last = result.history[-1]
    print(f"{result.train_pairs} training pairs: loss {last['bt_loss']:.4f}, accuracy {last['accuracy']:.3f}; held-out "
          f"accuracy {last.get('heldout_accuracy', float('nan')):.3f} on {result.heldout_pairs} pairs; "
          f"reward model in {result.folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
