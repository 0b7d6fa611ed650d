"""The engines' peak: sampled tokens/s of the transformers and vLLM backends by call shape, and vLLM's
compiled decoding against its start-up cost, side by side on the same model and prompts.

    python scripts/bench_backends.py                   # tiny model and SmolLM2-135M; into docs/benchmarks.md
    python scripts/bench_backends.py --models tiny --repeats 3 --no-doc

Engines per model: the transformers backend (1 torch thread; also 2 on the tiny model), vLLM eager,
vLLM compiled (`enforce_eager=False`) started with an empty compile cache, and compiled again, started
with that cache filled. For each:

- start-up: seconds to a loaded engine, then of its first small call;
- steady state: tokens/s of the comparison workload (`WORKLOADS`: tiny 32 x 8 x 64, SmolLM2 16 x 4 x
  128, as issue 7 set them), the median of `--repeats` timed calls;
- the call-shape grid (`PEAK_SHAPES`, prompts x samples x max tokens): tokens/s of each shape; the best
  is the engine's peak raw throughput on this machine, which `scripts/bench_search_peak.py` holds search
  against (it measures that peak again, side by side with the searches).

Every sample runs to max_tokens (end-of-sequence ignored), so every engine generates the same count.
Prompts are questions of the arithmetic task; the tiny model is the demo's (hidden 128, 4 layers, 4
heads, the arithmetic alphabet). SmolLM2's transformers backend (~70 tokens/s) times the workload
only, and the warm compiled start its start-up only, to keep the run under ~20 minutes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

from benchdoc import machine_line, update_section
from planner.logs import configure_logging
from verifiers.arithmetic import ARITHMETIC_ALPHABET, arithmetic_task

WORKLOADS = {  # model -> (prompts, n, max_tokens), as issue 7 set them
    "tiny": (32, 8, 64),
    "smollm2": (16, 4, 128),
}
PEAK_SHAPES = {  # model -> call shapes (prompts, n, max_tokens) whose best is the engine's peak
    "tiny": [(16, 4, 24), (64, 4, 24), (256, 4, 24), (64, 16, 24), (1024, 1, 24), (32, 8, 64), (128, 4, 64),
             (64, 4, 96)],
    "smollm2": [(16, 4, 128), (64, 4, 32)],
}
"""A shape that is also the model's workload is timed once for both. The tiny model's shapes hold 1.5k-33k
tokens; SmolLM2's 8k each (about half a minute each on vLLM here)."""
HF_THREADS = {"tiny": (1, 2), "smollm2": (1,)}
"""Thread counts timed for the transformers backend (SmolLM2 at one only, to keep the run short)."""
VLLM_OPTIONS = {"tiny": {"kv_cache_gib": 1.0, "max_model_len": 512}, "smollm2": {"kv_cache_gib": 1.0,
                                                                              "max_model_len": 2048}}


def model_folder(name: str, workdir: Path) -> Path:
    """The tiny model at the demo's size with the arithmetic alphabet (random weights), or SmolLM2-135M."""
    from planner.policy.local_models import build_tiny_llama, smollm2_folder
    if name == "tiny":
        return build_tiny_llama(workdir / "tiny", alphabet=ARITHMETIC_ALPHABET, hidden_size=128, num_layers=4,
                                num_heads=4, init_std=0.5)
    return smollm2_folder()


def task_prompts(policy, count: int) -> list[list[int]]:
    """Prompt ids of `count` arithmetic questions (the demo's task; short prompts, as in its searches)."""
    return [policy.encode_prompt(p.question) for p in arithmetic_task(count, seed=1)]


def cpu_seconds() -> float:
    """CPU time (user + system) of this process and its children (vLLM's engine core runs in one)."""
    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:
            pass
    return total


def time_shape(policy, prompts: list[list[int]], shape: tuple[int, int, int], seed: int) -> dict:
    """One call of `shape` (prompts x n x max_tokens, every sample to max_tokens): tokens, wall and CPU seconds."""
    from planner.policy import SamplingParams
    count, n, max_tokens = shape
    batch = [prompts[i % len(prompts)] for i in range(count)]
    params = SamplingParams(n=n, temperature=1.0, max_tokens=max_tokens, ignore_eos=True, seed=seed)
    cpu, start = cpu_seconds(), time.perf_counter()
    out = policy.generate(batch, params)
    return {"tokens": sum(len(s.token_ids) for group in out for s in group), "seconds": time.perf_counter() - start,
            "cpu": cpu_seconds() - cpu}


def median_rate(policy, prompts, shape, repeats: int) -> float:
    """Median tokens/s (wall) over `repeats` calls of `shape`."""
    return statistics.median(r["tokens"] / r["seconds"] for r in
                             (time_shape(policy, prompts, shape, seed) for seed in range(repeats)))


def engines(name: str, cache: Path) -> list[tuple[str, str, dict]]:
    """(label, backend, load_policy options) of every engine timed on model `name`."""
    vllm = VLLM_OPTIONS[name]
    return ([(f"hf, {t} thread{'s' * (t > 1)}", "hf", {"threads": t}) for t in HF_THREADS[name]]
            + [("vllm eager", "vllm", vllm),
               ("vllm compiled (empty cache)", "vllm", {**vllm, "enforce_eager": False, "compile_cache": cache}),
               ("vllm compiled (filled cache)", "vllm", {**vllm, "enforce_eager": False, "compile_cache": cache})])


def bench_engine(name: str, label: str, backend: str, options: dict, folder: Path, repeats: int) -> dict:
    """Start-up, first call, workload tokens/s and (for the main engines) tokens/s by call shape."""
    from tqdm import tqdm

    from planner.policy import SamplingParams, load_policy

    start = time.perf_counter()
    policy = load_policy(folder, backend=backend, **options)
    startup = time.perf_counter() - start
    prompts = task_prompts(policy, 256)
    start = time.perf_counter()
    policy.generate(prompts[:2], SamplingParams(n=1, max_tokens=8))
    row = {"model": name, "engine": label, "startup": startup, "first_call": time.perf_counter() - start,
           "workload": float("nan"), "grid": {}}
    gridded = label in ("hf, 1 thread", "vllm eager", "vllm compiled (empty cache)") and not (
        backend == "hf" and name == "smollm2")  # the slow one times the workload only
    if "filled cache" not in label:  # the same compiled engine as the empty-cache one: only its start differs
        shapes = PEAK_SHAPES[name] if gridded else []
        row["grid"] = {shape: median_rate(policy, prompts, shape, repeats)
                       for shape in tqdm(shapes, desc=f"{name}, {label}", leave=False)}
        workload = WORKLOADS[name]
        row["workload"] = row["grid"][workload] if workload in row["grid"] else median_rate(policy, prompts, workload,
                                                                                            repeats)
    policy.close()
    return row


def shape_text(shape) -> str:
    return "{} x n={} x {}".format(*shape)


def report(rows: list[dict], repeats: int, loads: tuple, minutes: float) -> str:
    lines = [f"Command: `.venv/bin/python scripts/bench_backends.py {' '.join(sys.argv[1:])}`".rstrip() +
             f" (median of {repeats} timed calls per shape after a warm-up; every sample runs to max_tokens; "
             f"this run: {minutes:.1f} min wall, load average {loads[0]:.1f} at the start and {loads[1]:.1f} "
             "at the end).", "", machine_line(), "",
             "| model | engine | start-up s | first call s | workload | workload tokens/s | ratio to best hf | "
             "peak tokens/s (best shape of the grid) |", "|---|---|---:|---:|---|---:|---:|---|"]
    for r in rows:
        best_hf = max(x["workload"] for x in rows if x["model"] == r["model"] and x["engine"].startswith("hf"))
        peak = max(r["grid"].items(), key=lambda kv: kv[1]) if r["grid"] else None
        work = r["workload"]
        lines.append(f"| {r['model']} | {r['engine']} | {r['startup']:.0f} | {r['first_call']:.1f} | "
                     f"{shape_text(WORKLOADS[r['model']])} | {'' if work != work else f'{work:,.0f}'} | "
                     f"{'' if work != work else f'{work / best_hf:.2f}x'} | "
                     + (f"{peak[1]:,.0f} ({shape_text(peak[0])})" if peak else "") + " |")
    for model in dict.fromkeys(r["model"] for r in rows):
        gridded = [r for r in rows if r["model"] == model and r["grid"]]
        if not gridded:
            continue
        lines += ["", f"Tokens/s by call shape, {model} (best per engine in bold):", "",
                  "| call shape (prompts x n x max tokens) | " + " | ".join(r["engine"] for r in gridded) + " |",
                  "|---|" + "---:|" * len(gridded)]
        for shape in PEAK_SHAPES[model]:
            cells = []
            for r in gridded:
                rate = r["grid"][shape]
                cells.append(f"**{rate:,.0f}**" if rate == max(r["grid"].values()) else f"{rate:,.0f}")
            lines.append(f"| {shape_text(shape)} | " + " | ".join(cells) + " |")
    smol = {r["engine"]: r["workload"] for r in rows if r["model"] == "smollm2"}
    if smol:
        hf, eager, compiled = smol.get("hf, 1 thread"), smol.get("vllm eager"), smol.get("vllm compiled (empty cache)")
        lines += ["", f"Target (issue 7): vLLM >= 3x the transformers backend on SmolLM2's workload: eager "
                      f"{eager / hf:.2f}x, compiled {compiled / hf:.2f}x: "
                      + ("met" if max(eager, compiled) >= 3 * hf else "not met") + "."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", choices=sorted(WORKLOADS), default=["tiny", "smollm2"])
    parser.add_argument("--repeats", type=int, default=2, help="timed calls per shape (median taken)")
    parser.add_argument("--no-doc", action="store_true", help="print the table only; leave docs/benchmarks.md")
    parser.add_argument("--verbose", action="store_true", help="the engines' own logs")
    args = parser.parse_args()

    from tqdm import tqdm

    configure_logging(args.verbose)

    started, load_start = time.perf_counter(), os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        plan = [(name, *engine) for name in args.models for engine in engines(name, Path(tmp) / f"cache-{name}")]
        folders = {name: model_folder(name, Path(tmp)) for name in args.models}
        for name, label, backend, options in tqdm(plan, desc="engines"):
            rows.append(bench_engine(name, label, backend, options, folders[name], args.repeats))
    body = report(rows, args.repeats, (load_start, os.getloadavg()[0]), (time.perf_counter() - started) / 60)
    print(body)
    if not args.no_doc:
        print(f"written to {update_section('Policy backends', body)}")


if __name__ == "__main__":
    main()
