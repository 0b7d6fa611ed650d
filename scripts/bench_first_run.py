"""A newcomer's first run, timed: the README's "train on your data" example on a 20-row JSONL, from a fresh clone.

    .venv/bin/python scripts/bench_first_run.py            # writes docs/benchmarks.md, "A first run on a CPU"
    .venv/bin/python scripts/bench_first_run.py --no-doc   # prints the table only

What it does, as a new user would:
1. clones this repository (its committed HEAD) into a temporary folder, with an empty model cache
   (`TREERL_CACHE`), so SmolLM2 is converted from its wheel again, as on a fresh machine; the clone
   uses this checkout's `.venv` (`make setup`'s install is timed apart with `--setup`);
2. writes 20 one-step word problems as `problems.jsonl` (numbers drawn from `--seed`);
3. runs the README's first Python block under "## Train on your data", as written, in the clone;
4. samples the memory of the whole process tree (the trainer and any engine process it starts) every
   0.2 s, and reads the run's metrics.jsonl.
It reports the wall time, each iteration's seconds and rewards, the peak memory, and whether the run
showed progress (a progress bar on stderr). The targets (issue "The product surface"): the example
within 5 minutes with nonzero rewards; an iteration within a minute; peak memory within 4 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from benchdoc import machine_line, update_section

REPO = Path(__file__).resolve().parents[1]
HEADING = "A first run on a CPU"
ITEMS = ("apples", "books", "marbles", "stamps", "pencils")


def word_problems(count: int, seed: int) -> list[dict]:
    """`count` one-step word problems (a sum, a difference or a product of small numbers) with their answers."""
    rng = random.Random(seed)
    rows = []
    for index in range(count):
        a, b, item = rng.randint(2, 9), rng.randint(2, 9), rng.choice(ITEMS)
        kind = index % 3
        if kind == 0:
            rows.append({"question": f"Tom has {a} {item} and buys {b} more. How many {item} does he have now?",
                         "answer": a + b})
        elif kind == 1:
            rows.append({"question": f"Ann had {a + b} {item} and gave {b} away. How many {item} are left?",
                         "answer": a})
        else:
            rows.append({"question": f"There are {a} boxes with {b} {item} in each box. How many {item} are there?",
                         "answer": a * b})
    return rows


def readme_training_example(readme: Path) -> str:
    """The first ```python block after the "## Train on your data" heading."""
    text = readme.read_text()
    start = text.find("## Train on your data")
    match = re.search(r"```python\n(.*?)```", text[start:], re.S) if start != -1 else None
    if match is None:
        raise SystemExit(f"{readme} has no ```python block under '## Train on your data'")
    return match.group(1)


class TreeMemory:
    """Peak memory of a process and all its descendants, sampled every `interval` seconds: the sum of their
    proportional set sizes (PSS: a page shared by k processes counts 1/k in each, so shared libraries and
    shared weights count once), or of their resident sets where PSS cannot be read."""

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        self.root, self.interval, self.peak_mb = psutil.Process(pid), interval, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            total = 0
            try:
                for process in [self.root, *self.root.children(recursive=True)]:
                    try:
                        total += process.memory_full_info().pss
                    except (psutil.Error, AttributeError):
                        try:
                            total += process.memory_info().rss
                        except psutil.Error:
                            pass
            except psutil.Error:
                return
            self.peak_mb = max(self.peak_mb, total / 2**20)
            self._stop.wait(self.interval)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak_mb


def run_setup(clone: Path) -> float:
    """`make setup` in the clone (a new .venv from PyPI); its wall seconds."""
    start = time.perf_counter()
    subprocess.run(["make", "setup"], cwd=clone, check=True)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0, help="seed of the 20 problems' numbers")
    parser.add_argument("--setup", action="store_true", help="also time `make setup` in the clone (a new .venv, "
                                                            "several minutes) instead of using this checkout's")
    parser.add_argument("--no-doc", action="store_true", help="print the table; leave docs/benchmarks.md alone")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="first_run_") as tmp:
        clone = Path(tmp) / "treerl"
        subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
        setup_seconds = run_setup(clone) if args.setup else None
        if not args.setup:
            (clone / ".venv").symlink_to(REPO / ".venv")
        rows = word_problems(20, args.seed)
        (clone / "problems.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
        example = readme_training_example(clone / "README.md")
        env = {**os.environ, "TREERL_CACHE": str(Path(tmp) / "cache"), "PYTHONPATH": str(clone)}
        print(f"running the README's example in {clone} ...", flush=True)
        start = time.perf_counter()
        process = subprocess.Popen([str(clone / ".venv" / "bin" / "python"), "-c", example], cwd=clone, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        memory = TreeMemory(process.pid)
        stdout, stderr = process.communicate()
        seconds = time.perf_counter() - start
        peak_mb = memory.stop()
        if process.returncode != 0:
            sys.stderr.write(stderr[-4000:])
            raise SystemExit(f"the README's example failed (exit {process.returncode})")
        metrics_files = sorted(clone.glob("runs/*/metrics.jsonl"))
        if not metrics_files:
            raise SystemExit("the example wrote no runs/*/metrics.jsonl")
        history = [json.loads(line) for line in metrics_files[0].read_text().splitlines() if line.strip()]

    progress_shown = "search-train" in stderr
    rewards = [m["reward_mean"] for m in history]
    iteration_seconds = [m["seconds"] for m in history]
    checks = {
        "example within 5 minutes": seconds <= 300,
        "nonzero rewards": any(r > 0 for r in rewards),
        "progress shown": progress_shown,
        "every iteration within a minute": max(iteration_seconds) <= 60,
        "peak memory within 4 GB": peak_mb <= 4096,
    }
    setup = f"`make setup` in the clone: {setup_seconds:.0f} s; " if setup_seconds is not None else ""
    body = "\n".join([
        "Command: `.venv/bin/python scripts/bench_first_run.py`",
        "",
        machine_line(),
        "",
        "A fresh clone of the repository with an empty model cache (SmolLM2-135M-Instruct is converted from "
        "its wheel inside the timed run) runs the README's \"train on your data\" Python block as written: "
        f"`rl.train` with the `cpu` preset on 20 one-step word problems (`problems.jsonl`, seed {args.seed}). "
        f"{setup}The clone otherwise uses this checkout's `.venv`. Memory is the peak of the process tree's summed "
        "proportional set size (shared pages counted once), sampled every 0.2 s.",
        "",
        "| what | measured |",
        "|---|---|",
        f"| wall time of the example (model conversion, engine start, all iterations) | {seconds:.0f} s |",
        f"| seconds of each iteration (search, update) | "
        f"{', '.join(f'{s:.1f}' for s in iteration_seconds)} |",
        f"| mean reward of each iteration | {', '.join(f'{r:.3f}' for r in rewards)} |",
        f"| peak memory, process tree (PSS) | {peak_mb:,.0f} MB |",
        f"| progress shown (a bar per iteration on stderr) | {'yes' if progress_shown else 'no'} |",
        "",
        *(f"- Target, {name}: {'met' if ok else 'NOT met'}." for name, ok in checks.items()),
    ])
    print(body)
    if not args.no_doc:
        print(f"wrote {update_section(HEADING, body)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
