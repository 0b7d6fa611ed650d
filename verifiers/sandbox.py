"""The sandbox every untrusted Python process runs in (`verifiers.code`, `verifiers.code_judge`).

What a sandboxed program gets, in the strongest mode this machine allows (`sandbox_mode`):

- ``"cgroup"`` (root, Linux namespaces, cgroup v1 memory and pids controllers writable -- this
  project's machines and CI): its own mount, PID, network, IPC, UTS and cgroup namespaces
  (`verifiers.sandbox_init`). It sees ``/usr`` and the interpreter's prefix read-only, a private
  ``/proc`` with its own processes only, a minimal ``/dev``, and a tmpfs of ``disk_mb`` shared
  by its work dir ``/sandbox``, ``/tmp`` and ``/dev/shm``, freed by the kernel when the run ends;
  no other host file (datasets, the repository, home directories), no network interface but a
  downed loopback, no Unix socket of the host. Its whole process tree is bounded by one memory
  cgroup (``memory_mb``) and one pids cgroup (``max_processes``, threads included); each process
  also gets RLIMIT_AS ``memory_mb``, so one huge allocation raises MemoryError.
- ``"namespaces"`` (the same, where no cgroup can be created, e.g. a cgroup v2 only machine):
  memory is bounded by splitting ``memory_mb`` over a bounded process count: at most
  ``memory_mb // 128`` processes and threads (and ``max_processes``), each with RLIMIT_AS of
  ``memory_mb`` divided by that count.
- ``"rlimits"`` (the fallback without namespaces: not root, or ``unshare`` missing or refused):
  the same resource limits and, as root, the same per-run user id; a host work dir as HOME and
  TMPDIR; an in-process guard on Python's socket constructors (ctypes gets around it). Host files
  stay readable (the datasets included), ``/proc`` shows the host. As root, files the run left in
  ``/tmp``, ``/var/tmp``, ``/dev/shm`` and ``/run/lock`` and processes it detached are removed
  afterwards (they are owned by the run's user id); writes are bounded per file only
  (RLIMIT_FSIZE). Not root:
  no process limit, memory bounded per process only, and nothing is cleaned beyond the work dir.

Every mode: a scrubbed environment, ``python -I``, resource limits (CPU seconds, address space,
file size, no core files), no_new_privs, the run's own process group killed with SIGKILL when
the caller's wall-clock limit passes, and, as root, a user id of its own (one of 65536 above
``UID_BASE``, claimed for the run's duration), so runs cannot signal, trace or share a process
count with each other. ``VERIFIERS_SANDBOX_MODE`` picks a weaker mode to test it (``auto``,
the default, picks the strongest that starts; a named mode that cannot start raises).

Not a boundary against kernel exploits: no seccomp filter narrows the system calls.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from verifiers import sandbox_init
from verifiers.sandbox_cgroup import RunCgroup, cgroup_parents

__all__ = ["MODES", "Sandbox", "SandboxLimits", "kill_group", "launch", "namespaces_available",
           "read_truncated", "sandbox_mode"]

MODES = ("cgroup", "namespaces", "rlimits")
"""Strongest first (see the module docstring)."""
WORKDIR = "/sandbox"
"""The work dir (and HOME) inside the namespaces."""
UID_BASE = 0x70000000
"""Runs get user ids UID_BASE .. UID_BASE + 65535: no account on the host owns them."""
_PROBE_UID = UID_BASE + 65536
"""Checks which interpreter those user ids can run (no run ever has it)."""
SPLIT_PROCESS_MB = 128
"""Without a memory cgroup, each process (or thread) of a run is allotted this much of ``memory_mb``."""

_INIT_SOURCE = Path(sandbox_init.__file__).read_text(encoding="utf-8")
_UNSHARE = shutil.which("unshare")
_UNSHARE_FLAGS = ["--mount", "--pid", "--net", "--ipc", "--uts", "--cgroup", "--fork", "--kill-child"]


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandboxed run."""

    timeout_s: float = 10.0
    """Wall-clock seconds before every process of the run is killed (status ``timeout``); for a
    judged HumanEval run, the limit of the whole run, judge and candidate together."""
    memory_mb: int = 1024
    """Memory of the whole run, all its processes together (see the module docstring per mode);
    an allocation one process cannot get raises MemoryError."""
    max_processes: int = 64
    """Processes and threads the run may have at once, its own alone (not shared with other runs)."""
    max_file_mb: int = 16
    """Largest file (and captured output) the program may write (RLIMIT_FSIZE), in MiB."""
    disk_mb: int = 64
    """Work dir, /tmp and /dev/shm together, in MiB (a tmpfs; the namespace modes only)."""
    max_output_chars: int = 8192
    """Captured stdout/stderr are truncated to this many characters each."""

    def __post_init__(self) -> None:
        for name in ("timeout_s", "memory_mb", "max_processes", "max_file_mb", "disk_mb", "max_output_chars"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"SandboxLimits.{name} must be a number > 0, got {value!r}; "
                                 f"pass a positive value or leave the default")


class _UidSlots:
    """Claims one of the 65536 run user ids, exclusively across threads and processes.

    Across processes a byte-range lock (lockf) at offset = slot on one root-owned file; POSIX
    locks belong to the process, so within it a set guards the slots, and the file stays open.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._taken: set[int] = set()
        self._fd: int | None = None
        self._next = os.getpid() % 65536

    def _file(self) -> int:
        if self._fd is None:
            directory = "/run" if os.access("/run", os.W_OK) else tempfile.gettempdir()
            fd = os.open(os.path.join(directory, "verifiers-sandbox-uids.lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            if os.fstat(fd).st_uid != 0:
                os.close(fd)
                raise RuntimeError(f"{directory}/verifiers-sandbox-uids.lock is not owned by root; remove it")
            self._fd = fd
        return self._fd

    def claim(self) -> int:
        with self._lock:
            fd = self._file()
            for step in range(65536):
                slot = (self._next + step) % 65536
                if slot in self._taken:
                    continue
                try:
                    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, slot)
                except OSError:
                    continue
                self._taken.add(slot)
                self._next = slot + 1
                return UID_BASE + slot
        raise RuntimeError("all 65536 sandbox user ids are in use; fewer runs at once")

    def release(self, uid: int) -> None:
        with self._lock:
            slot = uid - UID_BASE
            fcntl.lockf(self._file(), fcntl.LOCK_UN, 1, slot)
            self._taken.discard(slot)


_UIDS = _UidSlots()


@lru_cache(maxsize=1)
def _interpreter() -> tuple[str, str]:
    """(path, prefix) of the interpreter sandboxed runs use, resolved through symlinks.

    ``VERIFIERS_SANDBOX_PYTHON`` wins when set. Otherwise ``sys.executable`` if a run's user id
    can import the stdlib with it from the host's files (a pyenv or venv Python under ``/root``
    cannot), else the system ``python3``. Not root: ``sys.executable``. Raises RuntimeError
    naming the fix when none works.
    """
    override = os.environ.get("VERIFIERS_SANDBOX_PYTHON")
    candidates = [override] if override else [sys.executable, "/usr/bin/python3", shutil.which("python3")]
    as_root = os.geteuid() == 0
    for candidate in dict.fromkeys(c for c in candidates if c):
        try:
            probe = subprocess.run(
                [candidate, "-I", "-c", "import sys, runpy, json, resource, ctypes; print(sys.base_prefix)"],
                user=_PROBE_UID if as_root else None, group=_PROBE_UID if as_root else None,
                extra_groups=[] if as_root else None, capture_output=True, text=True, timeout=30, cwd="/")
        except (OSError, subprocess.SubprocessError):
            continue
        if probe.returncode == 0:
            return os.path.realpath(shutil.which(candidate) or candidate), probe.stdout.strip()
    raise RuntimeError(f"no Python interpreter that the sandbox's user id can run was found among {candidates}; "
                       "set VERIFIERS_SANDBOX_PYTHON to a python3 whose files are world-readable")


def _new_root() -> str:
    """An existing host directory the sandbox's root tmpfs is mounted over (in its own mount
    namespace: the host never sees it), outside every directory bound into the sandbox."""
    binds = _read_only_paths()
    for candidate in ("/mnt", "/media", "/srv", "/opt", "/tmp"):
        if os.path.isdir(candidate) and not os.path.islink(candidate) and \
                not any(b == candidate or b.startswith(candidate + "/") for b in binds):
            return candidate
    raise RuntimeError("no directory to mount the sandbox's root on (/mnt, /media, /srv, /opt, /tmp)")


def _read_only_paths() -> list[str]:
    """Host directories bound read-only into the sandbox: /usr and the interpreter's own prefix."""
    path, prefix = _interpreter()
    paths = ["/usr"]
    for extra in (os.path.realpath(prefix), os.path.dirname(path)):
        if not any(extra == p or extra.startswith(p + "/") for p in paths):
            paths.append(extra)
    return paths


@lru_cache(maxsize=1)
def _available() -> tuple[tuple[str, ...], str]:
    """(modes that start here, strongest first; why the stronger ones do not)."""
    if os.geteuid() != 0:
        return ("rlimits",), "not root: namespaces, per-run user ids and cgroups need root"
    if _UNSHARE is None:
        return ("rlimits",), "the unshare command (util-linux) is not installed"
    modes, reasons = [], []
    for mode in ("cgroup", "namespaces"):
        if mode == "cgroup" and cgroup_parents() is None:
            reasons.append("no writable cgroup v1 memory and pids controllers")
            continue
        try:
            with _launch(mode, "print('ok')", SandboxLimits(timeout_s=30.0), writable=True, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE) as box:
                out, err = box.proc.communicate(timeout=30)
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            out, err = b"", str(exc).encode()
        if out == b"ok\n":
            modes.append(mode)
        else:
            reasons.append(f"{mode}: {err.decode(errors='replace').strip().splitlines()[-1:]}")
    return tuple(modes) + ("rlimits",), "; ".join(reasons)


def sandbox_mode() -> str:
    """The mode runs use: ``VERIFIERS_SANDBOX_MODE`` if set (auto, cgroup, namespaces, rlimits),
    else the strongest that starts here. Warns once when auto falls back to ``rlimits``."""
    wanted = os.environ.get("VERIFIERS_SANDBOX_MODE", "auto")
    if wanted not in ("auto", *MODES):
        raise ValueError(f"VERIFIERS_SANDBOX_MODE={wanted!r} is not one of auto, {', '.join(MODES)}; unset it or pick one")
    modes, why = _available()
    if wanted == "auto":
        if modes[0] == "rlimits":
            _warn_fallback(why)
        return modes[0]
    if wanted not in modes:
        raise RuntimeError(f"VERIFIERS_SANDBOX_MODE={wanted} cannot start here ({why}); "
                           f"available: {', '.join(modes)}")
    return wanted


@lru_cache(maxsize=1)
def _warn_fallback(why: str) -> None:
    warnings.warn(f"verifiers.sandbox: no namespaces ({why}); untrusted code runs with resource limits only "
                  "and can read host files (datasets included): see docs/reliability.md#sandbox", RuntimeWarning)


def namespaces_available() -> bool:
    """Whether runs get their own namespaces (mode ``cgroup`` or ``namespaces``)."""
    return sandbox_mode() != "rlimits"


def _rlimits(mode: str, limits: SandboxLimits, as_root: bool) -> dict[str, int]:
    mib = 1024 * 1024
    if mode == "cgroup" or not as_root:  # not root: no process count to split over, so per process only
        processes, address_space = limits.max_processes, limits.memory_mb
    else:
        processes = max(1, min(limits.max_processes, limits.memory_mb // SPLIT_PROCESS_MB))
        address_space = limits.memory_mb // processes
    return {
        "RLIMIT_CPU": int(limits.timeout_s) + 1,
        "RLIMIT_AS": address_space * mib,
        "RLIMIT_FSIZE": limits.max_file_mb * mib,
        "RLIMIT_CORE": 0,
        **({"RLIMIT_NPROC": processes} if as_root else {}),  # not root: it would count all the caller's processes
    }


class Sandbox:
    """One launched sandboxed interpreter and what it holds on the host; `close` frees it all.

    ``proc`` is the `subprocess.Popen` (in ``cgroup``/``namespaces`` modes: the ``unshare``
    that waits for the namespace; its exit status is the program's, 128 + N when signal N
    killed it). Use as a context manager, or call `close` once done.
    """

    def __init__(self, mode: str, uid: int | None, cgroup: RunCgroup | None, host_dir: str | None):
        self.mode, self.uid, self.cgroup, self.host_dir = mode, uid, cgroup, host_dir
        self.proc: subprocess.Popen | None = None
        self._closed = False

    def close(self) -> None:
        """Kill every process of the run, then remove its cgroups, work dir and leftovers."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.proc is not None:
                kill_group(self.proc.pid)
                self.proc.wait()
            if self.mode == "rlimits" and self.uid is not None:
                _kill_user(self.uid)
                _remove_leftovers(self.uid)
        finally:
            if self.cgroup is not None:
                try:
                    self.cgroup.remove()
                except OSError as exc:  # a process stuck in the kernel; removed as stale by a later process
                    warnings.warn(f"verifiers.sandbox: run cgroup not removed yet: {exc}", RuntimeWarning)
            if self.uid is not None:
                _UIDS.release(self.uid)
            if self.host_dir is not None:
                shutil.rmtree(self.host_dir, ignore_errors=True)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def launch(tail: str, limits: SandboxLimits, *, writable: bool, config: dict | None = None,
           python_flags: tuple[str, ...] = ("-I",), non_dumpable: bool = False, stdin=subprocess.DEVNULL,
           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, pass_fds: tuple[int, ...] = ()) -> Sandbox:
    """Start ``sandbox_init + tail`` in a sandboxed interpreter (see the module docstring).

    ``tail`` is trusted code run after the setup, with ``cfg`` (whose ``workdir`` is the
    run's work dir, also its current directory) defined; ``config`` is merged into ``cfg``. It
    travels on the command line, which host processes can read: never put secrets in it.
    ``writable``: whether the run may write its work dir. ``pass_fds`` stay open in the
    program under the same numbers. Stop and clean up with `Sandbox.close`.
    """
    return _launch(sandbox_mode(), tail, limits, writable=writable, config=config, python_flags=python_flags,
                   non_dumpable=non_dumpable, stdin=stdin, stdout=stdout, stderr=stderr, pass_fds=pass_fds)


def _launch(mode: str, tail: str, limits: SandboxLimits, *, writable: bool, config: dict | None = None,
            python_flags: tuple[str, ...] = ("-I",), non_dumpable: bool = False, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, pass_fds: tuple[int, ...] = ()) -> Sandbox:
    as_root = os.geteuid() == 0
    isolate = mode != "rlimits"
    box = Sandbox(mode, _UIDS.claim() if as_root else None, None, None)
    try:
        if mode == "cgroup":
            box.cgroup = RunCgroup(cgroup_parents(), limits.memory_mb * 1024 * 1024, limits.max_processes + 1)
        if isolate:
            workdir = WORKDIR
        else:
            workdir = box.host_dir = tempfile.mkdtemp(prefix="verifiers-sandbox-")
            if box.uid is not None and writable:
                os.chown(workdir, box.uid, box.uid)
            elif box.uid is not None:
                os.chmod(workdir, 0o755)  # readable, and only root writes it
        cfg = {
            "isolate": isolate,
            "workdir": workdir,
            "writable": writable,
            "uid": box.uid,
            "guard_socket": not isolate,
            "non_dumpable": non_dumpable,
            "limits": _rlimits(mode, limits, as_root),
            **({"new_root": _new_root(), "read_only": _read_only_paths(), "disk_mb": limits.disk_mb,
                "cgroups": box.cgroup.procs_files if box.cgroup else []} if isolate else {}),
            **(config or {}),
        }
        command = [_interpreter()[0], *python_flags, "-c", _INIT_SOURCE + tail, json.dumps(cfg)]
        if isolate:
            command = [_UNSHARE, *_UNSHARE_FLAGS, "--", *command]
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": "/tmp" if isolate else workdir,
               "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
        box.proc = subprocess.Popen(command, stdin=stdin, stdout=stdout, stderr=stderr, cwd="/" if isolate else workdir,
                                    env=env, start_new_session=True, close_fds=True, pass_fds=pass_fds)
    except BaseException:
        box.close()
        raise
    return box


def kill_group(pgid: int) -> None:
    """SIGKILL the process group ``pgid`` (a launched child and whatever it started)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_user(uid: int) -> None:
    """SIGKILL every process of ``uid`` (``kill(-1)`` sent as that user: one system call, so a
    fork bomb cannot outrun it). The fallback's stand-in for a PID namespace."""
    subprocess.run([_interpreter()[0], "-I", "-S", "-c", "import os, signal\nos.kill(-1, signal.SIGKILL)"],
                   user=uid, group=uid, extra_groups=[], cwd="/", env={}, timeout=30,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _remove_leftovers(uid: int) -> None:
    """Remove what ``uid`` created in the world-writable temporary directories (fallback mode)."""
    for directory in dict.fromkeys((tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm", "/run/lock")):
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
            except OSError:
                pass


def read_truncated(handle, limit: int) -> str:
    """The text written to the temporary file ``handle``, cut to ``limit`` characters."""
    handle.seek(0)
    data = handle.read(limit * 4 + 4).decode("utf-8", errors="replace")
    return data if len(data) <= limit else data[:limit] + "\n...[truncated]"
