"""DPO from search trees: sibling-step and whole-response pairs, online (fresh trees each round) or
offline (from a tree store).

Pairs come from `rl.pairs` (the shared prefix is context; the chosen and rejected continuations are
the sibling steps, or their paths to a best/worst leaf, or whole responses). A pair's sequence
log-probability is the sum over its continuation's sampled tokens; the loss is `rl.losses.dpo_loss`
(sigmoid DPO, conservative DPO by label smoothing, robust DPO, IPO).

The reference (`DPOConfig.reference`):
- "behaviour": the log-probabilities the engine sampled the trees with, stored in every node. Online,
  that is the policy at the start of the round: iterative DPO's reference (Xu et al. 2023; Pang et al.
  2024, iterative RPO), with no reference forward at all. It needs engine log-probabilities equal to the
  learner's (float32 engine, temperature 1: the GRPO trainer logs the gap, ~1e-5 on CPU).
- "model": a frozen copy of the starting model (`TrainConfig.model`), recomputed by a forward: DPO's
  fixed reference (Rafailov et al. 2023).
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from planner.tree import SearchTree
from rl.forward import token_logprobs
from rl.dpo_losses import DPO_LOSS_TYPES, DPOLossType, dpo_loss
from rl.losses import is_finite_loss
from rl.pairs import PairBatch, PairConfig, PreferencePair, pair_batch, preference_pairs, tree_pairs
from rl.rounds import RoundTrainer
from rl.runtime import autocast, resolve_device, torch_settings
from rl.tree_store import TreeStore

__all__ = ["DPOConfig", "DPOLearner", "OnlineDPO", "OfflineDPOResult", "train_dpo_offline"]


@dataclass
class DPOConfig:
    """DPO on preference pairs from search trees (rl/dpo.py)."""

    beta: float = 0.1
    """Strength of the KL constraint to the reference (Rafailov et al. 2023); IPO's tau (> 0)."""
    loss_type: DPOLossType = "sigmoid"
    """"sigmoid" = DPO (conservative DPO, Mitchell 2023, when label_smoothing > 0), "robust" = robust DPO
    (Chowdhury et al. 2024), "ipo" = IPO (Azar et al. 2023) on per-token mean log-ratios (rl.losses.dpo_loss)."""
    label_smoothing: float = 0.0
    """Probability that a preference label is wrong, in [0, 0.5): cDPO with "sigmoid", rDPO with "robust"."""
    reference: Literal["behaviour", "model"] = "behaviour"
    """"behaviour" = the sampled log-probabilities stored in the trees (online: the policy at the start of
    the round, iterative DPO; no forward), "model" = a frozen copy of the starting model (a forward)."""
    pairs: PairConfig = field(default_factory=PairConfig)
    """Which pairs the trees give (rl.pairs.PairConfig)."""
    lr: float = 1e-4
    """AdamW learning rate of the policy (> 0)."""
    epochs: int = 1
    """Passes over the pairs: over each round's pairs (online) or over the store's (offline) (>= 1)."""
    batch_size: int = 32
    """Pairs per optimizer step (>= 1)."""
    max_grad_norm: float = 1.0
    """Gradient clipping norm (> 0)."""
    seed: int = 0
    """Seeds the pairs' order (offline; online the round's seed is used)."""

    def __post_init__(self) -> None:
        if isinstance(self.pairs, dict):
            self.pairs = PairConfig(**self.pairs)
        if not self.beta > 0:
            raise ValueError(f"DPOConfig.beta must be > 0; got {self.beta!r}")
        if self.loss_type not in DPO_LOSS_TYPES:
            raise ValueError(f"DPOConfig.loss_type must be one of {list(DPO_LOSS_TYPES)}; got {self.loss_type!r}")
        if not 0 <= self.label_smoothing < 0.5 or (self.loss_type == "ipo" and self.label_smoothing):
            raise ValueError("DPOConfig.label_smoothing must be in [0, 0.5), and 0 with loss_type 'ipo'; got "
                             f"{self.label_smoothing!r} with loss_type {self.loss_type!r}")
        if self.reference not in ("behaviour", "model"):
            raise ValueError(f"DPOConfig.reference must be one of ['behaviour', 'model']; got {self.reference!r}")
        for name in ("epochs", "batch_size"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"DPOConfig.{name} must be an integer >= 1; got {getattr(self, name)!r}")
        for name in ("lr", "max_grad_norm"):
            if not getattr(self, name) > 0:
                raise ValueError(f"DPOConfig.{name} must be > 0; got {getattr(self, name)!r}")


class DPOLearner:
    """Minibatch DPO updates of `policy` on preference pairs."""

    def __init__(self, policy, config: DPOConfig, pad_token_id: int, reference=None, dtype: str = "float32",
                 logprob_chunk: int | None = None) -> None:
        if config.reference == "model" and reference is None:
            raise ValueError("DPOConfig.reference='model' needs the reference model; pass reference=")
        self.policy, self.config, self.pad_token_id, self.reference = policy, config, pad_token_id, reference
        self.device = next(policy.parameters()).device
        self.dtype, self.logprob_chunk = dtype, logprob_chunk
        self.optimizer = torch.optim.AdamW(policy.parameters(), lr=config.lr)

    def sequence_logps(self, model, batch: PairBatch) -> torch.Tensor:
        """(2B,) sum of log-probabilities of each row's continuation under `model` (grad if enabled)."""
        ids, attention = batch.input_ids.to(self.device), batch.attention_mask.to(self.device)
        with autocast(self.device, self.dtype):
            logp, _ = token_logprobs(model, ids, attention, chunk_size=self.logprob_chunk)  # (2B, L)
        return (logp.float() * batch.loss_mask.to(self.device)).sum(-1)  # (2B,)

    def loss(self, batch: PairBatch) -> tuple[torch.Tensor, dict]:
        c = self.config
        policy_logps = self.sequence_logps(self.policy, batch)  # (2B,)
        if c.reference == "behaviour":
            ref_logps = (batch.behaviour_logprobs * batch.loss_mask).sum(-1).to(self.device)  # (2B,)
        else:
            with torch.no_grad():
                ref_logps = self.sequence_logps(self.reference, batch)  # (2B,)
        lengths = batch.lengths().to(self.device)
        chosen, rejected = policy_logps.chunk(2)
        ref_chosen, ref_rejected = ref_logps.chunk(2)
        chosen_len, rejected_len = lengths.chunk(2)
        return dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta=c.beta, label_smoothing=c.label_smoothing,
                        loss_type=c.loss_type, chosen_lengths=chosen_len, rejected_lengths=rejected_len)

    def update(self, pairs: Sequence[PreferencePair], seed: int) -> dict:
        """`config.epochs` passes over `pairs` in minibatches of `config.batch_size`; returns mean metrics."""
        c = self.config
        rng = np.random.default_rng(seed)
        self.policy.train()
        sums: dict[str, list[float]] = {}
        trained_tokens = 0
        for _ in range(c.epochs):
            order = rng.permutation(len(pairs))
            for start in range(0, len(order), c.batch_size):
                batch = pair_batch([pairs[i] for i in order[start:start + c.batch_size]], self.pad_token_id)
                trained_tokens += int(batch.attention_mask.sum())
                loss, metrics = self.loss(batch)
                self.optimizer.zero_grad()
                if not is_finite_loss(loss):
                    sums.setdefault("dpo_skipped", []).append(1.0)
                    continue
                loss.backward()
                metrics["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(self.policy.parameters(),
                                                                            c.max_grad_norm))
                self.optimizer.step()
                for key, value in metrics.items():
                    sums.setdefault(key, []).append(value)
        self.policy.eval()
        kinds = Counter(p.kind for p in pairs)
        return {**{k: float(np.mean(v)) for k, v in sums.items()}, "pairs": len(pairs), "step_pairs": kinds["step"],
                "response_pairs": kinds["response"], "trained_tokens": trained_tokens}


def _reference_model(config: DPOConfig, folder: str | os.PathLike, device: torch.device):
    if config.reference != "model":
        return None
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    return model.to(device).eval().requires_grad_(False)


class OnlineDPO(RoundTrainer):
    """Online (iterative) DPO: each round grows fresh trees with the current policy, takes their pairs and
    makes `dpo.epochs` passes over them. A round without any pair (every outcome equal) makes no update."""

    def __init__(self, config, dpo: DPOConfig, problems: Sequence, reward_fn, extract=None, engine=None) -> None:
        super().__init__(config, problems, reward_fn, extract, engine)
        self.dpo = DPOLearner(self.policy, dpo, self.pad_id, _reference_model(dpo, config.model, self.learner.device),
                              dtype=config.learner.dtype, logprob_chunk=config.learner.logprob_chunk)

    def learn(self, trees: list[SearchTree], problems: list, iteration: int) -> dict:
        pairs = [pair for group, tree in enumerate(trees) for pair in tree_pairs(tree, group, self.dpo.config.pairs)]
        if not pairs:
            return {"pairs": 0, "step_pairs": 0, "response_pairs": 0, "trained_tokens": 0}
        return self.dpo.update(pairs, seed=iteration)


@dataclass
class OfflineDPOResult:
    policy_dir: Path
    """The trained `save_pretrained` folder."""
    metrics: dict
    """The update's mean metrics (loss, implicit rewards, accuracy, pair counts) and the trees read."""


def train_dpo_offline(model: str | os.PathLike, store: str | os.PathLike, config: DPOConfig, output_dir,
                      *, min_version: int | None = None, max_version: int | None = None, device: str = "cpu",
                      threads: int = 1) -> OfflineDPOResult:
    """DPO of the model folder `model` on the pairs of every tree in the tree store `store` (policy versions
    within [min_version, max_version]); the trained policy is saved to `output_dir`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not (Path(model) / "config.json").is_file():
        raise FileNotFoundError(f"no model folder at {str(model)!r} (expected a config.json there)")
    stored = TreeStore(store).load(min_version, max_version)
    pairs = preference_pairs([s.tree for s in stored], config.pairs)
    with torch_settings(threads, seed=config.seed):
        target = resolve_device(device)
        tokenizer = AutoTokenizer.from_pretrained(model)
        policy = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).to(target)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        learner = DPOLearner(policy, config, pad, _reference_model(config, model, target))
        metrics = learner.update(pairs, seed=config.seed)
    output_dir = Path(output_dir)
    policy.save_pretrained(output_dir, safe_serialization=True)
    tokenizer.save_pretrained(output_dir)
    metrics["trees"] = len(stored)
    metrics["steps"] = config.epochs * math.ceil(len(pairs) / config.batch_size)
    return OfflineDPOResult(output_dir, metrics)
