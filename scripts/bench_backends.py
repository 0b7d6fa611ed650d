"""Sampled tokens/s of the transformers and vLLM backends, side by side on the same model and prompts.

    python scripts/bench_backends.py            # tiny model and SmolLM2-135M, table into docs/benchmarks.md
    python scripts/bench_backends.py --models tiny --repeats 3

Every sample runs to max_tokens (end-of-sequence ignored) so both backends generate the same count.
The transformers backend is timed at 1 and 2 torch threads on the tiny model: on a 2-core machine
with other work running, two threads can be much slower than one.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path


WORKLOADS = {  # model -> (prompts, n, max_tokens), as the foundation issue sets them
    "tiny": (32, 8, 64),
    "smollm2": (16, 4, 128),
}
HF_THREADS = {"tiny": (1, 2), "smollm2": (1,)}
"""Thread counts timed for the transformers backend (SmolLM2 at one only, to stay under 10 minutes)."""


def model_folder(name: str, workdir: Path) -> Path:
    from planner.policy.local_models import build_tiny_llama, smollm2_folder
    if name == "tiny":  # the demo's size: hidden 128, 4 layers, 4 heads
        return build_tiny_llama(workdir / "tiny", hidden_size=128, num_layers=4, num_heads=4, init_std=0.5)
    return smollm2_folder()


def time_generation(policy, prompts, params, repeats: int) -> float:
    """Median generated tokens per second over `repeats` timed calls, after one warm-up call."""
    policy.generate(prompts[:2], params.replace(n=1, max_tokens=8))
    rates = []
    for r in range(repeats):
        start = time.perf_counter()
        out = policy.generate(prompts, params.replace(seed=r))
        seconds = time.perf_counter() - start
        rates.append(sum(len(s.token_ids) for group in out for s in group) / seconds)
    return statistics.median(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", choices=sorted(WORKLOADS), default=["tiny", "smollm2"])
    parser.add_argument("--repeats", type=int, default=2, help="timed calls per configuration (median taken)")
    parser.add_argument("--no-doc", action="store_true", help="print the table only; leave docs/benchmarks.md")
    args = parser.parse_args()

    import torch
    from tqdm import tqdm

    from planner.policy import SamplingParams, load_policy
    from benchdoc import machine_line, update_section

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in tqdm(args.models, desc="models"):
            count, n, max_tokens = WORKLOADS[name]
            folder = model_folder(name, Path(tmp))
            params = SamplingParams(n=n, temperature=1.0, max_tokens=max_tokens, ignore_eos=True)
            hf = load_policy(folder, backend="hf")
            prompts = [hf.encode_prompt(f"Question {i}: what is {i} times {i + 7}?") for i in range(count)]
            rates = {}
            for threads in HF_THREADS[name]:
                torch.set_num_threads(threads)
                rates[f"hf, {threads} thread{'s' * (threads > 1)}"] = time_generation(hf, prompts, params, args.repeats)
            del hf
            start = time.perf_counter()
            vl = load_policy(folder, backend="vllm")
            startup = time.perf_counter() - start
            rates["vllm (eager)"] = time_generation(vl, prompts, params, args.repeats)
            vl.close()
            best_hf = max(v for k, v in rates.items() if k.startswith("hf"))
            for backend, rate in rates.items():
                rows.append((name, f"{count} x n={n} x {max_tokens}", backend, rate, rate / best_hf))
            rows.append((name, "", f"vllm engine start: {startup:.0f} s", float("nan"), float("nan")))

    table = ["| model | workload (prompts x n x tokens) | backend | sampled tokens/s | ratio to best hf |",
             "|---|---|---|---:|---:|"]
    for model, work, backend, rate, ratio in rows:
        if rate != rate:  # the start-up note row
            table.append(f"| {model} | | {backend} | | |")
        else:
            table.append(f"| {model} | {work} | {backend} | {rate:,.0f} | {ratio:.2f}x |")
    body = "\n".join([
        "Command: `.venv/bin/python scripts/bench_backends.py` (median of "
        f"{args.repeats} timed calls after a warm-up; every sample runs to max_tokens).", "",
        machine_line(), "", *table])
    print(body)
    if not args.no_doc:
        print(f"written to {update_section('Policy backends', body)}")


if __name__ == "__main__":
    main()
