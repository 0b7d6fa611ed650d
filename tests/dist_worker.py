"""One rank of tests/test_distributed.py's equivalence check (run by torchrun, not collected by pytest).

    python -m torch.distributed.run --nproc_per_node 2 tests/dist_worker.py <batch.pt> <model> <out> ddp,fsdp

Each rank takes its half of the saved trees (whole trees), builds its rows, and for each data-parallel
mode named (comma-separated) builds a fresh learner, runs one learner update (one minibatch) and writes
the policy and critic gradients of that update's optimizer step, after the ranks' synchronisation,
gathered in full, to <out>/grads-<mode>.pt. The modes share one launch: torchrun and each rank's imports
cost more than an update of the tiny model.
"""

import sys
from pathlib import Path

import torch

from rl import distributed
from rl.batch import batch_from_trees
from rl.config import CriticConfig, LearnerConfig, LoopConfig, TrainConfig, ValueConfig
from rl.learner import Learner


def full(grad):
    return grad.full_tensor() if hasattr(grad, "full_tensor") else grad


def main(batch_path: str, model: str, out: str, modes: str) -> None:
    distributed.init_from_environment()
    for data_parallel in modes.split(","):
        saved = torch.load(batch_path, weights_only=False)  # afresh for each mode, as a launch of its own would
        trees, rank, world = saved["trees"], distributed.rank(), distributed.world_size()
        share = len(trees) // world
        batch = batch_from_trees(trees[rank * share:(rank + 1) * share], pad_token_id=0)
        gradients(batch, model, saved["config"], data_parallel, Path(out) / f"grads-{data_parallel}.pt")


def gradients(batch, model: str, options: dict, data_parallel: str, out: Path) -> None:
    """One update of a fresh learner over `batch` (this rank's rows); rank 0 writes the gradients to `out`."""
    learner = Learner(TrainConfig(model=model, loop=LoopConfig(output_dir="/tmp/unused"),
                                  learner=LearnerConfig(device="cpu", data_parallel=data_parallel, max_grad_norm=1e9),
                                  value=ValueConfig(critic=CriticConfig(enabled=True)), algorithm=options))
    grads = {}
    for name, model_, optimizer in (("policy", learner.policy, learner.optimizer),
                                    ("critic", learner.critic.model, learner.critic_optimizer)):
        step = optimizer.step

        def recording(*args, _name=name, _model=model_, _step=step, **kwargs):
            grads[_name] = torch.cat([full(p.grad).flatten().clone() for p in _model.parameters()])
            return _step(*args, **kwargs)
        optimizer.step = recording
    learner.update(batch, iteration=0)
    if distributed.is_main():
        torch.save(grads, out)
    distributed.barrier()


if __name__ == "__main__":
    main(*sys.argv[1:5])
