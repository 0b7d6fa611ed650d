"""The learner's memory and precision options on SmolLM2-135M: one RL update, side by side.

    .venv/bin/python scripts/bench_memory.py            # table into docs/benchmarks.md
    .venv/bin/python scripts/bench_memory.py --no-doc --prompts 2

One batch of rows is sampled once (GSM8K test problems, best-of-N with the transformers engine),
then each learner setting runs the same two GRPO updates on it in a fresh process: float32; gradient
checkpointing; micro-batches; chunked log-probabilities; all three; bfloat16 autocast; bfloat16
with all three. Reported per setting: the peak resident memory the second update added on top of
the loaded models and AdamW's state (sampled every 10 ms), that update's CPU seconds, and how far
the first update's policy gradient is from plain float32's (largest entry difference relative to
the largest entry, and the cosine). One torch thread each. The reward is the fraction of digits in
a response, so that every group carries a gradient.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from benchdoc import machine_line, update_section
from planner.logs import configure_logging
from verifiers import load_task

SETTINGS = {  # name -> TrainConfig changes
    "float32": {},
    "+ gradient checkpointing": {"gradient_checkpointing": True},
    "+ micro-batches": {"micro_batch_tokens": 1024},
    "+ chunked log-probs": {"logprob_chunk": 256},
    "+ all three": {"gradient_checkpointing": True, "micro_batch_tokens": 1024, "logprob_chunk": 256},
    "bfloat16 autocast": {"dtype": "bfloat16"},
    "bfloat16 + all three": {"dtype": "bfloat16", "gradient_checkpointing": True, "micro_batch_tokens": 1024,
                             "logprob_chunk": 256},
}


def base_config(args, model: str, out: str, **learner):
    """The benchmark's TrainConfig; `learner`: the setting's LearnerConfig fields."""
    from planner.strategies import BestOfNConfig
    from rl.config import CriticConfig, LearnerConfig, LoopConfig, TrainConfig, TreeSearchConfig, ValueConfig

    best_of_n = BestOfNConfig(n=args.samples, max_tokens=args.max_tokens, temperature=1.0)
    return TrainConfig(model=model, loop=LoopConfig(output_dir=out, prompts_per_iteration=args.prompts, threads=1),
                       search=TreeSearchConfig(strategy="best_of_n", best_of_n=best_of_n),
                       learner=LearnerConfig(lr=1e-5, max_grad_norm=1e9, device="cpu", **learner),
                       value=ValueConfig(critic=CriticConfig(enabled=False)))


def digit_fraction(text: str, problem) -> float:
    """A dense reward (the fraction of digits), so every group has a learning signal; SmolLM2 solves
    too few GSM8K problems for the task's own reward to give one in a few rows."""
    return sum(ch.isdigit() for ch in text) / max(len(text), 1)


def sample_rows(args, model: str, workdir: Path) -> Path:
    """The batch every setting trains on, saved once."""
    import torch

    from rl.batch import batch_from_trees
    from rl.trainer import SearchTrainer

    task = load_task("gsm8k", split="test")
    trainer = SearchTrainer(base_config(args, model, str(workdir / "rows")), task.problems[:args.prompts],
                            digit_fraction, extract=task.verifier.extract)
    trees, _ = trainer.grow_trees(task.problems[:args.prompts], seed=0)
    batch = batch_from_trees(trees, trainer.pad_id)
    path = workdir / "batch.pt"
    torch.save(vars(batch), path)
    return path


def child(args) -> None:
    """One setting: load the learner, run the update on the saved rows, write what it measured."""
    import torch

    configure_logging(False)

    from rl.batch import RolloutBatch
    from rl.learner import Learner

    batch = RolloutBatch(**torch.load(args.batch, weights_only=False))
    learner = Learner(base_config(args, args.model, str(Path(args.out).parent / "learner"),
                                  **SETTINGS[args.child]))
    grads, step = [], learner.optimizer.step

    def recording(*a, **k):
        grads.append(torch.cat([p.grad.flatten().clone() for p in learner.policy.parameters()]))
        return step(*a, **k)
    learner.optimizer.step = recording
    learner.update(batch, iteration=0)  # allocates AdamW's state; its gradient is the one compared
    process, peak, stop = psutil.Process(), [0], threading.Event()
    baseline = process.memory_info().rss

    def sample():
        while not stop.wait(0.01):
            peak[0] = max(peak[0], process.memory_info().rss)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    cpu = time.process_time()
    learner.update(batch, iteration=1)  # measured: the steady state
    cpu = time.process_time() - cpu
    stop.set()
    sampler.join()
    torch.save(grads[0], Path(args.out).with_suffix(".grad.pt"))
    Path(args.out).write_text(json.dumps({"added_mb": (max(peak[0], baseline) - baseline) / 2**20,
                                          "baseline_mb": baseline / 2**20, "cpu_s": cpu}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=4, help="GSM8K problems (one group of rows each)")
    parser.add_argument("--samples", type=int, default=4, help="best-of-N samples per problem")
    parser.add_argument("--max-tokens", type=int, default=128, help="most tokens per sample")
    parser.add_argument("--no-doc", action="store_true", help="print only; do not write docs/benchmarks.md")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--batch", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    import torch

    from planner.policy.local_models import smollm2_folder
    from tqdm import tqdm

    configure_logging(False)
    began = time.perf_counter()
    model = str(smollm2_folder())
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        workdir = Path(tmp)
        batch_path = sample_rows(args, model, workdir)
        batch = torch.load(batch_path, weights_only=False)
        rows, longest = batch["input_ids"].shape[0], int(batch["attention_mask"].sum(-1).max())
        results = {}
        for name in tqdm(SETTINGS, desc="settings"):
            out = workdir / f"{len(results)}.json"
            subprocess.run([sys.executable, __file__, "--child", name, "--batch", str(batch_path), "--model", model,
                            "--out", str(out), "--prompts", str(args.prompts), "--samples", str(args.samples),
                            "--max-tokens", str(args.max_tokens)], check=True,
                           env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
            results[name] = {**json.loads(out.read_text()), "grad": torch.load(out.with_suffix(".grad.pt"))}
    reference = results["float32"]["grad"]
    table = ["| learner setting | memory the update added (MB) | vs float32 | update CPU s | vs float32 "
             "| max gradient difference / max entry | gradient cosine |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name, r in results.items():
        diff = float((r["grad"] - reference).abs().max() / reference.abs().max())
        cosine = float(torch.nn.functional.cosine_similarity(r["grad"].double(), reference.double(), dim=0))
        table.append(f"| {name} | {r['added_mb']:,.0f} | {r['added_mb'] / results['float32']['added_mb']:.2f}x | "
                     f"{r['cpu_s']:.1f} | {r['cpu_s'] / results['float32']['cpu_s']:.2f}x | {diff:.1e} | {cosine:.5f} |")
    body = "\n".join([
        f"Command: `.venv/bin/python scripts/bench_memory.py` ({(time.perf_counter() - began) / 60:.1f} min).", "",
        machine_line(), "",
        f"One GRPO update of SmolLM2-135M-Instruct on the CPU over the same {rows} rows (GSM8K test problems "
        f"0-{args.prompts - 1}, best-of-{args.samples} at most {args.max_tokens} tokens, longest row {longest} "
        "tokens; vocabulary 49,152), one minibatch, each setting in a fresh process with one torch thread. "
        "Memory is the peak resident set during the second update minus the resident set before it (models, "
        "AdamW state and rows already loaded); CPU s is that update's. Micro-batches hold at most 1,024 padded tokens; chunked log-probs "
        "take 256 positions at a time. The gradient columns compare the first policy gradient with plain "
        "float32's (the cosine in float64).", "", *table, ""])
    print(body)
    if not args.no_doc:
        print(f"written to {update_section('Learner memory and precision', body)}")


if __name__ == "__main__":
    main()
