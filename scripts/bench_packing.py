"""The tree-packed learner against the row-wise one on the demo's MCTS trees, side by side.

    .venv/bin/python scripts/bench_packing.py                       # cold start first (~2-4 min)
    .venv/bin/python scripts/bench_packing.py --model runs/demo/sft --no-doc

One batch of trees is grown once with the demo's RL search settings as they were when this was
measured (32 problems, MCTS with 8 simulations of 2 candidate steps, where the demo now samples 4;
steps of at most 16 tokens; the first iteration's verifier scorer), from the demo's cold-start
model. Then the same learner update (the demo's: GRPO, 4 minibatches, engine log-probabilities, the
value critic trained on the node values) runs on it packed and row by row, alternating, `--repeats`
times each. Reported: the tokens that go through the learner's forward passes (row tokens against
packed tokens), and the median CPU seconds of the update, with their ratios. One torch thread.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from benchdoc import machine_line, update_section
from planner.logs import configure_logging
from verifiers.arithmetic import STEP_DELIMITER, arithmetic_task, load_arithmetic


PACK_CAPS = (256, 128, 64)
"""Token caps of the packed layouts compared (`TrainConfig.learner.pack_tokens`)."""


def grow_demo_trees(tmp: Path, model: str | None, prompts: int, candidates: int):
    """One batch of the demo's RL trees (`prompts` problems, MCTS with 8 simulations of `candidates` steps)
    from `model`, or from a fresh cold start in `tmp`; returns the demo's learner config, the trainer (its
    engine still open) and the trees."""
    from planner.strategies import MCTSConfig
    from lab.cold_start import cold_start
    from rl.config import (AlgorithmConfig, CriticConfig, LearnerConfig, LoopConfig, TrainConfig, TreeSearchConfig,
                           ValueConfig)
    from rl.trainer import SearchTrainer

    model = model or str(cold_start(tmp / "sft", final_eval=False, progress=False).model_dir)
    task = load_arithmetic(split="test")
    config = TrainConfig(
        model=model,
        loop=LoopConfig(output_dir=str(tmp / "rl"), prompts_per_iteration=prompts),
        search=TreeSearchConfig(strategy="mcts",
                                mcts=MCTSConfig(num_simulations=8, num_candidates=candidates,
                                                step_delimiter=STEP_DELIMITER, max_step_tokens=16, max_steps=8,
                                                temperature=1.0)),
        learner=LearnerConfig(minibatches=4, device="cpu", lr=1e-4),
        algorithm=AlgorithmConfig(old_logprobs="engine"),
        value=ValueConfig(critic=CriticConfig(enabled=True, lr=1e-3)))
    problems = arithmetic_task(prompts, "medium", seed=1)
    trainer = SearchTrainer(config, problems, task.reward, extract=task.verifier.extract)
    trees, _ = trainer.grow_trees(problems, seed=0)
    return config, trainer, trees


def tree_batch_arguments(description: str, repeats_per: str) -> argparse.ArgumentParser:
    """The options of a benchmark that times learner updates on one batch of the demo's trees."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="the demo's cold-start folder (default: run lab.cold_start first)")
    parser.add_argument("--prompts", type=int, default=32, help="trees in the batch (the demo's rl_prompts)")
    parser.add_argument("--repeats", type=int, default=5, help=f"timed updates per {repeats_per}")
    parser.add_argument("--no-doc", action="store_true", help="print only; do not write docs/benchmarks.md")
    return parser


def main() -> None:
    args = tree_batch_arguments(__doc__, "layout").parse_args()

    from tqdm import tqdm

    from rl.batch import batch_from_trees
    from rl.config import TrainConfig
    from rl.learner import Learner
    from rl.runtime import torch_settings

    configure_logging(False)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-packing-") as tmp, torch_settings(threads=1):
        config, trainer, trees = grow_demo_trees(Path(tmp), args.model, args.prompts, candidates=2)
        caps = {"rows": None, "one pack per tree": None, **{f"packs of <= {n} tokens": n for n in PACK_CAPS}}
        batches = {name: batch_from_trees(trees, trainer.pad_id, pack_tokens=cap) for name, cap in caps.items()}
        learners = {name: Learner(replace(config, learner=replace(config.learner, packing=name != "rows")))
                    for name in caps}
        seconds = {name: [] for name in caps}
        for r in tqdm(range(args.repeats), desc="updates"):
            for name, learner in learners.items():
                start = time.process_time()
                learner.update(batches[name], iteration=r)
                seconds[name].append(time.process_time() - start)
    rows_tokens = int(batches["rows"].attention_mask.sum())
    tokens = {name: rows_tokens if name == "rows" else sum(len(p) for p in b.packs) for name, b in batches.items()}
    median = {name: statistics.median(s) for name, s in seconds.items()}
    best = min((n for n in caps if n != "rows"), key=median.get)
    verdict = lambda ok: "met" if ok else "NOT met"  # noqa: E731
    body = "\n".join([
        f"Command: `.venv/bin/python scripts/bench_packing.py` ({(time.perf_counter() - began) / 60:.1f} min).", "",
        machine_line(), "",
        f"The demo's RL trees: {args.prompts} arithmetic problems, MCTS with 8 simulations of 2 candidate steps from "
        f"the demo's cold-start model ({len(batches['rows'])} root-to-leaf rows). The demo's learner update (GRPO, 4 "
        f"minibatches of whole trees, engine log-probabilities, the value critic trained on node values) on the "
        f"same trees, row by row and packed (one pack per tree, or packs cut at a token cap: "
        f"`TrainConfig.learner.pack_tokens`), "
        f"alternating; median CPU seconds of {args.repeats} updates each, one torch thread.", "",
        "| layout | tokens through the learner | vs rows | update CPU s (policy and critic) | vs rows |",
        "|---|---:|---:|---:|---:|",
        *[f"| {name} | {tokens[name]:,} | {tokens[name] / rows_tokens:.2f}x | {median[name]:.2f} | "
          f"{median[name] / median['rows']:.2f}x |" for name in caps], "",
        f"- Target, packed tokens <= 0.5x the rows': {verdict(tokens['one pack per tree'] <= 0.5 * rows_tokens)} "
        f"({tokens['one pack per tree'] / rows_tokens:.2f}x with one pack per tree, the fewest tokens).",
        f"- Target, packed learner time <= 0.6x the rows': {verdict(median[best] <= 0.6 * median['rows'])} "
        f"({median[best] / median['rows']:.2f}x, the fastest layout: {best}).",
        ""])
    print(body)
    if not args.no_doc:
        print(f"written to {update_section('Tree-packed learner', body)}")


if __name__ == "__main__":
    main()
