"""Resumable checkpoints that lose nothing: the last k, each complete or absent, checked before use.

Layout under a run's output_dir:

    checkpoints/iteration-000012/   policy/ (a save_pretrained folder, servable by vLLM), critic/,
                                    state.pt (optimizers, KL coefficient, loop state), manifest.json
    checkpoints/iteration-000010/   the one before (TrainConfig.loop.checkpoints_kept = 2)
    checkpoint -> checkpoints/iteration-000012   (a link to the newest, for serving its policy)

A save writes a hidden temporary folder, fsyncs every file, writes `manifest.json` (iteration, every
file's size and sha256) last, fsyncs the folders, and renames the folder into place: one rename, so a
process killed at any moment leaves either the whole checkpoint or none, and the earlier ones intact.
Only then are checkpoints beyond the newest k removed.

`load` (--resume) takes the newest valid checkpoint: manifest present, every file of the size and
checksum it lists, the state and weights readable. It logs one line naming the folder, its iteration
and each newer one it skipped and why; with none valid, or none at all, it raises `CheckpointError`
(resuming never silently means starting over). `state.pt` holds only tensors and plain Python values
and is read with `torch.load(weights_only=True)`, so a tampered file cannot run code. (No RNG state:
the trainer seeds each iteration from (seed, iteration).) A checkpoint whose weights do not fit the
model the run was started with is a `CheckpointError` naming what differs, never a fallback.

With several learner ranks (rl/distributed.py) every rank calls `save` (the whole states are gathered
from the ranks' shards under FSDP) and rank 0 writes; on `load` rank 0 picks the checkpoint and every
rank reads the same one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import torch

from rl import distributed

__all__ = ["save", "load", "require", "candidates", "checkpoint_dir", "iteration_dir", "check_weights",
           "CheckpointError", "MANIFEST", "STATE"]

log = logging.getLogger(__name__)

FORMAT = 1
MANIFEST = "manifest.json"
STATE = "state.pt"
_NAME = re.compile(r"iteration-(\d+)")


class CheckpointError(ValueError):
    """A run cannot resume: no checkpoint, none valid, or one that does not fit this run's model."""


class _Invalid(Exception):
    """One checkpoint folder is unusable (the message says why); `load` falls back to an older one."""


def checkpoint_dir(output_dir: str | Path) -> Path:
    """The link to the newest checkpoint (its `policy/` is the latest policy as a model folder)."""
    return Path(output_dir) / "checkpoint"


def candidates(output_dir: str | Path) -> list[Path]:
    """The checkpoint folders of a run, newest first (valid or not: `load` checks them)."""
    root = Path(output_dir) / "checkpoints"
    found = [p for p in root.iterdir() if p.is_dir() and _NAME.fullmatch(p.name)] if root.is_dir() else []
    return sorted(found, key=_iteration, reverse=True)


def require(output_dir: str | Path) -> None:
    """Raise CheckpointError unless `output_dir` holds at least one checkpoint folder: the cheap check a
    resumed run makes before it loads any model."""
    if candidates(output_dir):
        return
    legacy = checkpoint_dir(output_dir)
    if legacy.is_dir() and not legacy.is_symlink() and (legacy / STATE).is_file():
        raise CheckpointError(_legacy_message(legacy))
    raise CheckpointError(f"nothing to resume: no checkpoint in {Path(output_dir) / 'checkpoints'}; pass the "
                          "--loop.output_dir of the run to continue, or drop --resume to start a new run")


def save(output_dir: str | Path, learner, tokenizer, iteration: int, keep: int = 2,
         discard_others: bool = False, extras: dict[str, Callable[[Path], object]] | None = None) -> Path:
    """Write `learner` (rl.learner.Learner) and the loop's `iteration` (the next one to run) as
    checkpoints/iteration-<iteration>, then keep only the newest `keep` checkpoints up to this one
    (newer ones are from a future this run abandoned when it resumed from an older checkpoint).
    discard_others: also remove every older one (the first save of a run that did not resume, so that
    a later --resume cannot fall back into an earlier run's checkpoints). extras: {name: write(folder)}, more
    folders saved inside the checkpoint (the loop verifier's), sealed by its manifest like the rest."""
    root = Path(output_dir) / "checkpoints"
    final = iteration_dir(output_dir, iteration)
    policy = learner.weights()
    critic = learner.weights(learner.critic.model) if learner.critic is not None else None
    optimizer, critic_optimizer = learner.optimizer_states()
    if not distributed.is_main():
        distributed.barrier()  # rank 0 writes
        return final
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".tmp-{final.name}"
    shutil.rmtree(tmp, ignore_errors=True)
    learner.policy.save_pretrained(tmp / "policy", state_dict=policy, safe_serialization=True)
    tokenizer.save_pretrained(tmp / "policy")
    if learner.critic is not None:
        learner.critic.model.save_pretrained(tmp / "critic", state_dict=critic, safe_serialization=True)
    torch.save({"format": FORMAT, "iteration": iteration, "optimizer": optimizer,
                "critic_optimizer": critic_optimizer, "kl_coef": float(learner.kl_controller.value),
                "world_size": distributed.world_size()}, tmp / STATE)
    for name, write in (extras or {}).items():
        write(tmp / name)
    files = {path.relative_to(tmp).as_posix(): _sealed(path) for path in sorted(tmp.rglob("*")) if path.is_file()}
    manifest = tmp / MANIFEST
    manifest.write_text(json.dumps({"format": FORMAT, "iteration": iteration, "files": files}, indent=1))
    _sealed(manifest)
    for folder in sorted((p for p in tmp.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        _fsync_dir(folder)
    _fsync_dir(tmp)
    if final.exists():  # this iteration again, after a resume from an older checkpoint
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync_dir(root)
    _link_newest(Path(output_dir), final)
    _prune(root, iteration, keep, discard_others)
    distributed.barrier()
    return final


def iteration_dir(output_dir: str | Path, iteration: int) -> Path:
    """The checkpoint folder saved before `iteration` (what `load` returned)."""
    return Path(output_dir) / "checkpoints" / f"iteration-{iteration:06d}"


def load(output_dir: str | Path, learner) -> int:
    """Restore the learner from the newest valid checkpoint in place; returns the iteration to continue
    from. Raises CheckpointError when there is none, or when it does not fit the learner's models."""
    expected = learner.weights()  # a collective under FSDP: every rank calls it
    expected_critic = learner.weights(learner.critic.model) if learner.critic is not None else None
    outcome = None
    if distributed.is_main():
        try:
            folder, read, skipped = _newest_valid(Path(output_dir), expected, expected_critic)
            outcome = str(folder)
            line = f"resuming from {folder} (iteration {read[0]['iteration']})"
            if skipped:
                line += "; skipped newer: " + "; ".join(f"{p.name} ({why})" for p, why in skipped)
            log.log(logging.WARNING if skipped else logging.INFO, line)
        except CheckpointError as error:
            outcome = error
    outcome = distributed.broadcast_object(outcome)
    if isinstance(outcome, CheckpointError):
        raise CheckpointError(str(outcome))
    if not distributed.is_main():
        read = _read(Path(outcome), learner.critic is not None)
    state, policy, critic = read
    learner.load_states(policy, state["optimizer"], critic, state["critic_optimizer"])
    learner.kl_controller.value = state["kl_coef"]
    return int(state["iteration"])


def check_weights(expected: dict, weights: dict, source: Path) -> None:
    """Raise one CheckpointError naming the mismatch when `weights` (a checkpoint's) do not fit the model
    whose state dict is `expected` (an empty dict, a rank that holds no whole copy, checks nothing).

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
        raise CheckpointError(f"the checkpoint in {source} does not match the model this run loads "
                              f"({'; '.join(problems)}): resume with the same --model, or start a new output_dir")


# ---- choosing a checkpoint --------------------------------------------------------------------------
def _newest_valid(output_dir: Path, expected: dict, expected_critic: dict | None):
    """(folder, (state, policy, critic), [(newer folder, why skipped)]) of the newest valid checkpoint."""
    require(output_dir)
    skipped = []
    for folder in candidates(output_dir):
        try:
            _verify(folder)
            read = _read(folder, expected_critic is not None)
        except _Invalid as why:
            skipped.append((folder, str(why)))
            continue
        check_weights(expected, read[1], folder / "policy")
        if expected_critic is not None:
            check_weights(expected_critic, read[2], folder / "critic")
        return folder, read, skipped
    reasons = "; ".join(f"{p.name} ({why})" for p, why in skipped)
    raise CheckpointError(f"no valid checkpoint to resume in {output_dir / 'checkpoints'}: {reasons}; "
                          "start a new --loop.output_dir, or drop --resume to start this one over")


def _verify(folder: Path) -> None:
    """Raise _Invalid unless the folder's manifest lists its iteration and files of matching size and sha256."""
    manifest = folder / MANIFEST
    if not manifest.is_file():
        raise _Invalid(f"no {MANIFEST}: its save did not finish")
    try:
        content = json.loads(manifest.read_text())
        files, iteration = content["files"], content["iteration"]
    except (ValueError, KeyError, TypeError) as error:
        raise _Invalid(f"{MANIFEST} is unreadable ({type(error).__name__})") from None
    if content.get("format") != FORMAT or iteration != _iteration(folder):
        raise _Invalid(f"{MANIFEST} has format {content.get('format')!r} and iteration {iteration!r}; expected "
                       f"{FORMAT} and {_iteration(folder)}")
    for needed in (STATE, "policy/config.json"):
        if needed not in files:
            raise _Invalid(f"{MANIFEST} does not list {needed}")
    for name, entry in files.items():
        path = folder / name
        if not path.is_file():
            raise _Invalid(f"{name} is missing")
        if not isinstance(entry, dict) or not {"bytes", "sha256"} <= set(entry):
            raise _Invalid(f"{MANIFEST} has no size and sha256 for {name}")
        size = path.stat().st_size
        if size != entry["bytes"]:
            raise _Invalid(f"{name} has {size} bytes, the manifest says {entry['bytes']}: truncated or overwritten")
        if _sha256(path) != entry["sha256"]:
            raise _Invalid(f"{name} does not match its sha256 in the manifest: corrupted or altered")


def _read(folder: Path, with_critic: bool):
    """(state, policy weights, critic weights or None) of a checkpoint folder; _Invalid when unreadable."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        state = torch.load(folder / STATE, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise _Invalid(f"{STATE} holds more than tensors and plain Python values, refused unpickling it: "
                       f"{str(error).strip().splitlines()[0][:200]}") from None
    except (RuntimeError, EOFError, OSError) as error:
        raise _Invalid(f"{STATE} does not load: {str(error).strip().splitlines()[0][:200]}") from None
    if not isinstance(state, dict) or not {"iteration", "optimizer", "critic_optimizer", "kl_coef"} <= set(state):
        raise _Invalid(f"{STATE} is not a checkpoint state (no iteration, optimizer, critic_optimizer, kl_coef)")
    if with_critic and state["critic_optimizer"] is None:
        raise CheckpointError(f"the checkpoint in {folder} was saved without a critic, but this run trains one: "
                              "resume with critic.enabled=false, or start a new output_dir")
    try:
        policy = _weights(folder / "policy", load_file)
        critic = _weights(folder / "critic", load_file) if with_critic else None
    except (SafetensorError, OSError) as error:
        raise _Invalid(f"its weights do not load: {error}") from None
    if not policy or with_critic and not critic:
        raise _Invalid("a model folder holds no *.safetensors weights")
    return state, policy, critic


def _weights(folder: Path, load_file) -> dict:
    weights = {}
    for file in sorted(folder.glob("*.safetensors")):
        weights.update(load_file(str(file)))
    return weights


def _iteration(folder: Path) -> int:
    return int(_NAME.fullmatch(folder.name).group(1))


def _legacy_message(folder: Path) -> str:
    return (f"{folder} is a checkpoint of the old format ({STATE} without {MANIFEST}, read with pickle), which "
            "this version does not load: resume it with the version that wrote it, or start a new --loop.output_dir")


# ---- writing durably ------------------------------------------------------------------------------
def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _sealed(path: Path) -> dict:
    """Flush a written file to disk; its manifest entry (size and sha256)."""
    with path.open("rb+") as f:
        os.fsync(f.fileno())
    return {"bytes": path.stat().st_size, "sha256": _sha256(path)}


def _fsync_dir(folder: Path) -> None:
    """Make the folder's entries (created, renamed files) durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _link_newest(output_dir: Path, newest: Path) -> None:
    """Point output_dir/checkpoint at `newest` (replacing the link in one rename; an old-format
    checkpoint folder there is replaced too: a run that writes here did not resume from it)."""
    alias = checkpoint_dir(output_dir)
    link = output_dir / ".checkpoint-link.tmp"
    if link.is_symlink() or link.exists():
        link.unlink()
    os.symlink(Path(newest.parent.name) / newest.name, link)
    if alias.is_dir() and not alias.is_symlink():
        shutil.rmtree(alias)
    os.replace(link, alias)
    _fsync_dir(output_dir)


def _prune(root: Path, iteration: int, keep: int, discard_others: bool) -> None:
    """Remove unfinished saves, checkpoints newer than `iteration`, and all but the newest `keep` up to it."""
    for tmp in root.glob(".tmp-iteration-*"):
        shutil.rmtree(tmp, ignore_errors=True)
    older = [p for p in candidates(root.parent) if _iteration(p) <= iteration]
    stale = [p for p in candidates(root.parent) if _iteration(p) > iteration]
    for folder in stale + older[1 if discard_others else keep:]:
        shutil.rmtree(folder, ignore_errors=True)
