"""An RL learner update of the demo's size with the value critic on the policy's trunk, on a small verifier's,
and with no critic, side by side (`CriticConfig.model`).

    .venv/bin/python scripts/bench_critic_trunk.py                  # cold start and verifier first (~3-5 min)
    .venv/bin/python scripts/bench_critic_trunk.py --model runs/demo/sft --verifier runs/demo/verifier --no-doc

The critic is a second model: one forward over the whole batch for its old values, then a forward and
backward per minibatch. On the policy's trunk it costs more than the policy's own update, since the policy
reads its old log-probabilities from the engine. One batch of the demo's RL trees is grown once (32
problems, MCTS with 8 simulations of 4 candidate steps at temperature 1), then the demo's learner
update (GRPO, 4 minibatches of whole trees, engine log-probabilities, packed trees, 2 torch threads as
`DemoConfig.learner_threads`) runs on it with each critic, alternating, `--repeats` times each, each
learner from the same starting weights. Reported: median wall seconds of an update and their ratios. Run it
on an otherwise idle machine.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import replace
from pathlib import Path

from bench_packing import grow_demo_trees, tree_batch_arguments

from bench_learner_threads import median_update_seconds
from benchdoc import machine_line, update_section
from planner.logs import configure_logging

THREADS = 2
"""Torch threads of every update (the demo's `learner_threads`)."""


def main() -> None:
    parser = tree_batch_arguments(__doc__, "critic")
    parser.add_argument("--verifier", help="the demo's verifier folder (default: lab.verifier_lm first, ~1.5 min)")
    args = parser.parse_args()

    from rl.batch import batch_from_trees
    from rl.config import CriticConfig
    from rl.learner import Learner
    from rl.runtime import torch_settings
    from lab.verifier_lm import train_verifier_lm

    configure_logging(False)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-critic-") as tmp, torch_settings(threads=1):
        config, trainer, trees = grow_demo_trees(Path(tmp), args.model, args.prompts, candidates=4)
        trainer.engine.close()  # the engine's process would otherwise share the cores being measured
        batch = batch_from_trees(trees, trainer.pad_id, pack_tokens=config.learner.pack_tokens)
        verifier = args.verifier or str(train_verifier_lm(Path(tmp) / "verifier", progress=False).model_dir)
        critics = {"policy's trunk": CriticConfig(enabled=True, lr=1e-3),
                   "verifier's trunk": CriticConfig(enabled=True, lr=1e-3, model=verifier),
                   "no critic": CriticConfig(enabled=False)}
        learners = {name: (Learner(replace(config, value=replace(config.value, critic=critic))), THREADS)
                    for name, critic in critics.items()}  # the same starting weights
        parameters = {name: sum(p.numel() for p in learner.critic.model.parameters()) if learner.critic else 0
                      for name, (learner, _) in learners.items()}
        median = median_update_seconds(learners, batch, args.repeats)
    base = median["policy's trunk"]
    command = "".join(f" --{k} {v}" for k, v in (("model", args.model), ("verifier", args.verifier)) if v)
    body = "\n".join([
        f"Command: `.venv/bin/python scripts/bench_critic_trunk.py{command}` "
        f"({(time.perf_counter() - began) / 60:.1f} min).",
        "", machine_line(), "",
        f"The demo's RL trees: {args.prompts} arithmetic problems, MCTS with 8 simulations of 4 candidate steps at "
        f"temperature 1 from the demo's cold-start model ({len(batch)} root-to-leaf rows, packed). The demo's learner "
        f"update (GRPO, 4 minibatches of whole trees, engine log-probabilities, {THREADS} torch threads) with the value "
        f"critic on the policy's trunk, on the verifier's, and without a critic, alternating; median wall seconds of "
        f"{args.repeats} updates each, the engine closed (in training it waits during the update).", "",
        "| critic | critic parameters | update wall s (policy and critic) | vs the policy's trunk |",
        "|---|---:|---:|---:|",
        *[f"| {name} | {parameters[name]:,} | {median[name]:.2f} | {median[name] / base:.2f}x |" for name in critics],
        ""])
    print(body)
    if not args.no_doc:
        print(f"written to {update_section('Critic trunk', body)}")


if __name__ == "__main__":
    main()
