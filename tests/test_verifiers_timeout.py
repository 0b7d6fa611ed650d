"""The bounded worker pool: timeouts kill and replace workers, from threads and forked processes."""

from __future__ import annotations

import multiprocessing
import threading
import time

import pytest

from verifiers.timeout import CallTimeout, WorkerPool


@pytest.fixture()
def pool():
    pool = WorkerPool(size=2, memory_mb=512)
    yield pool
    pool.close()


def test_call_returns_value_and_reports_errors(pool):
    assert pool.call("math.factorial", (10,), timeout=30) == 3628800
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        pool.call("operator.truediv", (1, 0), timeout=30)
    with pytest.raises(RuntimeError, match="MemoryError"):
        pool.call("builtins.bytearray", (2 * 1024**3,), timeout=30)  # over the 512 MiB cap
    assert pool.call("operator.add", (2, 3), timeout=30) == 5  # the worker survived all that


def test_timeout_kills_and_replaces_worker(pool):
    pool.call("os.getpid", (), timeout=30)
    start = time.monotonic()
    with pytest.raises(CallTimeout):
        pool.call("time.sleep", (30,), timeout=0.5)
    assert time.monotonic() - start < 2.0
    assert pool.call("operator.mul", (6, 7), timeout=30) == 42


def test_replacement_worker_starts_in_the_background():
    # The warmup takes seconds (it imports math-verify and parses once). After a timeout the
    # replacement is started at once, so the next call does not pay that start.
    pool = WorkerPool(size=1, memory_mb=2048, warmup="verifiers.math._warm_worker")
    try:
        pool.call("os.getpid", (), timeout=30)
        with pytest.raises(CallTimeout):
            pool.call("time.sleep", (30,), timeout=0.5)
        deadline = time.monotonic() + 60
        while pool.idle() == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pool.idle() == 1
        start = time.monotonic()
        assert pool.call("operator.mul", (6, 7), timeout=30) == 42
        assert time.monotonic() - start < 1.0
        assert pool.idle() == 1  # one worker in all: size is respected
    finally:
        pool.close()


def test_concurrent_threads_share_the_pool(pool):
    results = []

    def work(i):
        results.append(pool.call("operator.add", (i, 1), timeout=30))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(results) == [1, 2, 3, 4, 5, 6]
    assert len({pool.call("os.getpid", (), timeout=30) for _ in range(4)}) <= 2


def _child_uses_pool(pool, queue):
    try:
        queue.put(pool.call("operator.add", (20, 22), timeout=30))
    except Exception as exc:  # report to the parent instead of dying silently
        queue.put(repr(exc))


def test_forked_child_gets_its_own_workers(pool):
    pool.call("os.getpid", (), timeout=30)  # the parent has a live worker before the fork
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_uses_pool, args=(pool, queue))
    child.start()
    assert queue.get(timeout=60) == 42
    child.join(10)
    assert pool.call("operator.add", (1, 1), timeout=30) == 2  # parent's workers untouched


def test_bad_size():
    with pytest.raises(ValueError, match="size must be >= 1"):
        WorkerPool(size=0)
