"""Engine pool: throughput of 2 replicas against one engine, and what the pool itself costs.

    python scripts/bench_pool.py                      # vLLM, 64 problems x 8 samples, 3 repeats; into docs/benchmarks.md
    python scripts/bench_pool.py --backend hf --no-doc

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
import os
import statistics
import tempfile
import time
from pathlib import Path


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
    import psutil

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


def mcts_cache_hits(policy, weights, problems: list[str], seed: int) -> float:
    """Cache-hit fraction of MCTS over the problems (searched together), from an empty prefix cache."""
    from bench_search import HashScorer  # a value per prefix from its hash: no scorer model to time

    from planner.solve import solve_batch

    policy.load_weights(weights)  # the same weights again: the engines drop their prefix caches
    before = policy.stats.copy()
    solve_batch(problems, policy, "mcts", HashScorer(), seed=seed, **LOCALITY_MCTS)
    spent = policy.stats - before
    return spent.cached_prompt_tokens / spent.prompt_tokens


def locality_rows(one, pool, folder: Path, seeds: int) -> list[str]:
    """MCTS over 8 trees: one engine's cache-hit fraction against the pool's under several routings."""
    import dataclasses

    from safetensors.torch import load_file

    weights = load_file(str(folder / "model.safetensors"))
    problems = [f"{i} Add the numbers 123 and 456, then 78 and 9: go." for i in range(8)]
    alone = [mcts_cache_hits(one, weights, problems, seed) for seed in range(seeds)]
    rows = [f"| one engine | {statistics.mean(alone):.3f} | | {', '.join(f'{x:.3f}' for x in alone)} |"]
    kept = pool.config
    try:
        for name, change in LOCALITY_ROUTES.items():
            pool.config = dataclasses.replace(kept, **change)
            hits = [mcts_cache_hits(pool, weights, problems, seed) for seed in range(seeds)]
            gap = statistics.mean(h - a for h, a in zip(hits, alone))
            rows.append(f"| pool of 2: {name} | {statistics.mean(hits):.3f} | {100 * gap:+.1f} | "
                        f"{', '.join(f'{x:.3f}' for x in hits)} |")
    finally:
        pool.config = kept
    return rows


def balance(keys: list[bytes], replicas: int, slack: float) -> float:
    """Most prompts on one replica over the mean (1 = perfectly even), under the pool's routing rule."""
    from planner.policy.routing import assign_replicas

    placed = assign_replicas(keys, replicas, slack)
    return max(placed.count(r) for r in range(replicas)) / (len(keys) / replicas)


def estimate_rows(one_seconds: float, big_overhead: float, small_pool1: float, small_pool2: float,
                  keys: list[bytes], slack: float) -> list[str]:
    """Paper estimate: T_N = T_1 * b_N / N + o + d * (N - 1), throughput ratio T_1 / T_N (see the section)."""
    extra = max(0.0, small_pool2 - small_pool1)  # one more replica to dispatch to and gather from
    rows = []
    for replicas in ESTIMATE_REPLICAS:
        b = balance(keys, replicas, slack)
        seconds = one_seconds * b / replicas + big_overhead + extra * (replicas - 1)
        rows.append(f"| {replicas} | {b:.2f} | {seconds:.2f} | {one_seconds / seconds:.2f}x |")
    return rows


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

    from benchdoc import machine_line, update_section

    from planner.logs import configure_logging
    configure_logging(args.verbose)
    import ray
    from tqdm import tqdm

    from planner.policy import EnginePool, PoolConfig, load_policy
    from verifiers.arithmetic import arithmetic_task

    load_before = os.getloadavg()
    options = {"threads": 1} | ({"kv_cache_gib": 0.5, "max_model_len": 256} if args.backend == "vllm" else {})
    problems = arithmetic_task(args.problems, seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        folder = build_model(Path(tmp) / "tiny")
        ray.init(num_cpus=3, include_dashboard=False, log_to_driver=args.verbose)
        started = time.perf_counter()
        policies = {"one engine": load_policy(folder, backend=args.backend, **options),
                    "pool of 2": EnginePool(folder, args.backend, config=PoolConfig(replicas=2), **options),
                    "pool of 1": EnginePool(folder, args.backend, config=PoolConfig(replicas=1), **options)}
        start_seconds = time.perf_counter() - started
        try:
            pool2 = policies["pool of 2"]
            prompts = [pool2.encode_prompt(p.question) for p in problems]
            keys = pool2.routing_keys(prompts)
            placed = pool2.route(prompts)
            pair = [prompts[placed.index(0)], prompts[placed.index(1)]]  # one prompt for each replica
            for policy in policies.values():  # warm-up: first calls pay one-time costs
                run_workload(policy, problems[:8], args.n, args.max_tokens, seed=1)
            totals = {name: [0, 0.0, 0.0] for name in policies}  # tokens, wall seconds, CPU seconds
            per_repeat = {name: [] for name in policies}
            names = list(policies)
            for r in tqdm(range(args.repeats), desc="repeats"):
                for name in names[r % 3:] + names[:r % 3]:
                    tokens, seconds, cpu = run_workload(policies[name], problems, args.n, args.max_tokens, seed=100 + r)
                    totals[name] = [totals[name][0] + tokens, totals[name][1] + seconds, totals[name][2] + cpu]
                    per_repeat[name].append(tokens / seconds)
            small = {name: call_seconds(policy, pair) for name, policy in policies.items()}
            locality = (locality_rows(policies["one engine"], pool2, folder, args.locality_seeds)
                        if args.backend == "vllm" and args.locality_seeds else [])
        finally:
            for policy in policies.values():
                policy.close()
            ray.shutdown()
    load_after = os.getloadavg()

    rate = {name: tokens / seconds for name, (tokens, seconds, _) in totals.items()}
    cpu_per_token = {name: 1e3 * cpu / tokens for name, (tokens, _, cpu) in totals.items()}  # CPU ms per token
    seconds_per_run = {name: totals[name][1] / args.repeats for name in totals}
    speedup = rate["pool of 2"] / rate["one engine"]
    lost = 1 - rate["pool of 1"] / rate["one engine"]
    spread = [b / a for a, b in zip(per_repeat["one engine"], per_repeat["pool of 2"])]
    table = ["| policy | tokens/s (pooled) | per repeat | seconds per run | ratio to one engine | "
             "CPU ms per token (all processes) | 2-prompt x 1-token call |", "|---|---:|---|---:|---:|---:|---:|"]
    for name in policies:
        runs = ", ".join(f"{x:,.0f}" for x in per_repeat[name])
        table.append(f"| {name} | {rate[name]:,.0f} | {runs} | {seconds_per_run[name]:.2f} | "
                     f"{rate[name] / rate['one engine']:.2f}x | {cpu_per_token[name]:.3f} | "
                     f"{1000 * small[name]:.1f} ms |")
    slack = PoolConfig().balance_slack
    big_overhead = seconds_per_run["pool of 1"] - seconds_per_run["one engine"]
    estimate = ["| replicas N | balance b_N (routing rule, this workload) | estimated seconds per run | "
                "estimated throughput ratio |", "|---:|---:|---:|---:|"]
    estimate += estimate_rows(seconds_per_run["one engine"], max(0.0, big_overhead), small["pool of 1"],
                              small["pool of 2"], keys, slack)
    verdict = lambda ok: "**met**" if ok else "**not met**"  # noqa: E731
    body = "\n".join([
        f"Command: `.venv/bin/python scripts/bench_pool.py{' --backend hf' if args.backend == 'hf' else ''}` "
        f"({args.backend} backend; best-of-N over {args.problems} arithmetic problems x {args.n} samples of at "
        f"most {args.max_tokens} tokens, one merged engine call; the demo-size tiny model with random weights; "
        f"{args.repeats} repeats in rotated order, after a warm-up; engines started in {start_seconds:.0f} s).", "",
        machine_line(), f"Load average (1/5/15 min) before: {' / '.join(f'{x:.2f}' for x in load_before)}, "
        f"after: {' / '.join(f'{x:.2f}' for x in load_after)}.", "",
        *table, "",
        f"- Throughput of a pool of 2 replicas on 1 thread each against one engine on 1 thread: "
        f"**{speedup:.2f}x** (per repeat: {', '.join(f'{x:.2f}x' for x in spread)}); target >= 1.7x: "
        f"{verdict(speedup >= 1.7)}.",
        f"- The pool's own cost, one replica behind the pool against the same engine in this process: "
        f"**{100 * lost:.1f}%** of throughput lost ({big_overhead:+.3f} s per run); target <= 10%: "
        f"{verdict(lost <= 0.10)}. In CPU time (every process of the run, so others' load does not enter): "
        f"{100 * (cpu_per_token['pool of 1'] / cpu_per_token['one engine'] - 1):+.1f}% per token.",
        f"- Per-call overhead of the pool (the 2-prompt x 1-token call): "
        f"{1000 * (small['pool of 1'] - small['one engine']):+.1f} ms with 1 replica, "
        f"{1000 * (small['pool of 2'] - small['one engine']):+.1f} ms with 2.", "",
        "**On paper, N replicas** (each on its own core or GPU): T_N = T_1 x b_N / N + o + d x (N - 1), with T_1 "
        "the one engine's seconds per run, b_N the busiest replica's share of the prompts over the mean under "
        f"the routing rule (rendezvous hashing with bounded loads, slack {slack}; computed on this workload's "
        "own routing keys), o the measured pool overhead of a run (pool of 1 minus one engine, "
        f"{max(0.0, big_overhead):.3f} s), and d the measured cost of one more replica per call (pool of 2 minus "
        f"pool of 1 on the small call, {1000 * max(0.0, small['pool of 2'] - small['pool of 1']):.1f} ms). "
        "It assumes an engine's time falls in proportion to its share of the prompts, which holds while the "
        "engine is compute-bound: a GPU engine given too small a share runs below its peak, so real scaling "
        "flattens sooner. A search's round is one such call: a round holding P trees keeps at most P replicas "
        "busy (a tree's prompts stay on one replica), so N beyond the trees per round buys nothing.", "",
        *estimate])
    if locality:
        body += "\n\n" + "\n".join([
            f"**Prefix-cache locality** (vLLM): the cache-hit fraction (`cached_prompt_tokens / prompt_tokens`) of "
            f"MCTS over 8 problems searched together (`solve_batch`, {LOCALITY_MCTS['num_simulations']} simulations, "
            f"{LOCALITY_MCTS['leaves_per_round']} leaves per round, steps of at most "
            f"{LOCALITY_MCTS['max_step_tokens']} tokens, roots of ~52 tokens, a hash scorer), "
            f"{args.locality_seeds} seeds, each run from empty prefix caches. The gap is to one engine's run with the "
            "same seed (the trees differ: replica r samples with its own seed); the target is within 5 points.", "",
            "| engine and routing | cache-hit fraction (mean) | gap to one engine (points) | per seed |",
            "|---|---:|---:|---|", *locality])
    print(body)
    if not args.no_doc:
        print(f"written to {update_section('Engine pool', body)}")


if __name__ == "__main__":
    main()
