"""Resumable checkpoints: a `save_pretrained` policy folder (servable by vLLM) plus critic,
optimizers, KL controller and loop state. Written to a temporary folder, then renamed, so a run
killed mid-save keeps its previous checkpoint. (No RNG state: the trainer seeds each iteration
from (seed, iteration).) Loading is strict: a checkpoint whose weights do not match the model the
run was started with raises one error naming what differs."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

__all__ = ["save", "load", "exists", "checkpoint_dir"]


def checkpoint_dir(output_dir: str | Path) -> Path:
    return Path(output_dir) / "checkpoint"


def exists(output_dir: str | Path) -> bool:
    return (checkpoint_dir(output_dir) / "state.pt").is_file()


def save(output_dir: str | Path, learner, tokenizer, iteration: int) -> Path:
    """Write `learner` (rl.learner.Learner) and the loop's `iteration` (the next one to run)."""
    final = checkpoint_dir(output_dir)
    tmp = final.with_name("checkpoint.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    learner.policy.save_pretrained(tmp / "policy", safe_serialization=True)
    tokenizer.save_pretrained(tmp / "policy")
    if learner.critic is not None:
        learner.critic.save_pretrained(tmp / "critic")
    torch.save({
        "iteration": iteration,
        "optimizer": learner.optimizer.state_dict(),
        "critic_optimizer": learner.critic_optimizer.state_dict() if learner.critic_optimizer else None,
        "kl_coef": float(learner.kl_controller.value),
    }, tmp / "state.pt")
    old = final.with_name("checkpoint.old")
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)
    return final


def load(output_dir: str | Path, learner) -> int:
    """Restore the learner's weights and states in place; returns the iteration to continue from."""
    from safetensors.torch import load_file

    folder = checkpoint_dir(output_dir)
    state = torch.load(folder / "state.pt", weights_only=False)
    load_weights_strictly(learner.policy, _weights(folder / "policy", load_file), folder / "policy")
    learner.optimizer.load_state_dict(state["optimizer"])
    if learner.critic is not None:
        if state["critic_optimizer"] is None:
            raise ValueError(f"the checkpoint in {folder} was saved without a critic, but this run trains one: "
                             "resume with critic.enabled=false, or start a new output_dir")
        load_weights_strictly(learner.critic.model, _weights(folder / "critic", load_file), folder / "critic")
        learner.critic_optimizer.load_state_dict(state["critic_optimizer"])
    learner.kl_controller.value = state["kl_coef"]
    return int(state["iteration"])


def load_weights_strictly(model: torch.nn.Module, weights: dict, source: Path) -> None:
    """Load every parameter of `model` from `weights`, or raise one ValueError naming the mismatch.

    Weights tied to another loaded weight (a tied LM head, which `save_pretrained` stores once) may be
    absent; anything else missing, unexpected or of another shape is an error.
    """
    state = model.state_dict()
    unexpected = sorted(set(weights) - set(state))
    shapes = sorted(f"{k}: checkpoint {tuple(weights[k].shape)} vs model {tuple(state[k].shape)}"
                    for k in set(weights) & set(state) if weights[k].shape != state[k].shape)
    loaded_storage = {state[k].data_ptr() for k in weights if k in state}
    missing = sorted(k for k in set(state) - set(weights) if state[k].data_ptr() not in loaded_storage)
    if unexpected or shapes or missing:
        problems = [f"{label}: {', '.join(items[:4])}{' ...' if len(items) > 4 else ''}"
                    for label, items in (("missing", missing), ("unexpected", unexpected), ("shape", shapes)) if items]
        raise ValueError(f"the checkpoint in {source} does not match the model this run loads "
                         f"({'; '.join(problems)}): resume with the same --model, or start a new output_dir")
    model.load_state_dict(weights, strict=False)


def _weights(folder: Path, load_file) -> dict:
    weights = {}
    for file in sorted(folder.glob("*.safetensors")):
        weights.update(load_file(str(file)))
    return weights
