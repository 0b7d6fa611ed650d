"""Engine pool: throughput of 2 replicas against one engine, and what the pool itself costs.

    python scripts/bench_pool.py                      # vLLM, 64 problems x 8 samples, 3 repeats: "Engine pool"
    python scripts/bench_pool.py --backend hf         # the transformers engine: "Engine pool (transformers)"

The workload is best-of-N through the planner (`solve_batch(problems, policy, "best_of_n", n=8,
batched=True)`: one engine call of 64 prompts x 8 samples of at most 64 tokens) with the demo's model
size (`build_tiny_llama`: hidden 128, 4 layers, 4 heads, one token per character; random weights) on
64 generated arithmetic problems. Three policies run it side by side, in rotated order each repeat
(each repeat with its own seed, the same for the three):

- "one engine": `load_policy(..., threads=1)` in this process;
- "pool of 2": an `EnginePool` of 2 replicas (Ray actors), 1 CPU and 1 thread each;
- "pool of 1": an `EnginePool` of 1 replica: the pool's own overhead against "one engine".

Ray runs locally with 3 logical CPUs (2 + 1 replicas; only one policy works at a time). Throughput
is generated tokens over wall seconds, pooled over the repeats. Per-call overheads come from
`generate` calls of 2 prompts x 1 token (a pool's are one prompt per replica); with them and the routing
rule's measured balance (`planner.policy.routing.assign_replicas` on the workload's own keys) the
script estimates the throughput of N replicas on paper (see the written section).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import tempfile
import time
from pathlib import Path

import psutil

from benchdoc import machine_line, update_section  # scripts/ is on the path when a script runs
from planner.logs import configure_logging
from planner.policy.routing import assign_replicas
from verifiers.arithmetic import arithmetic_task


ESTIMATE_REPLICAS = (1, 2, 4, 8, 16, 32)
LOCALITY_ROUTES = {"the rule, slack 0.25 (default)": {}, "the rule, slack 0.1": {"balance_slack": 0.1},
                   "pure affinity (slack 100)": {"balance_slack": 100.0},
                   "whole prompt as key (no tree affinity)": {"route_prefix_tokens": 10**6}}
"""Routings of the prefix-locality table: PoolConfig changes."""
LOCALITY_MCTS = dict(num_simulations=8, leaves_per_round=4, num_candidates=2, step_delimiter="\n", max_step_tokens=16,
                     max_steps=4, temperature=1.0)
"""MCTS of the prefix-locality table; its root prompts are ~52 tokens, so the generated steps' blocks count."""
SMALL_CALLS = 30
"""Timed 2-prompt x 1-token calls per policy for the per-call overhead (median)."""


def build_model(folder: Path) -> Path:
    """The demo's size with the default (printable) alphabet, so the locality runs' English prompts encode."""
    from planner.policy.local_models import build_tiny_llama
    return build_tiny_llama(folder, hidden_size=128, num_layers=4, num_heads=4)


def tree_cpu_seconds() -> float:
    """CPU seconds of this process and all its descendants: the local Ray instance (the replicas are its
    workers) and every vLLM engine process. Others' load on a shared machine stretches wall time, not this."""

    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:  # ended meanwhile
            pass
    return total


def run_workload(policy, problems, n: int, max_tokens: int, seed: int) -> tuple[int, float, float]:
    """(generated tokens, wall seconds, CPU seconds) of best-of-N over the problems, searched together."""
    from planner.solve import solve_batch

    cpu, start = tree_cpu_seconds(), time.perf_counter()
    solutions = solve_batch(problems, policy, "best_of_n", n=n, max_tokens=max_tokens, temperature=1.0,
                            seed=seed, batched=True)
    wall = time.perf_counter() - start
    return sum(s.compute.generated_tokens for s in solutions), wall, tree_cpu_seconds() - cpu


def call_seconds(policy, prompts) -> float:
    """Median wall seconds of a generate call of `prompts` x 1 token."""
    from planner.policy import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=1)
    times = []
    for _ in range(SMALL_CALLS):
        start = time.perf_counter()
        policy.generate(prompts, params)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def mcts_run(policy, weights, problems: list[str], seed: int):
    """Compute (`ComputeStats`) of MCTS over the problems (searched together), from an empty prefix cache."""
    from bench_search import HashScorer  # a value per prefix from its hash: no scorer model to time

    from planner.solve import solve_batch

    policy.load_weights(weights)  # the same weights again: the engines drop their prefix caches
    before = policy.stats.copy()
    solve_batch(problems, policy, "mcts", HashScorer(), seed=seed, **LOCALITY_MCTS)
    return policy.stats - before


def locality_rows(one, pool, folder: Path, seeds: int) -> tuple[list[str], float, list[bytes]]:
    """MCTS over 8 trees: one engine's cache-hit fraction against the pool's under several routings. Also
    one engine's mean seconds per MCTS call (a search round) and the trees' routing keys, for the estimate."""

    from safetensors.torch import load_file

    weights = load_file(str(folder / "model.safetensors"))
    problems = [f"{i} Add the numbers 123 and 456, then 78 and 9: go." for i in range(8)]
    runs = [mcts_run(one, weights, problems, seed) for seed in range(seeds)]
    alone = [run.cache_hit_fraction for run in runs]
    round_seconds = sum(run.seconds for run in runs) / sum(run.calls for run in runs)
    rows = [f"| one engine | {statistics.mean(alone):.3f} | | {', '.join(f'{x:.3f}' for x in alone)} |"]
    kept = pool.config
    try:
        for name, change in LOCALITY_ROUTES.items():
            pool.config = dataclasses.replace(kept, **change)
            hits = [mcts_run(pool, weights, problems, seed).cache_hit_fraction for seed in range(seeds)]
            gap = statistics.mean(h - a for h, a in zip(hits, alone))
            rows.append(f"| pool of 2: {name} | {statistics.mean(hits):.3f} | {100 * gap:+.1f} | "
                        f"{', '.join(f'{x:.3f}' for x in hits)} |")
    finally:
        pool.config = kept
    return rows, round_seconds, pool.routing_keys([pool.encode_prompt(p) for p in problems])


def balance(keys: list[bytes], replicas: int, slack: float) -> float:
    """Most prompts on one replica over the mean (1 = perfectly even), under the pool's routing rule."""

    placed = assign_replicas(keys, replicas, slack)
    return max(placed.count(r) for r in range(replicas)) / (len(keys) / replicas)


def estimate(one_seconds: float, overhead: float, extra: float, keys: list[bytes], replicas: int,
             slack: float) -> tuple[float, float]:
    """(b_N, estimated throughput ratio T_1 / T_N) with T_N = T_1 * b_N / N + o + d * (N - 1)."""
    b = balance(keys, replicas, slack)
    return b, one_seconds / (one_seconds * b / replicas + overhead + extra * (replicas - 1))


def measure(args) -> dict:
    """Every number of the section, from one run of the three policies side by side."""
    import ray
    from tqdm import tqdm

    from planner.policy import EnginePool, PoolConfig, load_policy

    m = {"load_before": os.getloadavg()}
    options = {"threads": 1} | ({"kv_cache_gib": 0.5, "max_model_len": 256} if args.backend == "vllm" else {})
    problems = arithmetic_task(args.problems, seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        folder = build_model(Path(tmp) / "tiny")
        ray.init(num_cpus=3, include_dashboard=False, log_to_driver=args.verbose)
        started = time.perf_counter()
        policies = {"one engine": load_policy(folder, backend=args.backend, **options),
                    "pool of 2": EnginePool(folder, args.backend, config=PoolConfig(replicas=2), **options),
                    "pool of 1": EnginePool(folder, args.backend, config=PoolConfig(replicas=1), **options)}
        m["start_seconds"] = time.perf_counter() - started
        try:
            pool2 = policies["pool of 2"]
            prompts = [pool2.encode_prompt(p.question) for p in problems]
            m["keys"], placed = pool2.routing_keys(prompts), pool2.route(prompts)
            pair = [prompts[placed.index(0)], prompts[placed.index(1)]]  # one prompt for each replica
            for policy in policies.values():  # warm-up: first calls pay one-time costs
                run_workload(policy, problems[:8], args.n, args.max_tokens, seed=1)
            m["totals"] = {name: [0, 0.0, 0.0] for name in policies}  # tokens, wall seconds, CPU seconds
            m["per_repeat"] = {name: [] for name in policies}
            names = list(policies)
            for r in tqdm(range(args.repeats), desc="repeats"):
                for name in names[r % 3:] + names[:r % 3]:
                    tokens, seconds, cpu = run_workload(policies[name], problems, args.n, args.max_tokens, seed=100 + r)
                    m["totals"][name] = [a + b for a, b in zip(m["totals"][name], (tokens, seconds, cpu))]
                    m["per_repeat"][name].append(tokens / seconds)
            m["small"] = {name: call_seconds(policy, pair) for name, policy in policies.items()}
            if args.backend == "vllm" and args.locality_seeds:
                m["locality"], m["round_seconds"], m["tree_keys"] = locality_rows(
                    policies["one engine"], pool2, folder, args.locality_seeds)
        finally:
            for policy in policies.values():
                policy.close()
            ray.shutdown()
    m["load_after"] = os.getloadavg()
    m["slack"] = PoolConfig().balance_slack
    return m


def report(args, m: dict) -> str:
    """The section's markdown: the measured table, the targets, the paper estimate, the locality table."""
    totals, small, slack = m["totals"], m["small"], m["slack"]
    rate = {name: tokens / seconds for name, (tokens, seconds, _) in totals.items()}
    cpu_per_token = {name: 1e3 * cpu / tokens for name, (tokens, _, cpu) in totals.items()}  # CPU ms per token
    seconds_per_run = {name: totals[name][1] / args.repeats for name in totals}
    speedup, lost = rate["pool of 2"] / rate["one engine"], 1 - rate["pool of 1"] / rate["one engine"]
    spread = [b / a for a, b in zip(m["per_repeat"]["one engine"], m["per_repeat"]["pool of 2"])]
    table = ["| policy | tokens/s (pooled) | per repeat | seconds per run | ratio to one engine | "
             "CPU ms per token (all processes) | 2-prompt x 1-token call |", "|---|---:|---|---:|---:|---:|---:|"]
    for name in totals:
        runs = ", ".join(f"{x:,.0f}" for x in m["per_repeat"][name])
        table.append(f"| {name} | {rate[name]:,.0f} | {runs} | {seconds_per_run[name]:.2f} | "
                     f"{rate[name] / rate['one engine']:.2f}x | {cpu_per_token[name]:.3f} | "
                     f"{1000 * small[name]:.1f} ms |")
    run_overhead = max(0.0, seconds_per_run["pool of 1"] - seconds_per_run["one engine"])
    call_overhead = max(0.0, small["pool of 1"] - small["one engine"])
    extra = max(0.0, small["pool of 2"] - small["pool of 1"])  # one more replica to dispatch to and gather from
    rounds = "round_seconds" in m
    paper = ["| replicas N | b_N, best-of-N | estimated ratio, best-of-N run |"
             + (" b_N, MCTS round of 8 trees | estimated ratio, MCTS round |" if rounds else ""),
             "|---:|---:|---:|" + ("---:|---:|" if rounds else "")]
    for n in ESTIMATE_REPLICAS:
        b, ratio = estimate(seconds_per_run["one engine"], run_overhead, extra, m["keys"], n, slack)
        row = f"| {n} | {b:.2f} | {ratio:.2f}x |"
        if rounds:  # each tree's 4 prompts of a round form one group
            b, ratio = estimate(m["round_seconds"], call_overhead, extra, [k for k in m["tree_keys"] for _ in range(4)],
                                n, slack)
            row += f" {b:.2f} | {ratio:.2f}x |"
        paper.append(row)
    verdict = lambda ok: "**met**" if ok else "**not met**"  # noqa: E731
    loads = lambda xs: " / ".join(f"{x:.2f}" for x in xs)  # noqa: E731
    lines = [
        f"Command: `.venv/bin/python scripts/bench_pool.py{' --backend hf' if args.backend == 'hf' else ''}` "
        f"({args.backend} backend; best-of-N over {args.problems} arithmetic problems x {args.n} samples of at "
        f"most {args.max_tokens} tokens, one merged engine call; the demo-size tiny model with random weights; "
        f"{args.repeats} repeats in rotated order, after a warm-up; engines started in {m['start_seconds']:.0f} s).",
        "", machine_line(), f"Load average (1/5/15 min) before: {loads(m['load_before'])}, after: "
        f"{loads(m['load_after'])}.", "", *table, "",
        f"- Throughput of a pool of 2 replicas on 1 thread each against one engine on 1 thread: "
        f"**{speedup:.2f}x** (per repeat: {', '.join(f'{x:.2f}x' for x in spread)}); target >= 1.7x: "
        f"{verdict(speedup >= 1.7)}.",
        f"- The pool's own cost, one replica behind the pool against the same engine in this process: "
        f"**{100 * lost:.1f}%** of throughput lost; target <= 10%: {verdict(lost <= 0.10)}. In CPU time (every "
        f"process of the run, so others' load does not enter): "
        f"{100 * (cpu_per_token['pool of 1'] / cpu_per_token['one engine'] - 1):+.1f}% per token.",
        f"- Per-call overhead (the 2-prompt x 1-token call against one engine): "
        f"{1000 * (small['pool of 1'] - small['one engine']):+.1f} ms with 1 replica, "
        f"{1000 * (small['pool of 2'] - small['one engine']):+.1f} ms with 2.", "",
        "**On paper, N replicas** (each on its own core or GPU): T_N = T_1 x b_N / N + o + d x (N - 1), and the "
        "throughput ratio T_1 / T_N. T_1 is one engine's time; b_N the busiest replica's prompts over the mean "
        f"under the routing rule (slack {slack}), computed on the workload's own routing keys; d = "
        f"{1000 * extra:.1f} ms, the measured cost of one more replica per call (pool of 2 minus pool of 1, "
        "small call). For the best-of-N run, T_1 is one engine's seconds per run and o = "
        f"{run_overhead:.3f} s the measured overhead of a run (pool of 1 minus one engine)."
        + (f" For an MCTS round (one merged call of 8 trees x 4 prompts), T_1 = {1000 * m['round_seconds']:.0f} ms, "
           "one engine's mean seconds per call in the locality runs below, and o = "
           f"{1000 * call_overhead:.1f} ms, the small call's overhead; a tree's prompts stay on one replica, so "
           "a round of 8 trees keeps at most 8 replicas busy." if rounds else "")
        + " The model assumes an engine's time falls in proportion to its share of the prompts, which holds "
        "while it is compute-bound: a GPU engine given too small a share runs below its peak, so real scaling "
        "flattens sooner.", "", *paper]
    if "locality" in m:
        lines += [
            "", f"**Prefix-cache locality** (vLLM): the cache-hit fraction (`cached_prompt_tokens / prompt_tokens`) "
            f"of MCTS over 8 problems searched together (`solve_batch`, {LOCALITY_MCTS['num_simulations']} "
            f"simulations, {LOCALITY_MCTS['leaves_per_round']} leaves per round, steps of at most "
            f"{LOCALITY_MCTS['max_step_tokens']} tokens, roots of ~52 tokens, a hash scorer), "
            f"{args.locality_seeds} seeds, each run from empty prefix caches. The gap is to one engine's run with "
            "the same seed (the trees differ: replica r samples with its own seed); the target is within 5 points. "
            "With 2 replicas a prompt routed without regard to its tree still lands on the replica holding its "
            "prefix half the time, so these gaps understate what tree affinity is worth with more replicas.", "",
            "| engine and routing | cache-hit fraction (mean) | gap to one engine (points) | per seed |",
            "|---|---:|---:|---|", *m["locality"]]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["vllm", "hf"], default="vllm", help="engine of every policy (default: vllm)")
    parser.add_argument("--problems", type=int, default=64, help="problems searched together (default: 64)")
    parser.add_argument("--n", type=int, default=8, help="samples per problem (default: 8)")
    parser.add_argument("--max_tokens", type=int, default=64, help="most tokens per sample (default: 64, the demo's)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per policy (default: 3)")
    parser.add_argument("--locality_seeds", type=int, default=3,
                        help="MCTS runs (seeds) per routing in the prefix-locality table, vLLM only; 0: skip (default: 3)")
    parser.add_argument("--no-doc", action="store_true", help="print only; do not write docs/benchmarks.md")
    parser.add_argument("--verbose", action="store_true", help="the engines' and Ray's INFO logs too")
    args = parser.parse_args()

    configure_logging(args.verbose)
    body = report(args, measure(args))
    print(body)
    if not args.no_doc:
        heading = "Engine pool" if args.backend == "vllm" else "Engine pool (transformers)"
        print(f"written to {update_section(heading, body)}")


if __name__ == "__main__":
    main()
