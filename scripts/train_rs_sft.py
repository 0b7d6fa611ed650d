"""Rejection-sampling SFT from search trees (ReST / RAFT): grow trees with the current policy, keep each
prompt's verified best leaves (a cap per prompt), SFT for a round on them, repeat (rl/rs_sft.py).

    python scripts/train_rs_sft.py --model runs/demo/sft --task arithmetic --loop.iterations 10 \
        --search.strategy mcts --search.mcts.num_simulations 8 --search.mcts.step_delimiter $'\n' \
        --rs.max_per_prompt 4 --loop.tree_store runs/rs/trees.jsonl

The search settings are the planner's own (--search.best_of_n.*, --search.beam.*, --search.dvts.*,
--search.mcts.*: the one named by --search.strategy grows the trees). Metrics per round (the data kept:
kept_responses, prompts_with_kept, kept_prompt_share, kept_tokens; the SFT loss; reward and pass rate of
the search) go to <loop.output_dir>/metrics.jsonl, metrics.csv and tensorboard/; the trained policy to
<loop.output_dir>/policy.
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
