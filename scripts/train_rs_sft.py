"""Rejection-sampling SFT from search trees (ReST / RAFT): grow trees with the current policy, keep each
prompt's verified best leaves (a cap per prompt), SFT for a round on them, repeat (rl/rs_sft.py).

    python scripts/train_rs_sft.py --model runs/demo/sft --task arithmetic --iterations 10 --strategy mcts \
        --mcts.num_simulations 8 --mcts.step_delimiter $'\n' --rs.max_per_prompt 4 --tree_store runs/rs/trees.jsonl

The search settings are the planner's own (--best_of_n.*, --beam.*, --dvts.*, --mcts.*: the one named by
--strategy grows the trees). Metrics per round (the data kept: kept_responses, prompts_with_kept,
kept_prompt_share, kept_tokens; the SFT loss; reward and pass rate of the search) go to
<output_dir>/metrics.jsonl, metrics.csv and tensorboard/; the trained policy to <output_dir>/policy.
"""

from __future__ import annotations

import sys

from tree_trainer_cli import run_online


def main(argv: list[str] | None = None) -> int:
    from rl.rs_sft import RejectionSamplingSFT, RSSFTConfig

    return run_online(argv, __doc__, RSSFTConfig, "rs", RejectionSamplingSFT,
                      lambda history: f"responses kept per round {[m['kept_responses'] for m in history]}")


if __name__ == "__main__":
    sys.exit(main())
