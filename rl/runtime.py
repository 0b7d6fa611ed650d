"""Where and how the learners compute: devices, precision, and torch's process-wide settings, scoped.

`torch.set_num_threads`, `torch.use_deterministic_algorithms` and the global RNG belong to the whole
process. The learners set them only for the span of their own work, so a caller that trains, then
goes on with other work, finds torch as it left it.

Precision "bfloat16" is mixed precision with float32 master weights: the weights and the optimizer
state stay float32 and the forward (so the backward) runs under `torch.autocast(bfloat16)`, as
TRL/accelerate's `bf16=True` does (see rl/learner.py for why this form).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["torch_settings", "resolve_device", "autocast", "cpu_supports_bfloat16", "PRECISIONS"]

PRECISIONS = ("float32", "bfloat16")


def cpu_supports_bfloat16() -> bool:
    """Whether this CPU has bf16 instructions (oneDNN's own check: AVX512-BF16 or AMX)."""
    return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())


def resolve_device(name: str) -> torch.device:
    """"auto" -> CUDA when available, else the CPU; anything else as given (checked to exist)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} asked for, but torch sees no CUDA device: use device='cpu' or 'auto'")
    return device


def check_precision(owner: str, precision: str, device: str | None) -> None:
    """Raise one clear error for an unknown precision, or bfloat16 on a CPU that cannot run it."""
    if precision not in PRECISIONS:
        raise ValueError(f"{owner}.dtype must be one of {list(PRECISIONS)}; got {precision!r}")
    on_cpu = device in (None, "cpu") or (device == "auto" and not torch.cuda.is_available())
    if precision == "bfloat16" and on_cpu and not cpu_supports_bfloat16():
        raise ValueError(f"{owner}.dtype='bfloat16' on the CPU needs bf16 instructions (AVX512-BF16 or AMX), "
                         "which this CPU lacks: use dtype='float32', or train on a GPU")


def autocast(device: torch.device, precision: str):
    """The forward passes' precision context: bfloat16 autocast, or nothing for float32."""
    if precision != "bfloat16":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)


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
