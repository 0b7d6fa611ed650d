"""Run an untrusted Python program (e.g. a HumanEval completion plus its tests) in a sandbox.

Containment, layer by layer:

- a child interpreter in its own session/process group, killed as a group (SIGKILL) when the
  wall-clock limit passes;
- where the machine allows it (root, or CAP_SYS_ADMIN), new PID and network namespaces via
  ``unshare --net --pid --kill-child``: the program sees no network interface but a downed
  loopback, and when its first process dies the kernel kills every process it started, even
  ones that left the process group;
- as root, the program drops to the unprivileged ``nobody`` user before it starts, so
  RLIMIT_NPROC applies (root ignores it: a fork bomb is contained only this way) and files such
  as ``/etc`` and ``/root`` are not writable;
- resource limits: CPU seconds, address space (RLIMIT_AS), process count, file size;
- a fresh temporary directory as working directory, HOME and TMPDIR, removed afterwards;
- a scrubbed environment (no secrets of the caller), ``python -I`` (no user site, no PYTHON*);
- without a network namespace, an in-process guard that replaces ``socket.socket``.

Not contained: the program can still read world-readable files and write world-writable places
such as ``/tmp``; the file-size limit is per file, so many files can still fill the disk within
the time limit; without the PID namespace, children that call ``setsid()`` escape the group kill.
It is not a security boundary against kernel exploits.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

__all__ = [
    "SandboxLimits",
    "SandboxResult",
    "extract_code",
    "humaneval_program",
    "namespaces_available",
    "run_code",
    "run_many",
    "grade_humaneval",
    "sandbox_python",
]

Status = Literal["passed", "failed", "timeout", "error"]


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandboxed run."""

    timeout_s: float = 10.0
    """Wall-clock seconds before the whole process group is killed (status ``timeout``)."""
    memory_mb: int = 1024
    """Address-space limit (RLIMIT_AS) in MiB; allocations beyond it raise MemoryError."""
    max_processes: int = 64
    """RLIMIT_NPROC for the sandbox user. It counts all processes of that user, so sandboxes
    running at the same time share it. Enforced only when the sandbox runs as ``nobody``."""
    max_file_mb: int = 16
    """Largest file (and captured output) the program may write (RLIMIT_FSIZE), in MiB."""
    max_output_chars: int = 8192
    """Captured stdout/stderr are truncated to this many characters each."""

    def __post_init__(self) -> None:
        for name in ("timeout_s", "memory_mb", "max_processes", "max_file_mb", "max_output_chars"):
            if getattr(self, name) <= 0:
                raise ValueError(f"SandboxLimits.{name} must be > 0, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class SandboxResult:
    """Outcome of one sandboxed run."""

    status: Status
    """``passed`` (exit 0), ``failed`` (an AssertionError ended it), ``timeout`` (wall-clock or
    CPU limit hit), ``error`` (any other exception, crash, signal or limit)."""
    returncode: int | None
    """Exit code of the child (negative: killed by that signal); None on timeout."""
    stdout: str
    stderr: str
    seconds: float

    @property
    def passed(self) -> bool:
        return self.status == "passed"


# Trusted bootstrap, run as ``python -I -c``: limits, drop privileges, optional socket guard,
# then the untrusted main.py as __main__ in this same interpreter.
_BOOTSTRAP = r"""
import json, os, resource, sys
cfg = json.loads(sys.argv[1])
os.chdir(cfg["workdir"])
for name, value in cfg["limits"].items():
    resource.setrlimit(getattr(resource, name), (value, value))
if cfg["uid"] is not None:
    os.setgroups([])
    os.setgid(cfg["gid"])
    os.setuid(cfg["uid"])
if cfg["guard_socket"]:
    import socket
    def _no_network(*args, **kwargs):
        raise PermissionError("network access is disabled in the sandbox")
    for _name in ("socket", "create_connection", "socketpair", "fromfd", "create_server"):
        setattr(socket, _name, _no_network)
    try:
        import _socket
        _socket.socket = _no_network
    except ImportError:
        pass
sys.argv = ["main.py"]
sys.path.insert(0, cfg["workdir"])
del cfg, json, resource
import runpy
runpy.run_path("main.py", run_name="__main__")
"""

_UNSHARE = shutil.which("unshare")


@lru_cache(maxsize=1)
def namespaces_available() -> bool:
    """Whether ``unshare --net --pid --fork --kill-child`` works here (needs root or CAP_SYS_ADMIN)."""
    if _UNSHARE is None:
        return False
    try:
        done = subprocess.run(
            [_UNSHARE, "--net", "--pid", "--fork", "--kill-child", "true"],
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _sandbox_user() -> tuple[int, int] | None:
    """(uid, gid) of ``nobody`` when we are root and can switch to it; None otherwise."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam("nobody")
    except KeyError:
        return None
    return entry.pw_uid, entry.pw_gid


@lru_cache(maxsize=4)
def sandbox_python(user: tuple[int, int] | None) -> str:
    """An interpreter the sandbox user can run, stdlib included.

    ``VERIFIERS_SANDBOX_PYTHON`` wins when set. Otherwise ``sys.executable`` if ``user`` can import
    the stdlib with it (a pyenv or venv Python under ``/root`` cannot be read by ``nobody``), else
    the system ``python3``. Raises RuntimeError naming the fix when none works.
    """
    override = os.environ.get("VERIFIERS_SANDBOX_PYTHON")
    candidates = [override] if override else [sys.executable, "/usr/bin/python3", shutil.which("python3")]
    if user is None:
        return candidates[0]
    for candidate in dict.fromkeys(c for c in candidates if c):
        try:
            probe = subprocess.run(
                [candidate, "-I", "-c", "import runpy, pkgutil, typing, math, json, resource"],
                user=user[0],
                group=user[1],
                extra_groups=[],
                capture_output=True,
                timeout=30,
                cwd="/",
            )
        except (OSError, subprocess.SubprocessError):
            continue
        if probe.returncode == 0:
            return candidate
    raise RuntimeError(
        f"no Python interpreter that user id {user[0]} can run was found among {candidates}; "
        "set VERIFIERS_SANDBOX_PYTHON to a python3 whose files are world-readable"
    )


def _read_truncated(handle, limit: int) -> str:
    handle.seek(0)
    data = handle.read(limit * 4 + 4).decode("utf-8", errors="replace")
    return data if len(data) <= limit else data[:limit] + "\n...[truncated]"


def _classify(returncode: int, stderr: str) -> Status:
    if returncode == 0:
        return "passed"
    if returncode in (-signal.SIGXCPU, 128 + signal.SIGXCPU):
        return "timeout"
    last_line = next((line for line in reversed(stderr.strip().splitlines()) if line.strip()), "")
    if returncode == 1 and last_line.startswith("AssertionError"):
        return "failed"
    return "error"


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_code(program: str, limits: SandboxLimits | None = None) -> SandboxResult:
    """Run the Python source ``program`` in a sandbox and report how it ended.

    Never raises on anything the program does; raises TypeError when ``program`` is not a str.
    """
    if not isinstance(program, str):
        raise TypeError(f"run_code: program must be Python source as a str, got {type(program).__name__}")
    limits = limits or SandboxLimits()
    user = _sandbox_user()
    use_namespaces = namespaces_available()
    workdir = tempfile.mkdtemp(prefix="verifiers-sandbox-")
    try:
        with open(os.path.join(workdir, "main.py"), "w", encoding="utf-8") as f:
            f.write(program)
        if user is not None:
            os.chown(workdir, *user)
            os.chown(os.path.join(workdir, "main.py"), *user)
        file_bytes = limits.max_file_mb * 1024 * 1024
        config = {
            "workdir": workdir,
            "uid": user[0] if user else None,
            "gid": user[1] if user else None,
            "guard_socket": not use_namespaces,
            "limits": {
                "RLIMIT_CPU": int(limits.timeout_s) + 1,
                "RLIMIT_AS": limits.memory_mb * 1024 * 1024,
                "RLIMIT_FSIZE": file_bytes,
                "RLIMIT_CORE": 0,
                **({"RLIMIT_NPROC": limits.max_processes} if user is not None else {}),
            },
        }
        command = [sandbox_python(user), "-I", "-c", _BOOTSTRAP, json.dumps(config)]
        if use_namespaces:
            command = [_UNSHARE, "--net", "--pid", "--fork", "--kill-child", "--"] + command
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": workdir,
            "TMPDIR": workdir,
            "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            start = time.monotonic()
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=workdir,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
            try:
                returncode = proc.wait(timeout=limits.timeout_s)
                timed_out = False
            except subprocess.TimeoutExpired:
                timed_out = True
            _kill_group(proc.pid)  # also reaps background children left by a finished program
            if timed_out:
                proc.wait()
            seconds = time.monotonic() - start
            stdout = _read_truncated(out, limits.max_output_chars)
            stderr = _read_truncated(err, limits.max_output_chars)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if timed_out:
        return SandboxResult("timeout", None, stdout, stderr, seconds)
    return SandboxResult(_classify(returncode, stderr), returncode, stdout, stderr, seconds)


def run_many(programs: list[str], limits: SandboxLimits | None = None, workers: int = 2) -> list[SandboxResult]:
    """`run_code` over several programs, ``workers`` at a time; results in input order."""
    with ThreadPoolExecutor(max_workers=max(1, workers)) as executor:
        return list(executor.map(lambda p: run_code(p, limits), programs))


def humaneval_program(prompt: str, completion: str, test: str, entry_point: str) -> str:
    """The program HumanEval runs: prompt + completion, the tests, then ``check(entry_point)``.

    A completion that redefines ``def entry_point`` (a whole function rather than the body) is
    put after the prompt on its own line; the prompt's docstring-only function is then replaced.
    """
    if f"def {entry_point}" in completion:
        body = prompt + "\n    pass\n\n" + completion
    else:
        body = prompt + completion
    return body + "\n" + test + f"\ncheck({entry_point})\n"


def extract_code(completion: str) -> str:
    """The last fenced code block of a completion, or the completion itself when it has none."""
    fence = "```"
    end = completion.rfind(fence)
    start = completion.rfind(fence, 0, end) if end >= 0 else -1
    if start < 0:
        return completion
    block = completion[start + 3 : end]
    first_newline = block.find("\n")
    if first_newline >= 0 and block[:first_newline].strip().isidentifier():
        block = block[first_newline + 1 :]
    return block


def grade_humaneval(completion: str, reference: dict, limits: SandboxLimits | None = None) -> float:
    """1.0 when ``completion`` passes the problem's tests in the sandbox, else 0.0.

    ``reference`` holds the HumanEval fields ``prompt``, ``test`` and ``entry_point``.
    """
    if not isinstance(completion, str):
        return 0.0
    program = humaneval_program(reference["prompt"], extract_code(completion), reference["test"], reference["entry_point"])
    return 1.0 if run_code(program, limits).passed else 0.0
