"""The demo's RL learner update on 1 torch thread against 2, side by side (`TrainConfig.learner.threads`).

    .venv/bin/python scripts/bench_learner_threads.py                  # cold start first (~2-4 min)
    .venv/bin/python scripts/bench_learner_threads.py --model runs/demo/sft --no-doc

Search and update take turns in the trainer, so while the update runs the engine waits and its core is
idle. One batch of the demo's RL trees is grown once (32 problems, MCTS with 8 simulations of 4
candidate steps, the demo's defaults), then the demo's learner update (GRPO, 4 minibatches of whole
trees, engine log-probabilities, the value critic trained on node values, packed trees) runs on it
with each thread count, alternating, `--repeats` times each, every update from the same starting
weights. Reported: median wall seconds of an update and their ratio. Run it on an otherwise idle
machine: with the other core busy, two threads can be slower than one.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from bench_packing import grow_demo_trees, tree_batch_arguments

from benchdoc import machine_line, update_section
from planner.logs import configure_logging

THREADS = (1, 2)


def median_update_seconds(learners: dict, batch, repeats: int) -> dict:
    """{name: median wall seconds of an update on `batch`} for `learners` ({name: (learner, torch threads)}),
    alternating between them `repeats` times, so that drift of the machine reaches each alike."""
    from tqdm import tqdm

    from planner.policy.scoped import torch_threads

    seconds = {name: [] for name in learners}
    for r in tqdm(range(repeats), desc="updates"):
        for name, (learner, threads) in learners.items():
            with torch_threads(threads):
                start = time.perf_counter()
                learner.update(batch, iteration=r)
                seconds[name].append(time.perf_counter() - start)
    return {name: statistics.median(s) for name, s in seconds.items()}


def main() -> None:
    args = tree_batch_arguments(__doc__, "thread count").parse_args()

    from rl.batch import batch_from_trees
    from rl.learner import Learner
    from rl.runtime import torch_settings

    configure_logging(False)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-threads-") as tmp, torch_settings(threads=1):
        config, trainer, trees = grow_demo_trees(Path(tmp), args.model, args.prompts, candidates=4)
        trainer.engine.close()  # the engine's process would otherwise share the cores being measured
        batch = batch_from_trees(trees, trainer.pad_id, pack_tokens=config.learner.pack_tokens)
        learners = {n: (Learner(config), n) for n in THREADS}  # same seed: the same starting weights
        median = median_update_seconds(learners, batch, args.repeats)
    body = "\n".join([
        f"Command: `.venv/bin/python scripts/bench_learner_threads.py{' --model ' + args.model if args.model else ''}` "
        f"({(time.perf_counter() - began) / 60:.1f} min).",
        "", machine_line(), "",
        f"The demo's RL trees: {args.prompts} arithmetic problems, MCTS with 8 simulations of 4 candidate steps from "
        f"the demo's cold-start model ({len(batch)} root-to-leaf rows, packed). The demo's learner update (GRPO, 4 "
        f"minibatches of whole trees, engine log-probabilities, the value critic trained on node values) with 1 "
        f"and with 2 torch threads, alternating; median wall seconds of {args.repeats} updates each, the engine "
        f"closed (in training it waits during the update).", "",
        "| torch threads | update wall s (policy and critic) | speed-up over 1 thread |",
        "|---:|---:|---:|",
        *[f"| {n} | {median[n]:.2f} | {median[1] / median[n]:.2f}x |" for n in THREADS], "",
        "The demo sets `DemoConfig.learner_threads = 2` from this; every other stage stays on one thread.", ""])
    print(body)
    if not args.no_doc:
        print(f"written to {update_section('Learner threads', body)}")


if __name__ == "__main__":
    main()
