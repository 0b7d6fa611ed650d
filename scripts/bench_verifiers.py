"""Benchmark verifier throughput on the local datasets and print a Markdown table.

Measures answers per second for GSM8K (gold solutions: extraction + verification, which takes
the in-process fast path for plain numbers; and the answer rewritten as ``x = N``, which goes
through math-verify/sympy in the bounded worker pool) and MATH-500
(boxed own answers, which take the in-process fast path, and answers of a different row, which
go through math-verify/sympy in the bounded worker pool), and HumanEval canonical solutions per
second two ways, side by side: the old harness program under `run_code` (one sandboxed process,
exit status 0 counts as a pass -- forgeable) and `grade_humaneval`'s judge (a judge process and a
candidate process per problem, verdict decided by the judge); the judge's per-problem overhead
is printed as the ratio of the two.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_verifiers.py --threads 2
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from concurrent.futures import ThreadPoolExecutor

from tqdm import tqdm

from verifiers.code import grade_humaneval, humaneval_program, run_code
from verifiers.math import extract_answer, verify
from verifiers.sandbox import SandboxLimits, namespaces_available
from verifiers.tasks import load_task


def _throughput(name: str, items: list, fn, threads: int) -> tuple[str, int, float, float]:
    """Run ``fn`` over ``items`` on ``threads`` threads; (name, n, seconds, ok fraction)."""
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=threads) as executor:
        results = list(tqdm(executor.map(fn, items), total=len(items), desc=name, leave=False))
    seconds = time.monotonic() - start
    return name, len(items), seconds, sum(map(bool, results)) / max(1, len(items))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2, help="caller threads (math workers: VERIFIERS_MATH_WORKERS)")
    parser.add_argument("--code-workers", type=int, default=2, help="sandboxes running at once")
    parser.add_argument("--limit", type=int, default=None, help="use only the first N rows of each task")
    args = parser.parse_args()

    gsm8k = load_task("gsm8k").problems[: args.limit]
    math500 = load_task("math500").problems[: args.limit]
    humaneval = load_task("humaneval").problems[: args.limit]
    verify("x^2", "x*x")  # start the math workers before timing

    rows = [
        _throughput("GSM8K gold solutions", gsm8k, lambda p: verify(p.reference, extract_answer(p.meta["solution"])), args.threads),
        _throughput("GSM8K answer as 'x = N' (sympy)", gsm8k, lambda p: verify(p.reference, f"x = {p.reference}"), args.threads),
        _throughput("MATH-500 own answer, boxed", math500, lambda p: verify(p.reference, extract_answer(f"\\boxed{{{p.reference}}}")), args.threads),
        _throughput(
            "MATH-500 other row's answer (sympy)",
            list(zip(math500, math500[1:] + math500[:1])),
            lambda pq: verify(pq[0].reference, pq[1].reference),
            args.threads,
        ),
        _throughput(
            "HumanEval canonical, run_code exit status (old)",
            humaneval,
            lambda p: run_code(
                humaneval_program(p.reference["prompt"], p.meta["canonical_solution"], p.reference["test"], p.reference["entry_point"]),
                SandboxLimits(timeout_s=10.0),
            ).passed,
            args.code_workers,
        ),
        _throughput(
            "HumanEval canonical, judged (grade_humaneval)",
            humaneval,
            lambda p: grade_humaneval(p.meta["canonical_solution"], p.reference, SandboxLimits(timeout_s=10.0)),
            args.code_workers,
        ),
    ]
    print(f"\nmachine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"namespaces: {namespaces_available()}, math workers: {os.environ.get('VERIFIERS_MATH_WORKERS', 'default')}")
    print("\n| benchmark | items | seconds | items/s | verified |")
    print("|---|---:|---:|---:|---:|")
    for name, n, seconds, ok in rows:
        print(f"| {name} | {n} | {seconds:.2f} | {n / seconds:.1f} | {ok:.1%} |")
    (_, n, old_seconds, _), (_, _, judged_seconds, _) = rows[-2:]
    print(f"\nHumanEval judge overhead: {1000 * old_seconds / n:.0f} ms -> {1000 * judged_seconds / n:.0f} ms "
          f"per problem ({judged_seconds / old_seconds:.2f}x the exit-status path, {args.code_workers} at a time)")


if __name__ == "__main__":
    main()
