"""Hostile programs against the sandbox's resource bounds: forks, threads, memory, disk, CPU.

Each bomb runs under `run_code` with small limits and must stay inside them: the memory of the
whole process tree (not of each process), the run's own process count (not one shared with other
runs), the disk quota, and the wall clock -- and leave no process behind. The last test is the
concurrency case that failed before: a correct threaded solution is judged while another sandbox
holds all the processes it may. Information attacks are in test_sandbox_hostile.py; the fork
bomb and detached children of the generic runner in test_verifiers_code.py.
"""

from __future__ import annotations

import gzip
import json
import os
import threading
import time
import uuid
from pathlib import Path

import pytest

from verifiers.code import run_code
from verifiers.code_judge import judge_humaneval
from verifiers.sandbox import SandboxLimits, sandbox_mode

from test_sandbox_hostile import _processes_with  # noqa: E402  (tests/ is on sys.path under pytest)

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
MODE = sandbox_mode()
AS_ROOT = os.geteuid() == 0
SMALL = SandboxLimits(timeout_s=15.0, memory_mb=512, max_processes=16, disk_mb=32, max_file_mb=64)
NO_PROCESS_LIMIT = "not root: no per-run user id, so no process count of the run's own (RLIMIT_NPROC would count the caller's)"



def _none_left(marker: str) -> bool:
    deadline = time.monotonic() + 3
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _processes_with(marker) == []


# Children allocate and touch SIZE MiB each, then hold it; the parent counts how many hold at once.
MEMORY_BOMB = """
import os, time
SIZE, N = 300, 4
children = []
for i in range(N):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        try:
            block = b"\\x01" * (SIZE << 20)
        except MemoryError:
            os._exit(3)
        open("held-%d" % i, "w").close()
        time.sleep(30)
        os._exit(0)
    children.append((i, pid))
time.sleep(3)
holding = [i for i, pid in children if os.waitpid(pid, os.WNOHANG) == (0, 0) and os.path.exists("held-%d" % i)]
print("forked", len(children), "holding", len(holding), flush=True)
"""


@pytest.mark.skipif(not AS_ROOT, reason=NO_PROCESS_LIMIT + ": memory is bounded per process only")
def test_memory_of_the_whole_tree_is_bounded():
    # 4 children x 300 MiB against 512 MiB for the run: before, each child had the whole limit (four took 700 MiB each).
    result = run_code(MEMORY_BOMB, SMALL)
    assert result.passed, result
    words = result.stdout.split()
    assert int(words[3]) * 300 <= SMALL.memory_mb, result.stdout  # 1 at most with a cgroup, 0 with the split


def test_threads_share_the_process_memory_limit():
    program = """
import threading
held = []
def grab():
    try:
        held.append(b"\\x01" * (300 << 20))
    except MemoryError:
        pass
threads = [threading.Thread(target=grab) for _ in range(4)]
[t.start() for t in threads]
[t.join() for t in threads]
print("held", len(held))
"""
    result = run_code(program, SMALL)
    assert result.status in ("passed", "error"), result
    if result.passed:
        assert int(result.stdout.split()[1]) * 300 <= SMALL.memory_mb, result.stdout


@pytest.mark.skipif(not AS_ROOT, reason=NO_PROCESS_LIMIT)
def test_thread_bomb_is_bounded_by_the_runs_own_process_limit():
    program = """
import threading, time
started = 0
try:
    for _ in range(10000):
        threading.Thread(target=time.sleep, args=(5,), daemon=True).start()
        started += 1
except RuntimeError:
    pass
print("started", started)
"""
    result = run_code(program, SMALL)
    assert result.passed, result
    assert 0 < int(result.stdout.split()[1]) < SMALL.max_processes


DISK_FILL = """
import os
written = 0
try:
    for i in range(320):
        with open(os.path.join(%r, "fill-%%d" %% i), "wb") as f:
            f.write(b"\\x01" * (1 << 20))
        written += 1
except OSError as exc:
    print("stopped", type(exc).__name__)
print("written", written)
"""


@pytest.mark.skipif(MODE == "rlimits", reason="rlimits fallback: no private tmpfs, writes are bounded per file only")
@pytest.mark.parametrize("where", [".", "/tmp", "/dev/shm"])
def test_disk_fill_stops_at_the_quota(where):
    # Before: 320 MiB written in 0.66 s. Work dir, /tmp and /dev/shm share one quota of disk_mb.
    start = time.monotonic()
    result = run_code(DISK_FILL % where, SMALL)
    assert result.passed and "stopped OSError" in result.stdout, result
    assert int(result.stdout.split()[-1]) <= SMALL.disk_mb and time.monotonic() - start < 10


@pytest.mark.skipif(MODE == "rlimits", reason="rlimits fallback: no private tmpfs, so no bound on the number of files")
def test_inode_bomb_stops_at_the_file_count():
    program = """
import os
made = 0
try:
    for i in range(200000):
        open("f%d" % i, "w").close()
        made += 1
except OSError as exc:
    print("stopped", type(exc).__name__)
print("made", made)
"""
    result = run_code(program, SMALL)
    assert result.passed and "stopped OSError" in result.stdout, result
    assert int(result.stdout.split()[-1]) < 20000


@pytest.mark.skipif(not AS_ROOT, reason="not root: processes that leave the process group survive without a PID namespace or per-run user id")
def test_busy_children_are_killed_at_the_deadline():
    marker = "30." + str(uuid.uuid4().int)[:12]
    program = f"""
import os
for _ in range(4):
    if os.fork() == 0:
        os.setsid()
        os.execv("/bin/sh", ["sh", "-c", "while :; do :; done", "{marker}"])
while True:
    pass
"""
    start = time.monotonic()
    result = run_code(program, SandboxLimits(timeout_s=2.0, max_processes=16))
    assert result.status == "timeout" and time.monotonic() - start < 6, result
    assert _none_left(marker)


@pytest.mark.skipif(not AS_ROOT, reason=NO_PROCESS_LIMIT)
def test_threaded_solution_passes_while_another_sandbox_holds_its_processes():
    """Before: sandboxes shared one RLIMIT_NPROC (one user), and a correct threaded solution
    failed while another sandbox held 20 processes. Now each run has its own count."""
    marker = "30." + str(uuid.uuid4().int)[:12]
    holder = f"""
import os
forked = 0
for _ in range(64):
    try:
        if os.fork() == 0:
            os.execv("/bin/sleep", ["sleep", "{marker}"])
        forked += 1
    except OSError:
        break
print("holding", forked, flush=True)
os.execv("/bin/sleep", ["sleep", "{marker}"])
"""
    held = {}
    runner = threading.Thread(target=lambda: held.update(result=run_code(holder, SandboxLimits(timeout_s=8.0, max_processes=24, memory_mb=24 * 128))))
    runner.start()
    deadline = time.monotonic() + 6
    while len(_processes_with(marker)) < 20 and time.monotonic() < deadline:
        time.sleep(0.05)
    holding = len(_processes_with(marker))
    with gzip.open(DATA / "humaneval" / "HumanEval.jsonl.gz", "rt") as f:
        row = json.loads(f.readline())
    threaded = """    import threading
    found = []
    def scan(start):
        for i in range(start, len(numbers), 4):
            for j in range(i + 1, len(numbers)):
                if abs(numbers[i] - numbers[j]) < threshold:
                    found.append((i, j))
    threads = [threading.Thread(target=scan, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return bool(found)
"""
    result = judge_humaneval(row["prompt"], threaded, row["test"], row["entry_point"], SandboxLimits(timeout_s=20.0))
    runner.join()
    assert holding >= 20, holding  # the other sandbox did hold its processes meanwhile
    assert result.passed, result
    assert _none_left(marker)
