"""The learner: the models a trainer updates, where they live, and one update from a batch of rows.

`Learner` holds the policy and its optimizer, the frozen reference, and the value critic with its
optimizer, on `config.device` in `config.dtype`:

- "float32": weights, activations, gradients and AdamW state in float32;
- "bfloat16": mixed precision with float32 master weights: the weights and AdamW state stay float32
  and every forward (and so backward) runs under `torch.autocast(bfloat16)`, as TRL/accelerate's
  `bf16=True` does. Measured against float32 on SmolLM2 (docs/benchmarks.md, "Learner memory and
  precision"): less time and less activation memory on a CPU with bf16 instructions. The other form,
  bf16 weights with a separate float32 master copy, would also halve the weights' and gradients'
  memory; it needs copy logic and was not built (autocast is what TRL and accelerate ship).

Memory: gradient checkpointing (activations recomputed in the backward), micro-batches of at most
`micro_batch_tokens` padded tokens whose gradients accumulate into one optimizer step (the loss of
each is normalised by the whole minibatch's counts, so the sum is the minibatch loss exactly), and
the chunked log-probability (`rl.forward`), which never holds a whole batch's float32 logits.

`update(batch, iteration)` is one iteration's learning: the behaviour, reference and critic values
once, advantages from the configured estimator, then K epochs of minibatch updates of the policy
(clipped surrogate, optionally with truncated importance sampling against the engine, rl/mismatch.py)
and of the critic (clipped value loss).
"""

from __future__ import annotations

import dataclasses
import logging
import re
import resource
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch

from rl.batch import RolloutBatch
from rl.config import TrainConfig
from rl.critic import ValueCritic
from rl.estimators import ADVANTAGE_ESTIMATORS, AdvantageInputs
from rl.forward import token_logprobs
from rl.kl import AdaptiveKLController, FixedKLController, kl
from rl.losses import is_finite_loss, masked_mean, policy_loss, value_loss
from rl.mismatch import mismatch_metrics, tis_weights
from rl.runtime import autocast, resolve_device

__all__ = ["Learner", "peak_memory_mb", "derived_seed"]
log = logging.getLogger(__name__)
SYNC_TOLERANCE = 1e-3


def derived_seed(*parts: int) -> int:
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1)[0] % (2**31 - 1))


def peak_memory_mb(device: torch.device) -> float:
    """Peak memory: CUDA's allocated bytes since the last reset on a GPU, else the process's peak RSS."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


class Learner:
    """Policy, reference and critic with their optimizers; `update` learns from one batch of rows."""

    def __init__(self, config: TrainConfig) -> None:
        from transformers import AutoModelForCausalLM

        self.config = config
        self.device = resolve_device(config.device)
        self.reference_device = resolve_device(config.reference_device) if config.reference_device else self.device
        self.estimator = ADVANTAGE_ESTIMATORS[config.estimator]
        self.policy = AutoModelForCausalLM.from_pretrained(config.model, dtype=torch.float32).to(self.device)
        self._prepare(self.policy)
        self.optimizer = torch.optim.AdamW(self._trainable(self.policy), lr=config.lr)
        self.reference = None
        if config.uses_reference:
            self.reference = AutoModelForCausalLM.from_pretrained(config.model, dtype=torch.float32)
            self.reference.to(self.reference_device).eval().requires_grad_(False)
        self.critic = self.critic_optimizer = None
        if config.critic.enabled:
            self.critic = ValueCritic.from_policy(config.model, device=str(self.device))
            self._prepare(self.critic.model)
            self.critic.model.eval()
            self.critic_optimizer = torch.optim.AdamW(self.critic.model.parameters(), lr=config.critic.lr)
        beta = config.loss.kl_coef if config.kl_placement == "loss" else config.kl_reward_coef
        self.kl_controller = (AdaptiveKLController(beta, config.kl_target, horizon=10_000)
                              if config.kl_target is not None else FixedKLController(beta))

    def _trainable(self, model) -> list[torch.nn.Parameter]:
        """The parameters `config.trainable` selects (all when None); the others are frozen."""
        if self.config.trainable is None:
            return list(model.parameters())
        pattern = re.compile(self.config.trainable)
        for name, param in model.named_parameters():
            param.requires_grad_(bool(pattern.search(name)))
        chosen = [param for param in model.parameters() if param.requires_grad]
        if not chosen:
            names = [name for name, _ in model.named_parameters()]
            raise ValueError(f"TrainConfig.trainable={self.config.trainable!r} matches none of the policy's "
                             f"parameters (e.g. {names[:2] + names[-2:]}); fix the expression or use None")
        return chosen

    def _prepare(self, model) -> None:
        model.train()
        if self.config.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            model.config.use_cache = False

    def autocast(self, device: torch.device | None = None):
        """The forward passes' precision context (bfloat16 autocast, or nothing for float32)."""
        return autocast(device or self.device, self.config.dtype)

    def weights(self) -> dict[str, torch.Tensor]:
        """The policy's weights, to push into the engine."""
        return self.policy.state_dict()

    # ---- rows in micro-batches ------------------------------------------------------------------
    def micro_batches(self, batch: RolloutBatch, rows: Sequence[int]) -> list[list[int]]:
        """`rows` in order, cut into micro-batches of at most `micro_batch_tokens` padded tokens
        (rows x the longest of them); all rows in one when no budget is set."""
        budget = self.config.micro_batch_tokens
        if budget is None:
            return [list(rows)]
        lengths = batch.attention_mask.sum(-1).tolist()
        out, current, longest = [], [], 0
        for r in rows:
            if lengths[r] > budget:
                raise ValueError(f"a row of {lengths[r]} tokens does not fit micro_batch_tokens={budget}: "
                                 f"set micro_batch_tokens >= {max(lengths)} (the longest row) or leave it unset")
            if current and max(longest, lengths[r]) * (len(current) + 1) > budget:
                out.append(current)
                current, longest = [], 0
            current.append(r)
            longest = max(longest, lengths[r])
        return out + [current]

    def _inputs(self, batch: RolloutBatch, rows: list[int], device: torch.device):
        """(input_ids, attention_mask) of `rows`, cut to their longest row, on `device`; and that width."""
        width = int(batch.attention_mask[rows].sum(-1).max())
        return batch.input_ids[rows, :width].to(device), batch.attention_mask[rows, :width].to(device), width

    def per_token(self, fn: Callable, batch: RolloutBatch, device: torch.device) -> torch.Tensor:
        """(B, L) `fn(input_ids, attention_mask) -> (b, width)` over the batch's micro-batches, no gradient."""
        out = torch.zeros(batch.input_ids.shape)
        with torch.no_grad():
            for rows in self.micro_batches(batch, range(len(batch))):
                ids, mask, width = self._inputs(batch, rows, device)
                with self.autocast(device):
                    out[rows, :width] = fn(ids, mask).float().cpu()
        return out

    def logprobs_of(self, model, device: torch.device):
        return lambda ids, mask: token_logprobs(model, ids, mask, chunk_size=self.config.logprob_chunk)[0]

    # ---- one iteration's learning -----------------------------------------------------------------
    def _old_logprobs(self, batch: RolloutBatch) -> torch.Tensor | None:
        """(B, L) behaviour log-probabilities for the importance ratio, computed once before the updates:
        the engine's, or the learner's own. None means on-policy: with one epoch of one minibatch the
        update's own forward is the behaviour policy, so the ratio is 1 by definition (as TRL does)."""
        c = self.config
        if c.old_logprobs == "engine":
            return batch.old_logprobs
        kl_in_reward = c.kl_placement == "reward" and self.reference is not None
        if c.epochs == 1 and c.minibatches == 1 and not kl_in_reward and c.tis_cap is None:
            return None
        return self.per_token(self.logprobs_of(self.policy, self.device), batch, self.device)

    def minibatches(self, batch: RolloutBatch, iteration: int, epoch: int) -> Iterator[list[int]]:
        """Row indices of each minibatch: whole groups (trees), shuffled per (iteration, epoch)."""
        groups = batch.group.unique().tolist()
        order = np.random.default_rng(derived_seed(self.config.seed, iteration, epoch)).permutation(len(groups))
        for chunk in np.array_split(order, self.config.minibatches):
            chosen = {groups[j] for j in chunk}
            rows = [i for i, g in enumerate(batch.group.tolist()) if g in chosen]
            if rows:
                yield rows

    def update(self, batch: RolloutBatch, iteration: int, greedy_rewards: torch.Tensor | None = None) -> dict:
        """K epochs of minibatch updates of policy and critic on one iteration's rows; returns metrics."""
        c = self.config
        mask = batch.response_mask
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        old_logp = self._old_logprobs(batch)  # (B, L) or None (on-policy)
        behaviour = old_logp if old_logp is not None else batch.old_logprobs  # for the reward's KL only
        ref_logp = (self.per_token(self.logprobs_of(self.reference, self.reference_device), batch,
                                   self.reference_device) if self.reference is not None else None)
        old_values = (self.per_token(self.critic.token_values, batch, self.device) if self.critic is not None
                      else torch.zeros_like(mask))  # (B, L)
        metrics: dict[str, float] = {}
        weights = tis_weights(old_logp, batch.old_logprobs, c.tis_cap) if c.tis_cap is not None else None  # (B, L)
        kl_in_reward = c.kl_placement == "reward" and ref_logp is not None
        out = self.estimator(AdvantageInputs(
            rewards=batch.rewards, group=batch.group, mask=mask,
            kl=kl(behaviour, ref_logp, kind=c.loss.kl_kind) * mask if kl_in_reward else torch.zeros_like(mask),
            kl_coef=self.kl_controller.value if kl_in_reward else 0.0, values=old_values,
            node_values=batch.token_values, parent_values=batch.parent_values, greedy_rewards=greedy_rewards,
            gamma=c.gamma, lam=c.lam))
        targets = out.value_targets if out.value_targets is not None else batch.token_values
        target_mask = out.value_mask if out.value_mask is not None else mask
        if self.critic is not None:  # error on this iteration's fresh (held-out) tree nodes, before training
            metrics["critic_heldout_mse"] = float(masked_mean((old_values.clamp(0, 1) - batch.token_values) ** 2, mask))
        loss_config = dataclasses.replace(c.loss, kl_coef=self.kl_controller.value if c.kl_placement == "loss" else 0.0)
        entropy_mode = "grad" if loss_config.entropy_coef != 0 else "log"
        sums: dict[str, list[float]] = {}

        def policy_part(rows: list[int], totals: dict):
            ids, attention, width = self._inputs(batch, rows, self.device)
            pick = lambda x: x[rows, :width].to(self.device) if x is not None else None  # noqa: E731
            with self.autocast():
                logp, entropy = token_logprobs(self.policy, ids, attention, entropy=entropy_mode,
                                               chunk_size=c.logprob_chunk)
            logp, micro_mask = logp.float(), pick(mask)
            if "engine_learner_logprob_gap" not in metrics:  # the learner before its first update
                metrics.update(self._check_engine(logp.detach(), pick(batch.old_logprobs), micro_mask))
            old = pick(old_logp) if old_logp is not None else logp.detach()
            loss, m = policy_loss(logp, old, pick(out.advantages), micro_mask, loss_config, entropy=entropy,
                                  ref_logp=pick(ref_logp) if loss_config.kl_coef > 0 else None,
                                  importance_weights=pick(weights), **totals)
            return loss, m, float(micro_mask.sum())

        def critic_part(rows: list[int], totals: dict):
            ids, attention, width = self._inputs(batch, rows, self.device)
            pick = lambda x: x[rows, :width].to(self.device)  # noqa: E731
            with self.autocast():
                values = self.critic.token_values(ids, attention)
            loss, m = value_loss(values.float(), pick(old_values), pick(targets), pick(target_mask),
                                 clip_range=c.critic.clip_range, num_tokens=totals["num_tokens"])
            return loss, m, float(pick(target_mask).sum())

        for epoch in range(c.epochs):
            for rows in self.minibatches(batch, iteration, epoch):
                micro = self.micro_batches(batch, rows)
                totals = {"num_tokens": float(mask[rows].sum()), "num_rows": len(rows)}
                m = self._step(self.policy, self.optimizer, micro, lambda r: policy_part(r, totals), "policy",
                               iteration)
                if self.critic is not None:
                    self.critic.model.train()
                    m.update(self._step(self.critic.model, self.critic_optimizer, micro,
                                        lambda r: critic_part(r, {"num_tokens": float(target_mask[rows].sum())}),
                                        "critic", iteration))
                    self.critic.model.eval()
                for k, v in m.items():
                    sums.setdefault(k, []).append(float(v))
        metrics.update({k: float(np.mean(v)) for k, v in sums.items()})
        if ref_logp is not None:
            metrics["kl_to_reference"] = float(masked_mean(kl(behaviour, ref_logp, kind="k3"), mask))
            self.kl_controller.update(metrics["kl_to_reference"], len(batch))
        metrics["kl_coef"] = float(self.kl_controller.value)
        metrics["peak_memory_mb"] = peak_memory_mb(self.device)
        return metrics

    def _check_engine(self, learner_logp: torch.Tensor, engine_logp: torch.Tensor, mask: torch.Tensor) -> dict:
        """The engine sampled with the weights the learner holds before its first update: the largest
        gap between their log-probabilities of the sampled tokens (must be ~0 in float32: checked
        against 1e-3 and raised in debug mode), and the mismatch metrics (rl/mismatch.py). Measured
        once per iteration, on the first micro-batch, before any update."""
        gap = float(((learner_logp - engine_logp).abs() * mask).max())
        if self.config.debug and gap > SYNC_TOLERANCE:
            raise RuntimeError(f"engine and learner disagree on sampled-token log-probabilities by {gap:.2e} "
                               f"(> {SYNC_TOLERANCE}): weights are out of sync")
        return {"engine_learner_logprob_gap": gap, **mismatch_metrics(learner_logp, engine_logp, mask,
                                                                      self.config.tis_cap)}

    def _step(self, model, optimizer, micro_batches: list[list[int]], loss_of: Callable, what: str,
              iteration: int) -> dict:
        """One optimizer step over a minibatch: each micro-batch's loss (normalised by the minibatch's
        totals) is backpropagated in turn, so the gradients add up to the minibatch's. Skipped, with a
        warning, when a loss or the gradient is not finite. Metrics: means weighted by trained tokens."""
        optimizer.zero_grad()
        sums, weight_total = {}, 0.0
        for rows in micro_batches:
            loss, m, weight = loss_of(rows)
            if not is_finite_loss(loss):
                log.warning("iteration %d: %s loss is %s; update skipped", iteration, what, loss.detach().item())
                optimizer.zero_grad()
                return {**m, f"{what}_skipped": 1.0}
            loss.backward()
            for k, v in m.items():
                sums[k] = sums.get(k, 0.0) + float(v) * weight
            weight_total += weight
        metrics = {k: v / max(weight_total, 1e-12) for k, v in sums.items()}
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), self.config.max_grad_norm)
        if not torch.isfinite(norm):  # the total norm is NaN/inf whenever any gradient entry is
            log.warning("iteration %d: %s gradient is not finite; update skipped", iteration, what)
            optimizer.zero_grad()
            return {**metrics, f"{what}_skipped": 1.0}
        optimizer.step()
        return {**metrics, f"{what}_skipped": 0.0}
