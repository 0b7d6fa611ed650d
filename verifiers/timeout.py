"""Run a function in a persistent worker process with a wall-clock limit.

Why: sympy (under math-verify) can run for hours or eat all memory on hostile input such as
``9^{9^{9^{9}}}``, and math-verify's own timeout uses ``signal.alarm``, which only works in the
main thread of the main interpreter (math-verify issues #50, #55). A call bounded here works from
any thread and any process, daemonic ones included: the work runs in a separate interpreter
started with ``subprocess`` (not ``multiprocessing``, whose daemonic workers may not have children),
and a worker that overruns is killed with SIGKILL and replaced.

Protocol: length-prefixed pickles over the worker's stdin/stdout. Only our own trusted worker
unpickles requests; the caller unpickles replies that our worker wrote. Untrusted text travels
as plain ``str`` arguments and is never evaluated by Python.

Each process that uses a pool gets its own workers (a fork child does not reuse its parent's
pipes), and each worker serves one call at a time, so concurrent threads use different workers.
"""

from __future__ import annotations

import atexit
import logging
import os
import pickle
import queue
import select
import struct
import subprocess
import sys
import threading
import time
from typing import Any

__all__ = ["CallTimeout", "WorkerPool"]

logger = logging.getLogger(__name__)

_HEADER = struct.Struct("!Q")

# The worker's main loop, run with ``python -c``. It caps its own address space (so one bad
# expression cannot take the host's memory), imports the target function by dotted name and
# answers each request with ("ok", value) or ("err", repr(exception)).
_WORKER_SOURCE = r"""
import importlib, os, pickle, resource, struct, sys
H = struct.Struct("!Q")
mem = int(sys.argv[1])
if mem > 0:
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
for p in reversed(sys.argv[2].split(os.pathsep)):
    if p and p not in sys.path:
        sys.path.insert(0, p)
fin, fout = sys.stdin.buffer, sys.stdout.buffer
sys.stdout = sys.stderr
cache = {}
def read_exact(n):
    buf = b""
    while len(buf) < n:
        chunk = fin.read(n - len(buf))
        if not chunk:
            sys.exit(0)
        buf += chunk
    return buf
while True:
    (n,) = H.unpack(read_exact(H.size))
    target, args = pickle.loads(read_exact(n))
    try:
        fn = cache.get(target)
        if fn is None:
            mod, _, name = target.rpartition(".")
            fn = cache[target] = getattr(importlib.import_module(mod), name)
        reply = ("ok", fn(*args))
    except BaseException as exc:
        reply = ("err", f"{type(exc).__name__}: {str(exc)[:500]}")
    data = pickle.dumps(reply)
    fout.write(H.pack(len(data)) + data)
    fout.flush()
"""


class CallTimeout(TimeoutError):
    """The call did not finish within its wall-clock limit; its worker was killed."""


class _Worker:
    """One worker interpreter and its pipes."""

    def __init__(self, memory_bytes: int, warmup: str | None):
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER_SOURCE, str(memory_bytes), os.pathsep.join(sys.path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            close_fds=True,
        )
        self.warmup = warmup

    def send(self, target: str, args: tuple) -> None:
        data = pickle.dumps((target, args))
        self.proc.stdin.write(_HEADER.pack(len(data)) + data)
        self.proc.stdin.flush()

    def receive(self, deadline: float) -> Any:
        """Read one reply, or raise CallTimeout when ``deadline`` passes first."""
        fd = self.proc.stdout.fileno()
        buf = b""
        need = _HEADER.size
        header_done = False
        while True:
            while len(buf) < need:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CallTimeout("worker call exceeded its time limit")
                ready, _, _ = select.select([fd], [], [], left)
                if not ready:
                    continue
                chunk = os.read(fd, max(need - len(buf), 65536))
                if not chunk:
                    raise ConnectionError(f"worker exited (code {self.proc.poll()})")
                buf += chunk
            if header_done:
                return pickle.loads(buf[:need])
            (n,) = _HEADER.unpack(buf[: _HEADER.size])
            buf = buf[_HEADER.size :]
            need = n
            header_done = True

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass


class WorkerPool:
    """A small pool of persistent worker interpreters that run named functions with a time limit.

    Args:
        size: the most workers alive at once (concurrent calls beyond it wait for a free worker).
        memory_mb: address-space limit of each worker (RLIMIT_AS), 0 for none.
        warmup: dotted name of a no-argument function each new worker runs first (e.g. to import
            sympy once), so the first real call is not charged the import time.
    """

    def __init__(self, size: int = 2, memory_mb: int = 2048, warmup: str | None = None):
        if size < 1:
            raise ValueError(f"WorkerPool size must be >= 1, got {size}")
        self.size = size
        self.memory_bytes = memory_mb * 1024 * 1024
        self.warmup = warmup
        self._lock = threading.Lock()
        self._reset()
        atexit.register(self.close)

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._idle: queue.LifoQueue[_Worker] = queue.LifoQueue()
        self._slots = threading.Semaphore(self.size)
        self._all: list[_Worker] = []
        self._starting = 0  # replacements being started in the background

    def _check_pid(self) -> None:
        # After fork the inherited workers belong to the parent; start afresh (do not kill them).
        if os.getpid() != self._pid:
            with self._lock:
                if os.getpid() != self._pid:
                    self._reset()

    def _start_worker(self, timeout: float) -> _Worker:
        worker = _Worker(self.memory_bytes, self.warmup)
        with self._lock:
            self._all.append(worker)
        if self.warmup:
            # Importing sympy/math-verify takes ~1 s on an idle core; allow generously.
            try:
                worker.send(self.warmup, ())
                status, value = worker.receive(time.monotonic() + max(60.0, timeout))
                if status != "ok":
                    raise ConnectionError(f"warmup {self.warmup} raised: {value}")
            except (CallTimeout, OSError, ConnectionError, EOFError) as exc:
                self._discard(worker)
                raise RuntimeError(f"verifier worker failed to start: {exc}") from exc
        return worker

    def _replace_in_background(self) -> None:
        """Start a replacement for a killed worker now, in a thread, so that the next call finds
        a warm worker instead of paying the start (seconds, with the warmup) on top of its own
        time limit. Nothing is started while the pool already has ``size`` workers."""

        def start() -> None:
            worker = None
            try:
                worker = self._start_worker(0.0)
            except RuntimeError as exc:
                logger.warning("replacement worker failed to start: %s", exc)
            with self._lock:
                self._starting -= 1
            self._idle.put(worker)  # None tells a waiting call to start its own

        with self._lock:
            if len(self._all) >= self.size:
                return
            self._starting += 1
        threading.Thread(target=start, name="verifier-worker-start", daemon=True).start()

    def _take_idle(self) -> _Worker | None:
        """A live idle worker; while a replacement is starting, wait for it rather than start a
        second interpreter next to it. None when there is none."""
        while True:
            try:
                worker = self._idle.get(timeout=60.0) if self._starting else self._idle.get_nowait()
            except queue.Empty:
                return None
            if worker is None:
                continue
            if worker.proc.poll() is None:
                return worker
            self._discard(worker)

    def idle(self) -> int:
        """How many started workers are waiting for a call."""
        return sum(1 for worker in list(self._idle.queue) if worker is not None)

    def _discard(self, worker: _Worker) -> None:
        worker.kill()
        with self._lock:
            if worker in self._all:
                self._all.remove(worker)

    def call(self, target: str, args: tuple = (), timeout: float = 5.0) -> Any:
        """Run ``target(*args)`` (``target`` a dotted ``module.function`` name) in a worker.

        Returns the function's value. Raises CallTimeout when it takes longer than ``timeout``
        seconds (the worker is killed and a replacement started in the background),
        RuntimeError when the function raised (message carries the worker-side exception) or
        the worker died.
        """
        self._check_pid()
        self._slots.acquire()
        worker = None
        try:
            worker = self._take_idle()
            if worker is None:
                worker = self._start_worker(timeout)
            deadline = time.monotonic() + timeout
            try:
                worker.send(target, args)
                status, value = worker.receive(deadline)
            except CallTimeout:
                self._discard(worker)
                worker = None
                self._replace_in_background()
                raise
            except (OSError, ConnectionError, EOFError, pickle.UnpicklingError) as exc:
                self._discard(worker)
                worker = None
                raise RuntimeError(f"verifier worker died: {exc}") from exc
            if status != "ok":
                raise RuntimeError(f"{target} raised in worker: {value}")
            return value
        finally:
            if worker is not None:
                self._idle.put(worker)
            self._slots.release()

    def close(self) -> None:
        """Kill every worker this process started."""
        if os.getpid() != self._pid:
            return
        with self._lock:
            workers, self._all = self._all, []
        for worker in workers:
            worker.kill()
        self._idle = queue.LifoQueue()
