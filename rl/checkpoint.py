"""Resumable checkpoints: a `save_pretrained` policy folder (servable by vLLM) plus critic,
optimizers, KL controller and loop state. Written to a temporary folder, then renamed, so a run
killed mid-save keeps its previous checkpoint. (No RNG state: the trainer seeds each iteration
from (seed, iteration).) Loading is strict: a checkpoint whose weights do not match the model the
run was started with raises one error naming what differs.

With several learner ranks (rl/distributed.py) every rank calls `save` (the whole states are
gathered from the ranks' shards under FSDP) and rank 0 writes; every rank `load`s the same files."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from rl import distributed

__all__ = ["save", "load", "exists", "checkpoint_dir"]


def checkpoint_dir(output_dir: str | Path) -> Path:
    return Path(output_dir) / "checkpoint"


def exists(output_dir: str | Path) -> bool:
    return (checkpoint_dir(output_dir) / "state.pt").is_file()


def save(output_dir: str | Path, learner, tokenizer, iteration: int) -> Path:
    """Write `learner` (rl.learner.Learner) and the loop's `iteration` (the next one to run)."""
    final = checkpoint_dir(output_dir)
    policy = learner.weights()
    critic = learner.weights(learner.critic.model) if learner.critic is not None else None
    optimizer, critic_optimizer = learner.optimizer_states()
    if not distributed.is_main():
        distributed.barrier()  # rank 0 writes
        return final
    tmp = final.with_name("checkpoint.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    learner.policy.save_pretrained(tmp / "policy", state_dict=policy, safe_serialization=True)
    tokenizer.save_pretrained(tmp / "policy")
    if learner.critic is not None:
        learner.critic.model.save_pretrained(tmp / "critic", state_dict=critic, safe_serialization=True)
    torch.save({"iteration": iteration, "optimizer": optimizer, "critic_optimizer": critic_optimizer,
                "kl_coef": float(learner.kl_controller.value), "world_size": distributed.world_size()},
               tmp / "state.pt")
    old = final.with_name("checkpoint.old")
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)
    distributed.barrier()
    return final


def load(output_dir: str | Path, learner) -> int:
    """Restore the learner's weights and states in place; returns the iteration to continue from."""
    from safetensors.torch import load_file

    folder = checkpoint_dir(output_dir)
    state = torch.load(folder / "state.pt", weights_only=False)
    policy = _weights(folder / "policy", load_file)
    check_weights(learner.weights(), policy, folder / "policy")
    critic = None
    if learner.critic is not None:
        if state["critic_optimizer"] is None:
            raise ValueError(f"the checkpoint in {folder} was saved without a critic, but this run trains one: "
                             "resume with critic.enabled=false, or start a new output_dir")
        critic = _weights(folder / "critic", load_file)
        check_weights(learner.weights(learner.critic.model), critic, folder / "critic")
    learner.load_states(policy, state["optimizer"], critic, state["critic_optimizer"])
    learner.kl_controller.value = state["kl_coef"]
    return int(state["iteration"])


def check_weights(expected: dict, weights: dict, source: Path) -> None:
    """Raise one ValueError naming the mismatch when `weights` (a checkpoint's) do not fit the model whose
    state dict is `expected` (an empty dict, a rank that holds no whole copy, checks nothing).

    Weights tied to another loaded weight (a tied LM head, which `save_pretrained` stores once) may be
    absent; anything else missing, unexpected or of another shape is an error.
    """
    if not expected:
        return
    unexpected = sorted(set(weights) - set(expected))
    shapes = sorted(f"{k}: checkpoint {tuple(weights[k].shape)} vs model {tuple(expected[k].shape)}"
                    for k in set(weights) & set(expected) if weights[k].shape != expected[k].shape)
    loaded_storage = {expected[k].data_ptr() for k in weights if k in expected}
    missing = sorted(k for k in set(expected) - set(weights) if expected[k].data_ptr() not in loaded_storage)
    if unexpected or shapes or missing:
        problems = [f"{label}: {', '.join(items[:4])}{' ...' if len(items) > 4 else ''}"
                    for label, items in (("missing", missing), ("unexpected", unexpected), ("shape", shapes)) if items]
        raise ValueError(f"the checkpoint in {source} does not match the model this run loads "
                         f"({'; '.join(problems)}): resume with the same --model, or start a new output_dir")


def _weights(folder: Path, load_file) -> dict:
    weights = {}
    for file in sorted(folder.glob("*.safetensors")):
        weights.update(load_file(str(file)))
    return weights
