"""Code sandbox: the generic runner on HumanEval programs, and containment of hostile programs.

The judge that grades HumanEval (and the forgeries it stops) is tested in test_verifiers_code_judge.py.
"""

from __future__ import annotations

import gzip
import json
import os
import pwd
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest

from verifiers.code import extract_code, humaneval_program, run_code, run_many
from verifiers.sandbox import SandboxLimits

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
AS_ROOT = os.geteuid() == 0
FAST = SandboxLimits(timeout_s=3.0, max_processes=16, memory_mb=512)


def _humaneval() -> list[dict]:
    with gzip.open(DATA / "humaneval" / "HumanEval.jsonl.gz", "rt") as f:
        return [json.loads(line) for line in f]


def test_humaneval_canonical_pass_empty_and_wrong_fail():
    rows = _humaneval()
    assert len(rows) == 164
    programs = []
    for i, row in enumerate(rows):
        wrong = rows[(i + 1) % len(rows)]["canonical_solution"]  # another problem's body
        for completion in (row["canonical_solution"], "    pass\n", wrong):
            programs.append(humaneval_program(row["prompt"], completion, row["test"], row["entry_point"]))
    start = time.monotonic()
    results = run_many(programs, SandboxLimits(timeout_s=10.0), workers=4)
    elapsed = time.monotonic() - start
    canonical, empty, wrong = results[0::3], results[1::3], results[2::3]
    assert [r.status for r in canonical] == ["passed"] * 164, [(rows[i]["task_id"], r.stderr[-300:]) for i, r in enumerate(canonical) if not r.passed]
    assert not any(r.passed for r in empty)
    assert not any(r.passed for r in wrong)
    assert {r.status for r in empty} <= {"failed", "error"}
    assert sum(r.status == "failed" for r in empty) > 100  # most fail an assertion, not crash
    assert elapsed < 60


def test_extract_code_takes_the_last_fenced_block():
    assert extract_code("```py\nx = 1\n```") == "x = 1\n"
    assert extract_code("```python\nx = 1\n```\nthen\n```python\ny = 2\n```\ndone") == "y = 2\n"
    assert extract_code("    return 1\n") == "    return 1\n"


def test_status_and_output_truncation():
    assert run_code("print('hi')", FAST).stdout == "hi\n"
    assert run_code("assert 1 == 2", FAST).status == "failed"
    assert run_code("raise ValueError('boom')", FAST).status == "error"
    assert run_code("def f(:\n", FAST).status == "error"
    result = run_code("print('x' * 100000)", SandboxLimits(timeout_s=3.0, max_output_chars=100))
    assert result.passed and len(result.stdout) < 200 and result.stdout.endswith("[truncated]")
    with pytest.raises(TypeError, match="program must be Python source"):
        run_code(b"print(1)")
    with pytest.raises(ValueError, match="timeout_s must be a number > 0"):
        SandboxLimits(timeout_s=0)


def test_infinite_loop_times_out():
    start = time.monotonic()
    result = run_code("while True:\n    pass\n", SandboxLimits(timeout_s=2.0))
    assert result.status == "timeout" and time.monotonic() - start < 4.0


def test_huge_allocation_contained():
    result = run_code("x = bytearray(10 * 1024 ** 3)\nprint('allocated')", FAST)
    assert result.status == "error" and "MemoryError" in result.stderr and "allocated" not in result.stdout


def _processes_with(marker: str) -> list[int]:
    """Host pids whose command line contains ``marker``."""
    found = []
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            pass
    return found


def _wait_gone(marker: str, seconds: float = 3.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _processes_with(marker)


def _marker() -> str:
    """A unique ``sleep`` duration (30.<12 random digits> s) that tags the forked children."""
    return "30." + str(uuid.uuid4().int)[:12]


# Bounded even if every limit failed: at most 10,000 children, each `sleep` for ~30 s.
FORK_BOMB = """
import os, time
forked = 0
for _ in range(10000):
    try:
        pid = os.fork()
    except OSError:
        continue
    if pid == 0:
        {detach}
        {ready}
        os.execv("/bin/sleep", ["sleep", "{marker}"])
    forked += 1
print("forked", forked, flush=True)
{tail}
"""


@pytest.mark.skipif(not AS_ROOT, reason="RLIMIT_NPROC is only enforced via the uid switch made as root")
def test_fork_bomb_contained():
    marker = _marker()
    program = FORK_BOMB.format(marker=marker, detach="pass", ready="pass", tail="time.sleep(60)")
    outcome = {}
    start = time.monotonic()
    runner = threading.Thread(target=lambda: outcome.update(result=run_code(program, FAST)))
    runner.start()
    seen = 0
    while runner.is_alive():
        seen = max(seen, len(_processes_with(marker)))
        time.sleep(0.05)
    runner.join()
    result = outcome["result"]
    assert result.status == "timeout" and time.monotonic() - start < 5.0
    forked = int(result.stdout.split()[1])
    assert 0 < forked < FAST.max_processes  # RLIMIT_NPROC stopped it
    assert 0 < seen <= forked  # the children did run ...
    assert _wait_gone(marker) == []  # ... and none survived


@pytest.mark.skipif(not AS_ROOT, reason="not root: no PID namespace and no per-run user id to reap detached children by")
def test_detached_children_killed_when_program_exits():
    marker = _marker()
    wait_ready = "deadline = time.time() + 2\nwhile len(os.listdir('.')) < 4 and time.time() < deadline:\n    time.sleep(0.01)\nprint('ready', len(os.listdir('.')))"
    ready = "open(str(os.getpid()), 'w').close()"
    program = FORK_BOMB.format(marker=marker, detach="os.setsid()", ready=ready, tail=wait_ready)
    result = run_code(program.replace("range(10000)", "range(3)"), FAST)
    assert result.passed and "forked 3" in result.stdout and "ready 4" in result.stdout  # main.py + 3
    assert _wait_gone(marker) == []


def test_socket_guard_without_network_namespace(monkeypatch):
    monkeypatch.setenv("VERIFIERS_SANDBOX_MODE", "rlimits")
    result = run_code("import socket\nsocket.socket()\nprint('OPENED')", FAST)
    assert result.status == "error" and "network access is disabled" in result.stderr


def test_network_blocked():
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.setblocking(False)
    port = server.getsockname()[1]
    try:
        program = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('CONNECTED')"
        result = run_code(program, FAST)
        assert result.status == "error" and "CONNECTED" not in result.stdout
        with pytest.raises(BlockingIOError):
            server.accept()
    finally:
        server.close()


@pytest.mark.skipif(not AS_ROOT, reason="as a normal user the sandbox runs as that user")
def test_writes_outside_workdir_denied():
    home = pwd.getpwuid(os.getuid()).pw_dir
    targets = [f"/etc/verifiers-probe-{uuid.uuid4().hex[:8]}", os.path.join(home, f"verifiers-probe-{uuid.uuid4().hex[:8]}")]
    for target in targets:
        result = run_code(f"open({target!r}, 'w').write('pwned')\nprint('WROTE')", FAST)
        # PermissionError in the rlimits fallback; with namespaces the path does not exist (or is read-only).
        assert result.status == "error" and "WROTE" not in result.stdout, result
        assert any(e in result.stderr for e in ("PermissionError", "FileNotFoundError", "Read-only file system"))
        assert not os.path.exists(target)
    # Writing inside its own working directory (also its HOME) is allowed.
    assert run_code("import os\nopen(os.path.expanduser('~/x'), 'w').write('ok')\nprint(open('x').read())", FAST).stdout == "ok\n"


def test_environment_secret_not_visible(monkeypatch):
    secret = "s3cr3t-" + uuid.uuid4().hex
    monkeypatch.setenv("VERIFIERS_TEST_SECRET", secret)
    program = (
        "import os, glob\n"
        "print(dict(os.environ))\n"
        "for path in glob.glob('/proc/*/environ'):\n"
        "    try:\n"
        "        print(open(path, 'rb').read())\n"
        "    except OSError:\n"
        "        pass\n"
    )
    result = run_code(program, SandboxLimits(timeout_s=5.0, max_output_chars=10**6))
    assert result.passed and "HOME" in result.stdout
    assert secret not in result.stdout and "VERIFIERS_TEST_SECRET" not in result.stdout
