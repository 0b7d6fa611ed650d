"""The sandbox layers every untrusted Python process runs inside (`verifiers.code`, `verifiers.code_judge`).

Containment, layer by layer:

- a child interpreter in its own session/process group, killed as a group (SIGKILL) when the
  caller's wall-clock limit passes;
- where the machine allows it (root, or CAP_SYS_ADMIN), new PID and network namespaces via
  ``unshare --net --pid --kill-child``, one pair per process: it sees no network interface but a
  downed loopback and no process outside its own, and when its first process dies the kernel
  kills every process it started, even ones that left the process group;
- as root, the program drops to the unprivileged ``nobody`` user before it starts, so
  RLIMIT_NPROC applies (root ignores it: a fork bomb is contained only this way) and files such
  as ``/etc`` and ``/root`` are not writable;
- resource limits: CPU seconds, address space (RLIMIT_AS), process count, file size;
- a fresh temporary directory as working directory, HOME and TMPDIR, removed afterwards;
- a scrubbed environment (no secrets of the caller), ``python -I`` (no user site, no PYTHON*);
- without a network namespace, an in-process guard that replaces ``socket.socket``;
- on request (the HumanEval judge), the process makes itself non-dumpable, so no process of the
  same user may ptrace it or read its memory through ``/proc``.

Not contained: the program can still read world-readable files (the datasets included) and write
world-writable places such as ``/tmp``; the file-size limit is per file, so many files can still
fill the disk within the time limit; without the PID namespace, children that call ``setsid()``
escape the group kill. It is not a security boundary against kernel exploits.
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
from dataclasses import dataclass
from functools import lru_cache

__all__ = [
    "SandboxLimits",
    "kill_group",
    "launch",
    "make_workdir",
    "namespaces_available",
    "read_truncated",
    "sandbox_python",
    "sandbox_user",
]


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandboxed run."""

    timeout_s: float = 10.0
    """Wall-clock seconds before every process of the run is killed (status ``timeout``); for a
    judged HumanEval run, the limit of the whole run, judge and candidate together."""
    memory_mb: int = 1024
    """Address-space limit (RLIMIT_AS) in MiB per process; allocations beyond it raise MemoryError."""
    max_processes: int = 64
    """RLIMIT_NPROC for the sandbox user. It counts all processes of that user, so sandboxes
    running at the same time share it. Enforced only when the sandbox runs as ``nobody``."""
    max_file_mb: int = 16
    """Largest file (and captured output) the program may write (RLIMIT_FSIZE), in MiB."""
    max_output_chars: int = 8192
    """Captured stdout/stderr are truncated to this many characters each."""

    def __post_init__(self) -> None:
        for name in ("timeout_s", "memory_mb", "max_processes", "max_file_mb", "max_output_chars"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"SandboxLimits.{name} must be a number > 0, got {value!r}; "
                                 f"pass a positive value or leave the default")


# Trusted prelude of every sandboxed interpreter, run as ``python -I -c PRELUDE + tail cfg_json``:
# limits, drop privileges, optionally become non-dumpable, optionally guard sockets. The tail
# (the caller's trusted program) runs next, in this same interpreter.
PRELUDE = r"""
import json, os, resource, sys
cfg = json.loads(sys.argv[1])
os.chdir(cfg["workdir"])
for _name, _value in cfg["limits"].items():
    resource.setrlimit(getattr(resource, _name), (_value, _value))
if cfg["uid"] is not None:
    os.setgroups([])
    os.setgid(cfg["gid"])
    os.setuid(cfg["uid"])
if cfg.get("non_dumpable"):
    import ctypes
    if ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE = 4
        raise SystemExit("sandbox: prctl(PR_SET_DUMPABLE, 0) failed")
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
del resource
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


def sandbox_user() -> tuple[int, int] | None:
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
                [candidate, "-I", "-c", "import runpy, pkgutil, typing, math, json, resource, ctypes"],
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


def make_workdir(writable: bool) -> str:
    """A fresh temporary directory for one sandboxed process.

    ``writable``: owned by the sandbox user (its HOME and TMPDIR). Otherwise, as root, owned by
    root with mode 0755, so a sandboxed process can read but nobody else sandboxed can plant files.
    The caller removes it (``shutil.rmtree``).
    """
    workdir = tempfile.mkdtemp(prefix="verifiers-sandbox-")
    user = sandbox_user()
    if user is not None:
        if writable:
            os.chown(workdir, *user)
        else:
            os.chmod(workdir, 0o755)
    return workdir


def launch(
    tail: str,
    workdir: str,
    limits: SandboxLimits,
    *,
    config: dict | None = None,
    python_flags: tuple[str, ...] = ("-I",),
    non_dumpable: bool = False,
    stdin=subprocess.DEVNULL,
    stdout=subprocess.DEVNULL,
    stderr=subprocess.DEVNULL,
    pass_fds: tuple[int, ...] = (),
) -> subprocess.Popen:
    """Start ``PRELUDE + tail`` in a sandboxed interpreter (every layer of the module docstring).

    ``config`` is merged into the JSON the prelude reads as ``cfg`` (it travels on the command
    line, which other processes can read: never put secrets in it). ``pass_fds`` stay open in
    the child under the same numbers. The child leads its own process group: stop it with
    `kill_group(proc.pid)`.
    """
    user = sandbox_user()
    use_namespaces = namespaces_available()
    cfg = {
        "workdir": workdir,
        "uid": user[0] if user else None,
        "gid": user[1] if user else None,
        "guard_socket": not use_namespaces,
        "non_dumpable": non_dumpable,
        "limits": {
            "RLIMIT_CPU": int(limits.timeout_s) + 1,
            "RLIMIT_AS": limits.memory_mb * 1024 * 1024,
            "RLIMIT_FSIZE": limits.max_file_mb * 1024 * 1024,
            "RLIMIT_CORE": 0,
            **({"RLIMIT_NPROC": limits.max_processes} if user is not None else {}),
        },
        **(config or {}),
    }
    command = [sandbox_python(user), *python_flags, "-c", PRELUDE + tail, json.dumps(cfg)]
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
    return subprocess.Popen(
        command,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        cwd=workdir,
        env=env,
        start_new_session=True,
        close_fds=True,
        pass_fds=pass_fds,
    )


def kill_group(pgid: int) -> None:
    """SIGKILL the process group ``pgid`` (a launched child and whatever it started)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def read_truncated(handle, limit: int) -> str:
    """The text written to the temporary file ``handle``, cut to ``limit`` characters."""
    handle.seek(0)
    data = handle.read(limit * 4 + 4).decode("utf-8", errors="replace")
    return data if len(data) <= limit else data[:limit] + "\n...[truncated]"
