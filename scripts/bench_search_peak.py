"""Search at the engine's peak: batched MCTS and beam over 64 problems against the engine's peak raw
tokens/s, side by side in one run, on both backends (issue 16).

    python scripts/bench_search_peak.py                      # tiny model, hf and vllm; into docs/benchmarks.md
    python scripts/bench_search_peak.py --backends vllm --repeats 1 --no-doc

Per backend, on the demo's tiny model (`bench_backends.model_folder`) and 64 arithmetic problems:

1. the peak: every call shape of `bench_backends.PEAK_SHAPES` (every sample to max_tokens); the one
   with the most tokens per CPU second is the engine's peak shape here;
2. the searches: `solve_batch` with bench_search's tiny settings (MCTS 16 simulations, 4 leaves of 4
   candidates per round; beam 8 beams of width 4; steps end at "\\n", at most 24 tokens) and its hash
   scorer (a value per prefix, no model), so the ratio is about the engine's use: all 64 searches
   live; `--live` K of them live with continuous refilling; and, for comparison, without refilling:
   `solve_batch` over K problems at a time, one batch after another; each repeat with new seeds;
3. the peak shape again, half before and half after each search (bracketing it in time), for as many
   tokens as the search generated: that row's peak.

A row pools its repeats. "ratio to peak (CPU time)" compares tokens per CPU second of this process and
its children (vLLM's engine core), which other jobs on a shared machine disturb far less than wall
time; "(wall)" is the same with wall-clock seconds. The target: batched MCTS and beam (all 64 live) at
least 0.7x the peak on both backends, in CPU time (as issues 4 and 7 stated theirs); the table says
per row whether it is met.

Scorer rows: MCTS over the 64 problems with a model scorer (an untrained tiny value model,
`planner.scorers.ModelScorer`) whose calls are merged across searches (the default) or not
(`merges_calls=False`): wall seconds of the search and of the scorer's forward passes.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from bench_search import WORKLOADS, HashScorer

from bench_backends import PEAK_SHAPES, VLLM_OPTIONS, cpu_seconds, model_folder, shape_text, task_prompts, time_shape
from benchdoc import machine_line, update_section
from planner.logs import configure_logging
from planner.scorers import ModelScorer
from verifiers.arithmetic import arithmetic_task

BACKENDS = {  # label -> (backend, load_policy options)
    "hf": ("hf", {"threads": 1, "max_batch_size": 1024}),
    "vllm": ("vllm", VLLM_OPTIONS["tiny"]),
    "vllm compiled": ("vllm", {**VLLM_OPTIONS["tiny"], "enforce_eager": False}),
}
"""The transformers backend runs a whole merged call (up to 1,024 samples) as one batch."""
TARGET = 0.7


class TimedModelScorer(ModelScorer):
    """A model scorer that adds the seconds of its forward passes (merged or not) to `clock[0]`."""

    clock = [0.0]

    def _score(self, prefixes, prompt_len, finished):
        start = time.perf_counter()
        try:
            return super()._score(prefixes, prompt_len, finished)
        finally:
            self.clock[0] += time.perf_counter() - start


def parse_shape(text: str) -> tuple[int, int, int]:
    """"64x4x24" -> (64, 4, 24): prompts x samples per prompt x max tokens."""
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"a call shape is PROMPTSxNxMAX_TOKENS of positive integers, e.g. 64x4x24; "
                                         f"got {text!r}")
    return tuple(int(p) for p in parts)


def peak_shape(policy, prompts, shapes, repeats: int) -> tuple[tuple, list[dict]]:
    """The shape with the most tokens per CPU second, and each shape's pooled measurement."""
    measured = []
    for shape in shapes:
        runs = [time_shape(policy, prompts, shape, seed) for seed in range(repeats)]
        measured.append({"shape": shape, **{k: sum(r[k] for r in runs) for k in ("tokens", "seconds", "cpu")}})
    best = max(measured, key=lambda m: m["tokens"] / m["cpu"])
    return best["shape"], measured


def raw_until(policy, prompts, shape, tokens: int, seed: int) -> dict:
    """Calls of the peak shape until `tokens` are generated: tokens, wall and CPU seconds."""
    total = {"tokens": 0, "seconds": 0.0, "cpu": 0.0}
    while total["tokens"] < tokens:
        run = time_shape(policy, prompts, shape, seed)
        total = {k: total[k] + run[k] for k in total}
        seed += 1
    return total


def search(policy, strategy: str, problems: list[str], scorer, live: int | None, seed: int,
           chunks: bool = False) -> dict:
    """`solve_batch` over the problems (with chunks: over `live` problems at a time, one call after another,
    as without refilling): tokens, wall and CPU seconds, calls and samples per call."""
    from planner.solve import solve_batch
    samples: list[int] = []
    original = policy.generate

    def counting(prompts, params):
        samples.append(len(prompts) * params.n)
        return original(prompts, params)

    policy.generate = counting
    try:
        before, cpu, start = policy.stats.copy(), cpu_seconds(), time.perf_counter()
        step = live if chunks else len(problems)
        for first in range(0, len(problems), step):
            solve_batch(problems[first:first + step], policy, strategy, scorer, seed=seed + first,
                        max_live=None if chunks else live, **WORKLOADS["tiny"].strategies[strategy])
        seconds, cpu = time.perf_counter() - start, cpu_seconds() - cpu
    finally:
        del policy.generate  # back to the class's method
    return {"tokens": (policy.stats - before).generated_tokens, "seconds": seconds, "cpu": cpu,
            "calls": len(samples), "samples": sum(samples)}


def bench_backend(label: str, folder: Path, args, rows: list, grids: dict, scorer_rows: list) -> None:
    from tqdm import tqdm

    from planner.policy import load_policy

    backend, options = BACKENDS[label]
    start = time.perf_counter()
    policy = load_policy(folder, backend=backend, **options)
    startup = time.perf_counter() - start
    problems = [p.question for p in arithmetic_task(args.problems, seed=2)]
    prompts = task_prompts(policy, 256)
    time_shape(policy, prompts, (4, 2, 8), seed=0)  # warm-up
    shape, grids[label] = peak_shape(policy, prompts, args.shapes, args.repeats)
    plan = [(s, live, chunks) for s in ("mcts", "beam") for live, chunks in ((None, False), (args.live, False),
                                                                             (args.live, True))]
    for strategy, live, chunks in tqdm(plan, desc=f"{label}: searches", leave=False):
        found, raw = [], []
        for r in range(args.repeats):
            run = search(policy, strategy, problems, HashScorer(), live, seed=1000 * r, chunks=chunks)
            half = run["tokens"] // 2
            raw += [raw_until(policy, prompts, shape, half, seed=100 * r), raw_until(policy, prompts, shape, half,
                                                                                       seed=100 * r + 50)]
            found.append(run)
        pooled = {k: sum(x[k] for x in found) for k in ("tokens", "seconds", "cpu", "calls", "samples")}
        base = {k: sum(x[k] for x in raw) for k in ("tokens", "seconds", "cpu")}
        ratio = (pooled["tokens"] / pooled["cpu"]) / (base["tokens"] / base["cpu"])
        rows.append({"strategy": strategy, "backend": label, "live": live or args.problems, "problems": args.problems,
                     "chunks": chunks,
                     "calls": pooled["calls"] / args.repeats, "per_call": pooled["samples"] / pooled["calls"],
                     "rate": pooled["tokens"] / pooled["seconds"], "peak": base["tokens"] / base["seconds"],
                     "shape": shape, "ratio": ratio,
                     "wall_ratio": (pooled["tokens"] / pooled["seconds"]) / (base["tokens"] / base["seconds"])})
    from transformers import AutoModelForTokenClassification
    value_model = AutoModelForTokenClassification.from_pretrained(folder, num_labels=1)
    for merged in (True, False):
        scorer = TimedModelScorer(value_model, batch_size=64)
        scorer.merges_calls = merged
        TimedModelScorer.clock[0] = 0.0
        run = search(policy, "mcts", problems, scorer, None, seed=0)
        scorer_rows.append({"backend": label, "merged": merged, "seconds": run["seconds"],
                            "scorer": TimedModelScorer.clock[0], "rate": run["tokens"] / run["seconds"]})
    rows.append({"strategy": f"(engine start {startup:.0f} s)", "backend": label})
    policy.close()


def report(rows, grids, scorer_rows, args, loads, minutes) -> str:
    command = " ".join(["OMP_NUM_THREADS=1", ".venv/bin/python", "scripts/bench_search_peak.py", *sys.argv[1:]])
    lines = [f"Command: `{command}` ({args.repeats} search + peak pairs per row, pooled; this run: {minutes:.1f} min "
             f"wall, load average {loads[0]:.1f} at the start and {loads[1]:.1f} at the end).", "", machine_line(), "",
             "| strategy | backend | problems (live at once) | policy calls | samples per call | search tokens/s | "
             "peak raw tokens/s (its shape) | ratio to peak (CPU time) | ratio to peak (wall) | "
             f"target >= {TARGET}x |", "|---|---|---|---:|---:|---:|---|---:|---:|---|"]
    for r in rows:
        if "rate" not in r:
            lines.append(f"| {r['strategy']} | {r['backend']} | | | | | | | | |")
            continue
        refill = ("" if r["live"] == r["problems"] else f", {r['live']} at a time" if r["chunks"] else
                  " (refilling)")
        target = ("met" if r["ratio"] >= TARGET else "not met") if not refill else ""
        live = "" if r["chunks"] else f" ({r['live']})"
        lines.append(f"| {r['strategy']} | {r['backend']} | {r['problems']}{live}{refill} | {r['calls']:.0f} | "
                     f"{r['per_call']:.0f} | {r['rate']:,.0f} | {r['peak']:,.0f} ({shape_text(r['shape'])}) | "
                     f"{r['ratio']:.2f}x | {r['wall_ratio']:.2f}x | {target} |")
    for label, measured in grids.items():
        lines += ["", f"The peak's grid, {label} (every sample to max tokens; {args.repeats} calls per shape):", "",
                  "| call shape (prompts x n x max tokens) | tokens/s (wall) | tokens per CPU second |",
                  "|---|---:|---:|"]
        best = max(measured, key=lambda m: m["tokens"] / m["cpu"])
        for m in measured:
            mark = "**" if m is best else ""
            lines.append(f"| {mark}{shape_text(m['shape'])}{mark} | {m['tokens'] / m['seconds']:,.0f} | "
                         f"{m['tokens'] / m['cpu']:,.0f} |")
    lines += ["", "MCTS over the same problems with a model scorer (tiny untrained value model, batches of 64):", "",
              "| backend | scorer calls | search s | scorer forward s | search tokens/s |", "|---|---|---:|---:|---:|"]
    for r in scorer_rows:
        lines.append(f"| {r['backend']} | {'merged across searches' if r['merged'] else 'one per search'} | "
                     f"{r['seconds']:.1f} | {r['scorer']:.1f} | {r['rate']:,.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", nargs="+", choices=sorted(BACKENDS), default=["hf", "vllm"])
    parser.add_argument("--problems", type=int, default=64, help="problems per search run")
    parser.add_argument("--live", type=int, default=32, help="searches live at once in the refilling rows")
    parser.add_argument("--repeats", type=int, default=2, help="search + peak pairs per row, each with new seeds")
    parser.add_argument("--shapes", nargs="+", type=parse_shape, default=PEAK_SHAPES["tiny"], metavar="PxNxT",
                        help="call shapes of the peak's grid (default: bench_backends.PEAK_SHAPES['tiny'])")
    parser.add_argument("--no-doc", action="store_true", help="print the tables only; leave docs/benchmarks.md")
    parser.add_argument("--verbose", action="store_true", help="the engines' own logs")
    args = parser.parse_args()

    import torch
    from tqdm import tqdm

    configure_logging(args.verbose)
    torch.set_num_threads(1)
    started, load = time.perf_counter(), os.getloadavg()[0]
    rows, grids, scorer_rows = [], {}, []
    with tempfile.TemporaryDirectory() as tmp:
        folder = model_folder("tiny", Path(tmp))
        for label in tqdm(args.backends, desc="backends"):
            bench_backend(label, folder, args, rows, grids, scorer_rows)
    text = report(rows, grids, scorer_rows, args, (load, os.getloadavg()[0]), (time.perf_counter() - started) / 60)
    print(text)
    if not args.no_doc:
        print(f"written to {update_section('Search at the engine peak', text)}")


if __name__ == "__main__":
    main()
