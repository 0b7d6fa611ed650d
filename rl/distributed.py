"""Data parallelism for the learner, on torch.distributed (gloo on CPU, NCCL on GPUs).

Launch with `torchrun --nproc_per_node N scripts/train.py ...`: torchrun sets RANK, WORLD_SIZE and the
rendezvous variables, and `init_from_environment` forms the process group. The layout (the one
OpenRLHF and verl use, without Ray here):

- rank 0 holds the serving engine (or an engine pool), grows every tree of the iteration, and hands
  each rank its share of whole trees (`scatter_objects`): a tree never spans two ranks;
- every rank builds its rows and trains the same models on them, the gradients averaged over ranks
  by DDP (or sharded by FSDP2's `fully_shard`); each rank's losses are normalised by the counts of the
  whole minibatch over all ranks (`all_sum`) and scaled by the world size, so the averaged gradient is
  exactly the single-process gradient of the whole batch;
- statistics over the whole batch are all-reduced: REINFORCE++'s normalisation, GAE's whitening,
  the KL to the reference, and the logged metrics (`mean_over_ranks`);
- the weights are the same on every rank after a step; rank 0 pushes them into the engine, logs and
  writes checkpoints, which every rank reads on `--resume`.

Without torchrun (one process) every function here is the identity.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Sequence

import torch
import torch.distributed as dist

__all__ = ["rank", "world_size", "is_main", "init_from_environment", "all_sum", "mean_over_ranks",
           "scatter_objects", "broadcast_object", "barrier", "wrap", "DATA_PARALLEL"]

DATA_PARALLEL = ("ddp", "fsdp")


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def is_main() -> bool:
    return rank() == 0


def init_from_environment(backend: str = "auto", timeout_s: float = 600.0) -> None:
    """Form the process group when launched by torchrun (WORLD_SIZE > 1); nothing otherwise. A rank that
    dies leaves the others waiting in a collective for at most `timeout_s`, and torchrun stops the run."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1 or dist.is_initialized():
        return
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))


def all_sum(value: torch.Tensor | float) -> torch.Tensor:
    """The sum of `value` over ranks (a new tensor; the value itself with one process)."""
    tensor = torch.as_tensor(value, dtype=torch.float64).clone()
    if world_size() > 1:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def mean_over_ranks(metrics: dict[str, float]) -> dict[str, float]:
    """Each metric averaged over ranks (every rank must pass the same keys, in any order)."""
    if world_size() == 1:
        return metrics
    keys = sorted(metrics)
    values = torch.tensor([float(metrics[k]) for k in keys], dtype=torch.float64)
    dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return {k: float(v) / world_size() for k, v in zip(keys, values)}


def scatter_objects(shares: Sequence | None):
    """Rank 0 passes one object per rank; every rank gets its own (pickled over the process group)."""
    if world_size() == 1:
        return shares[0]
    received = [None]
    dist.scatter_object_list(received, list(shares) if is_main() else None, src=0)
    return received[0]


def broadcast_object(value):
    """Rank 0's `value` on every rank."""
    if world_size() == 1:
        return value
    box = [value if is_main() else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier() -> None:
    if world_size() > 1:
        dist.barrier()


def wrap(module: torch.nn.Module, kind: str, layers: Sequence[torch.nn.Module] = ()) -> torch.nn.Module:
    """`module` made data parallel over the process group: "ddp" (DistributedDataParallel: a full copy
    per rank, gradients averaged) or "fsdp" (FSDP2's `fully_shard`: parameters, gradients and optimizer
    state sharded over ranks; each of `layers` is its own shard group, then the rest). The module
    itself with one process."""
    if kind not in DATA_PARALLEL:
        raise ValueError(f"data_parallel must be one of {list(DATA_PARALLEL)}; got {kind!r}")
    if world_size() == 1:
        return module
    if kind == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        device = next(module.parameters()).device
        return DistributedDataParallel(module, device_ids=[device] if device.type == "cuda" else None)
    from torch.distributed.fsdp import fully_shard

    for layer in layers:
        fully_shard(layer)
    fully_shard(module)
    return module
