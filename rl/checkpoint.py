"""Resumable checkpoints: a `save_pretrained` policy folder (servable by vLLM) plus critic,
optimizers, KL controller, RNG and loop state. Written to a temporary folder, then renamed, so a
run killed mid-save keeps its previous checkpoint."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

__all__ = ["save", "load", "exists", "checkpoint_dir"]


def checkpoint_dir(output_dir: str | Path) -> Path:
    return Path(output_dir) / "checkpoint"


def exists(output_dir: str | Path) -> bool:
    return (checkpoint_dir(output_dir) / "state.pt").is_file()


def save(output_dir: str | Path, trainer) -> Path:
    final = checkpoint_dir(output_dir)
    tmp = final.with_name("checkpoint.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    trainer.learner.save_pretrained(tmp / "policy", safe_serialization=True)
    trainer.tokenizer.save_pretrained(tmp / "policy")
    if trainer.critic is not None:
        trainer.critic.save_pretrained(tmp / "critic")
    torch.save({
        "iteration": trainer.iteration,
        "optimizer": trainer.optimizer.state_dict(),
        "critic_optimizer": trainer.critic_optimizer.state_dict() if trainer.critic_optimizer else None,
        "kl_coef": float(trainer.kl_controller.value),
        "torch_rng": torch.get_rng_state(),
    }, tmp / "state.pt")
    old = final.with_name("checkpoint.old")
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)
    return final


def load(output_dir: str | Path, trainer) -> int:
    """Restore the trainer's weights and states in place; returns the iteration to continue from."""
    from safetensors.torch import load_file

    folder = checkpoint_dir(output_dir)
    state = torch.load(folder / "state.pt", weights_only=False)
    trainer.learner.load_state_dict(_weights(folder / "policy", load_file), strict=False)
    trainer.optimizer.load_state_dict(state["optimizer"])
    if trainer.critic is not None:
        trainer.critic.model.load_state_dict(_weights(folder / "critic", load_file))
        trainer.critic_optimizer.load_state_dict(state["critic_optimizer"])
    trainer.kl_controller.value = state["kl_coef"]
    torch.set_rng_state(state["torch_rng"])
    return int(state["iteration"])


def _weights(folder: Path, load_file) -> dict:
    weights = {}
    for file in sorted(folder.glob("*.safetensors")):
        weights.update(load_file(str(file)))
    return weights
