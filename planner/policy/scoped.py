"""Process-wide settings a backend needs, applied only for as long as it needs them.

Environment variables and torch's thread count belong to the whole process: a backend that set them
once would change every other library (and every other policy) in it. So a backend sets them around
the calls that read them and restores the previous values afterwards:

- `environment({NAME: value})`: vLLM's engine process inherits the environment when it starts, and
  this process reads `VLLM_ALLOW_INSECURE_SERIALIZATION` when it encodes a weight push and decodes
  the engine's reply;
- `torch_threads(n)`: the transformers backend's forward passes.

What importing a library sets (vllm sets TORCHINDUCTOR_* variables, and cv2, which it imports,
LD_LIBRARY_PATH) is that library's doing and is left alone: backends import outside these blocks.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import torch

__all__ = ["environment", "torch_threads"]


@contextmanager
def environment(values: Mapping[str, str], *, restore_all: bool = False) -> Iterator[None]:
    """Set `values` in the environment inside the block; afterwards each of them is as before (or unset
    again). With `restore_all`, the whole environment is restored, whatever the block set: vLLM's engine
    construction sets a dozen variables of its own in this process (e.g. LD_PRELOAD and
    VLLM_WORKER_MULTIPROC_METHOD), which its engine process has inherited by then."""
    saved = dict(os.environ) if restore_all else {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        if restore_all:
            for name in [name for name in os.environ if name not in saved]:
                del os.environ[name]
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            elif os.environ.get(name) != value:
                os.environ[name] = value


@contextmanager
def torch_threads(count: int | None) -> Iterator[None]:
    """torch's intra-op CPU threads = `count` inside the block (None: leave them alone), restored after."""
    if count is None:
        yield
        return
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ValueError(f"threads must be an integer >= 1 or None; got {count!r}")
    saved = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(saved)
