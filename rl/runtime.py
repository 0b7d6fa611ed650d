"""Torch's process-wide settings, scoped: what a trainer changes it restores.

`torch.set_num_threads`, `torch.use_deterministic_algorithms` and the global RNG belong to the whole
process. The learners set them only for the span of their own work, so a caller that trains, then
goes on with other work, finds torch as it left it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["torch_settings"]


@contextlib.contextmanager
def torch_settings(threads: int | None = None, deterministic: bool = False, seed: int | None = None) -> Iterator[None]:
    """Inside: `threads` torch CPU threads (None: unchanged), deterministic algorithms when
    `deterministic` (else the caller's setting), and, when `seed` is given, the CPU RNG seeded with it
    (on a forked RNG, so the caller's random stream is untouched). All restored on exit."""
    previous_threads = torch.get_num_threads()
    previous_deterministic = torch.are_deterministic_algorithms_enabled()
    if threads is not None:
        torch.set_num_threads(threads)
    if deterministic:
        torch.use_deterministic_algorithms(True)
    try:
        with torch.random.fork_rng(devices=[], enabled=seed is not None):
            if seed is not None:
                torch.manual_seed(seed)
            yield
    finally:
        torch.set_num_threads(previous_threads)
        torch.use_deterministic_algorithms(previous_deterministic)
