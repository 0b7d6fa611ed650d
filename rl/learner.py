"""The learner: the models a trainer updates, where they live, and one update from a batch of rows.

`Learner` holds the policy and its optimizer, the frozen reference, and the value critic with its
optimizer, on `config.learner.device` in `config.learner.dtype`:

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

import contextlib
import dataclasses
import logging
import re
import resource
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch

from rl import distributed
from rl.batch import RolloutBatch
from rl.config import TrainConfig
from rl.critic import ValueCritic, check_same_vocabulary
from rl.estimators import ADVANTAGE_ESTIMATORS, AdvantageInputs
from rl.forward import PolicyForward, ValueForward, rows_from_packed
from rl.kl import AdaptiveKLController, FixedKLController, kl
from rl.losses import is_finite_loss, masked_mean, policy_loss, value_loss
from rl.mismatch import mismatch_metrics, tis_weights
from rl.packing import collate, packing_support
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


def _layers(model) -> list[torch.nn.Module]:
    """The transformer blocks of a Hugging Face model (FSDP2 shards each on its own), or none found."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else getattr(model, "base_model", model)
    return list(getattr(decoder, "layers", []))


class Learner:
    """Policy, reference and critic with their optimizers; `update` learns from one batch of rows."""

    def __init__(self, config: TrainConfig) -> None:
        from transformers import AutoModelForCausalLM

        self.config = config
        learner, algorithm = config.learner, config.algorithm
        self.device = resolve_device(learner.device)
        self.reference_device = resolve_device(learner.reference_device) if learner.reference_device else self.device
        self.estimator = ADVANTAGE_ESTIMATORS[algorithm.estimator]
        self.policy = AutoModelForCausalLM.from_pretrained(config.model, dtype=torch.float32).to(self.device)
        self._prepare(self.policy)
        self._freeze_untrainable(self.policy)  # before DDP/FSDP see the parameters
        # Data parallel over torchrun's ranks (rl/distributed.py): the forward modules are what DDP/FSDP wrap.
        self.policy_forward = distributed.wrap(PolicyForward(self.policy, learner.logprob_chunk), learner.data_parallel,
                                               layers=_layers(self.policy))
        self.optimizer = torch.optim.AdamW([p for p in self.policy.parameters() if p.requires_grad], lr=learner.lr)
        self.reference = self.reference_forward = None
        if algorithm.uses_reference:
            self.reference = AutoModelForCausalLM.from_pretrained(config.model, dtype=torch.float32)
            self.reference.to(self.reference_device).eval().requires_grad_(False)
            self.reference_forward = PolicyForward(self.reference, learner.logprob_chunk)
        self.critic = self.critic_optimizer = self.critic_forward = None
        if config.trains_critic:
            critic = config.value.critic
            if critic.model:
                check_same_vocabulary(config.model, critic.model)
            self.critic = ValueCritic.from_policy(critic.model or config.model, device=str(self.device))
            self._prepare(self.critic.model)
            self.critic.model.eval()
            self.critic_forward = distributed.wrap(ValueForward(self.critic), learner.data_parallel,
                                                   layers=_layers(self.critic.model))
            self.critic_optimizer = torch.optim.AdamW(self.critic.model.parameters(), lr=critic.lr)
        self.pad_id = self.policy.config.pad_token_id if self.policy.config.pad_token_id is not None else 0
        unsupported = packing_support(self.policy) if learner.packing else "packing is off"
        if unsupported is None and self.critic is not None:  # a trunk of another kind (CriticConfig.model)
            unsupported = packing_support(self.critic.model)
        self.packed = unsupported is None
        if learner.packing and unsupported:
            log.warning("tree packing is not supported for this model (%s): the learner runs row by row", unsupported)
        beta = algorithm.loss.kl_coef if algorithm.kl_placement == "loss" else algorithm.kl_reward_coef
        self.kl_controller = (AdaptiveKLController(beta, algorithm.kl_target, horizon=10_000)
                              if algorithm.kl_target is not None else FixedKLController(beta))

    def _freeze_untrainable(self, model) -> None:
        """Freeze the parameters `config.learner.trainable` does not select (none when it is None)."""
        trainable = self.config.learner.trainable
        if trainable is None:
            return
        pattern = re.compile(trainable)
        for name, param in model.named_parameters():
            param.requires_grad_(bool(pattern.search(name)))
        if not any(param.requires_grad for param in model.parameters()):
            names = [name for name, _ in model.named_parameters()]
            raise ValueError(f"TrainConfig.learner.trainable={trainable!r} matches none of the policy's "
                             f"parameters (e.g. {names[:2] + names[-2:]}); fix the expression or use None")

    def _prepare(self, model) -> None:
        model.train()
        if self.config.learner.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            model.config.use_cache = False

    def autocast(self, device: torch.device | None = None):
        """The forward passes' precision context (bfloat16 autocast, or nothing for float32)."""
        return autocast(device or self.device, self.config.learner.dtype)

    def weights(self, model=None) -> dict[str, torch.Tensor]:
        """The full weights of the policy (or `model`), to push into the engine or save. Sharded by FSDP
        over several ranks they are gathered (a collective: every rank calls it) onto rank 0's CPU;
        the other ranks get an empty dict."""
        model = self.policy if model is None else model
        if distributed.world_size() > 1 and self.config.learner.data_parallel == "fsdp":
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

            return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return model.state_dict()

    def optimizer_states(self) -> tuple[dict, dict | None]:
        """The policy's and the critic's AdamW state, whole (gathered under FSDP, like `weights`)."""
        def whole(model, optimizer):
            if optimizer is None:
                return None
            if distributed.world_size() > 1 and self.config.learner.data_parallel == "fsdp":
                from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

                return get_optimizer_state_dict(model, optimizer,
                                                options=StateDictOptions(full_state_dict=True, cpu_offload=True))
            return optimizer.state_dict()
        return (whole(self.policy, self.optimizer),
                whole(self.critic.model if self.critic else None, self.critic_optimizer))

    def load_states(self, policy: dict, policy_optimizer: dict, critic: dict | None, critic_optimizer: dict | None) -> None:
        """Restore whole weights and AdamW states (every rank passes the same ones); under FSDP each rank
        keeps its shard."""
        pairs = [(self.policy, self.optimizer, policy, policy_optimizer)]
        if self.critic is not None:
            pairs.append((self.critic.model, self.critic_optimizer, critic, critic_optimizer))
        for model, optimizer, weights, state in pairs:
            if distributed.world_size() > 1 and self.config.learner.data_parallel == "fsdp":
                from torch.distributed.checkpoint.state_dict import (StateDictOptions, set_model_state_dict,
                                                                     set_optimizer_state_dict)

                options = StateDictOptions(full_state_dict=True)
                set_model_state_dict(model, weights, options=options)
                set_optimizer_state_dict(model, optimizer, state, options=options)
            else:
                model.load_state_dict(weights, strict=False)  # checked strictly by rl.checkpoint.load
                optimizer.load_state_dict(state)

    # ---- rows in micro-batches ------------------------------------------------------------------
    def micro_batches(self, batch: RolloutBatch, rows: Sequence[int]) -> list[list[int]]:
        """`rows` in order, cut into micro-batches of at most `micro_batch_tokens` padded tokens; all in
        one when no budget is set. Row-wise a micro-batch costs rows x its longest row; packed it holds
        whole trees and costs trees x its largest packed tree."""
        budget = self.config.learner.micro_batch_tokens
        if budget is None:
            return [list(rows)]
        if self.packed:
            units = [[r for r in rows if int(batch.row_pack[r]) == p] for p in dict.fromkeys(batch.row_pack[rows].tolist())]
            sizes = [len(batch.packs[int(batch.row_pack[u[0]])]) for u in units]
            what = "packed tree"
        else:
            units, sizes, what = [[r] for r in rows], batch.attention_mask[list(rows)].sum(-1).tolist(), "row"
        out, current, largest, count = [], [], 0, 0
        for unit, size in zip(units, sizes):
            if size > budget:
                raise ValueError(f"a {what} of {size} tokens does not fit micro_batch_tokens={budget}: set "
                                 f"micro_batch_tokens >= {max(sizes)} (the largest {what}) or leave it unset")
            if current and max(largest, size) * (count + 1) > budget:
                out.append(current)
                current, largest, count = [], 0, 0
            current += unit
            largest, count = max(largest, size), count + 1
        return out + [current]

    def forward(self, module, batch: RolloutBatch, rows: list[int], device: torch.device,
                entropy: str | None = None, temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor | None, int]:
        """`rows`' per-token quantities from a forward module (`policy_forward`, `reference_forward`:
        log-probabilities under softmax(logits / temperature), and entropies when `entropy` is "grad" or
        "log"; `critic_forward`: values) in the row layout cut to their longest row: (values (b, width),
        entropies or None, width).
        Packed (each tree's nodes once, rl/packing.py) when `self.packed`, else row by row."""
        width = int(batch.attention_mask[rows].sum(-1).max())
        with self.autocast(device):
            if self.packed:
                used = list(dict.fromkeys(batch.row_pack[rows].tolist()))
                inputs = {k: v.to(device) for k, v in collate([batch.packs[p] for p in used], self.pad_id).items()}
                local = {p: k for k, p in enumerate(used)}
                rows_pack = torch.tensor([local[int(p)] for p in batch.row_pack[rows]], device=device)
                index = batch.packed_index[rows, :width].to(device)
                gather = lambda x, first: rows_from_packed(x, rows_pack, index, first) if x is not None else None  # noqa: E731
            else:
                inputs = {"input_ids": batch.input_ids[rows, :width].to(device),
                          "attention_mask": batch.attention_mask[rows, :width].to(device)}
                gather = lambda x, first: x  # noqa: E731
            if entropy is None:  # values
                return gather(module(inputs), False), None, width
            logp, ent = module(inputs, entropy=entropy, temperature=temperature)
            return gather(logp, True), gather(ent, True), width

    def per_token(self, module, batch: RolloutBatch, device: torch.device, entropy: str | None = "none",
                  temperature: float = 1.0) -> torch.Tensor:
        """(B, L) `forward` over the whole batch in micro-batches, without gradient, on the CPU."""
        out = torch.zeros(batch.input_ids.shape)
        with torch.no_grad():
            for rows in self.micro_batches(batch, range(len(batch))):
                values, _, width = self.forward(module, batch, rows, device, entropy, temperature)
                out[rows, :width] = values.float().cpu()
        return out

    # ---- one iteration's learning -----------------------------------------------------------------
    def _old_logprobs(self, batch: RolloutBatch) -> torch.Tensor | None:
        """(B, L) behaviour log-probabilities for the importance ratio, computed once before the updates:
        the engine's, or the learner's own. None means on-policy: with one epoch of one minibatch the
        update's own forward is the behaviour policy, so the ratio is 1 by definition (as TRL does)."""
        algorithm, learner = self.config.algorithm, self.config.learner
        if algorithm.old_logprobs == "engine":
            return batch.old_logprobs
        kl_in_reward = algorithm.kl_placement == "reward" and self.reference is not None
        if learner.epochs == 1 and learner.minibatches == 1 and not kl_in_reward:
            return None
        return self.per_token(self.policy_forward, batch, self.device)

    def _sampling_logprobs(self, batch: RolloutBatch) -> torch.Tensor:
        """(B, L) log-probabilities under the distribution the engine drew the tokens from: the engine's
        own at temperature 1; at search temperature T != 1, log softmax(logits / T) of the learner's
        weights before the update (the engine returns temperature-1 log-probabilities, and the two hold
        the same weights)."""
        temperature = self.config.search.temperature
        if temperature == 1.0:
            return batch.old_logprobs
        return self.per_token(self.policy_forward, batch, self.device, temperature=temperature)

    def minibatches(self, batch: RolloutBatch, iteration: int, epoch: int) -> Iterator[list[int]]:
        """Row indices of each minibatch: whole groups (trees), shuffled per (iteration, epoch)."""
        groups = batch.group.unique().tolist()
        order = np.random.default_rng(derived_seed(self.config.loop.seed, iteration, epoch)).permutation(len(groups))
        for chunk in np.array_split(order, self.config.learner.minibatches):
            chosen = {groups[j] for j in chunk}
            rows = [i for i, g in enumerate(batch.group.tolist()) if g in chosen]
            if rows or distributed.world_size() > 1:  # every rank steps as often as the others
                yield rows

    def update(self, batch: RolloutBatch, iteration: int, greedy_rewards: torch.Tensor | None = None,
               done: Callable[[int], object] | None = None) -> dict:
        """K epochs of minibatch updates of policy and critic on one iteration's rows; returns metrics.
        done(1) is called after each minibatch (the trainer's progress bar)."""
        c = self.config.algorithm
        mask = batch.response_mask
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        old_logp = self._old_logprobs(batch)  # (B, L) or None (on-policy)
        behaviour = old_logp if old_logp is not None else batch.old_logprobs  # for the reward's KL only
        ref_logp = (self.per_token(self.reference_forward, batch, self.reference_device)
                    if self.reference is not None else None)
        old_values = (self.per_token(self.critic_forward, batch, self.device, entropy=None) if self.critic is not None
                      else torch.zeros_like(mask))  # (B, L)
        metrics: dict[str, float] = {}
        sampling_logp = self._sampling_logprobs(batch) if c.tis_cap is not None else None  # (B, L)
        kl_in_reward = c.kl_placement == "reward" and ref_logp is not None
        out = self.estimator(AdvantageInputs(
            rewards=batch.rewards, group=batch.group, mask=mask,
            kl=kl(behaviour, ref_logp, kind=c.loss.kl_kind) * mask if kl_in_reward else torch.zeros_like(mask),
            kl_coef=self.kl_controller.value if kl_in_reward else 0.0, values=old_values,
            node_values=batch.token_values, parent_values=batch.parent_values, node_leaves=batch.token_leaves,
            root_values=batch.root_values, progress=batch.token_progress, progress_coef=c.progress_coef,
            greedy_rewards=greedy_rewards, gamma=c.gamma, lam=c.lam))
        targets = out.value_targets if out.value_targets is not None else batch.token_values
        target_mask = out.value_mask if out.value_mask is not None else mask
        if self.critic is not None:  # error on this iteration's fresh (held-out) tree nodes, before training
            metrics["critic_heldout_mse"] = _batch_mean((old_values.clamp(0, 1) - batch.token_values) ** 2, mask)
        loss_config = dataclasses.replace(c.loss, kl_coef=self.kl_controller.value if c.kl_placement == "loss" else 0.0)
        entropy_mode = "grad" if loss_config.entropy_coef != 0 else "log"
        sums: dict[str, list[float]] = {}

        def policy_part(rows: list[int], totals: dict):
            logp, entropy, width = self.forward(self.policy_forward, batch, rows, self.device, entropy_mode)
            pick = lambda x: x[rows, :width].to(self.device) if x is not None else None  # noqa: E731
            logp, micro_mask = logp.float(), pick(mask)
            if "engine_learner_logprob_gap" not in metrics:  # the learner before its first update
                metrics.update(self._check_engine(logp.detach(), pick(batch.old_logprobs), micro_mask))
            old = pick(old_logp) if old_logp is not None else logp.detach()
            # TIS (rl/mismatch.py): pi_old / mu, capped, mu the distribution the tokens were drawn from
            weights = tis_weights(old, pick(sampling_logp), c.tis_cap) if sampling_logp is not None else None
            loss, m = policy_loss(logp, old, pick(out.advantages), micro_mask, loss_config, entropy=entropy,
                                  ref_logp=pick(ref_logp) if loss_config.kl_coef > 0 else None,
                                  importance_weights=weights, **totals)
            if weights is not None:
                m["tis_weight_mean"] = float(masked_mean(weights, micro_mask))
            return loss, m, float(micro_mask.sum())

        def critic_part(rows: list[int], totals: dict):
            values, _, width = self.forward(self.critic_forward, batch, rows, self.device)
            pick = lambda x: x[rows, :width].to(self.device)  # noqa: E731
            loss, m = value_loss(values.float(), pick(old_values), pick(targets), pick(target_mask),
                                 clip_range=self.config.value.critic.clip_range, num_tokens=totals["num_tokens"])
            return loss, m, float(pick(target_mask).sum())

        for epoch in range(self.config.learner.epochs):
            for rows in self.minibatches(batch, iteration, epoch):
                micro = self.micro_batches(batch, rows) if rows else []
                # normalised by the whole minibatch's counts over every rank (rl/distributed.py)
                totals = {"num_tokens": float(distributed.all_sum(mask[rows].sum())),
                          "num_rows": int(distributed.all_sum(len(rows)))}
                m = self._step(self.policy_forward, self.optimizer, micro, lambda r: policy_part(r, totals), "policy",
                               iteration)
                if self.critic is not None:
                    self.critic.model.train()
                    critic_totals = {"num_tokens": float(distributed.all_sum(target_mask[rows].sum()))}
                    m.update(self._step(self.critic_forward, self.critic_optimizer, micro,
                                        lambda r: critic_part(r, critic_totals), "critic", iteration))
                    self.critic.model.eval()
                for k, v in m.items():
                    sums.setdefault(k, []).append(float(v))
                if done is not None:
                    done(1)
        metrics.update({k: float(np.mean(v)) for k, v in sums.items()})
        if ref_logp is not None:
            metrics["kl_to_reference"] = _batch_mean(kl(behaviour, ref_logp, kind="k3"), mask)
            self.kl_controller.update(metrics["kl_to_reference"], int(distributed.all_sum(len(batch))))
        metrics["kl_coef"] = float(self.kl_controller.value)
        metrics["peak_memory_mb"] = peak_memory_mb(self.device)
        return distributed.mean_over_ranks(metrics)

    def _check_engine(self, learner_logp: torch.Tensor, engine_logp: torch.Tensor, mask: torch.Tensor) -> dict:
        """The engine sampled with the weights the learner holds before its first update: the largest
        gap between their log-probabilities of the sampled tokens (must be ~0 in float32: checked
        against 1e-3 and raised in debug mode), and the mismatch metrics (rl/mismatch.py). Measured
        once per iteration, on the first micro-batch, before any update."""
        gap = float(((learner_logp - engine_logp).abs() * mask).max())
        if self.config.loop.debug and gap > SYNC_TOLERANCE:
            raise RuntimeError(f"engine and learner disagree on sampled-token log-probabilities by {gap:.2e} "
                               f"(> {SYNC_TOLERANCE}): weights are out of sync")
        return {"engine_learner_logprob_gap": gap, **mismatch_metrics(learner_logp, engine_logp, mask,
                                                                      self.config.algorithm.tis_cap)}

    def _step(self, module, optimizer, micro_batches: list[list[int]], loss_of: Callable, what: str,
              iteration: int) -> dict:
        """One optimizer step over a minibatch: each micro-batch's loss (normalised by the minibatch's
        totals) is backpropagated in turn, so the gradients add up to the minibatch's. Skipped, with a
        warning, when a loss or the gradient is not finite (on any rank). Metrics: means weighted by
        trained tokens.

        Data parallel: every rank runs as many backward passes as the rank with the most micro-batches
        (a rank with fewer pads with zero-weight passes over a row it has, or row 0), the gradients are
        synchronised on the last one only (DDP's `no_sync`, FSDP2's `set_requires_gradient_sync`), and
        each loss is scaled by the world size because the synchronisation averages over ranks."""
        world = distributed.world_size()
        passes = _max_over_ranks(len(micro_batches))
        optimizer.zero_grad()
        sums, weight_total, finite = {}, 0.0, True
        for k in range(passes):
            rows = micro_batches[k] if k < len(micro_batches) else None
            with _gradient_sync(module, last=k == passes - 1):
                loss, m, weight = loss_of(rows if rows is not None else [0])
                if rows is None:  # a pad pass: keeps this rank's collectives in step, adds nothing
                    loss, weight = loss * 0.0, 0.0
                if not is_finite_loss(loss):
                    finite = False
                    log.warning("iteration %d: %s loss is %s; update skipped", iteration, what, loss.detach().item())
                (loss * world).backward()
            for key, value in m.items():
                sums[key] = sums.get(key, 0.0) + float(value) * weight
            weight_total += weight
        metrics = {k: v / max(weight_total, 1e-12) for k, v in sums.items()}
        if _max_over_ranks(0 if finite else 1):  # every rank takes part, so every rank skips together
            optimizer.zero_grad()
            return {**metrics, f"{what}_skipped": 1.0}
        norm = torch.nn.utils.clip_grad_norm_(list(module.parameters()), self.config.learner.max_grad_norm)
        norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm  # FSDP2: a sharded scalar
        if not torch.isfinite(norm):  # the total norm is NaN/inf whenever any gradient entry is
            log.warning("iteration %d: %s gradient is not finite; update skipped", iteration, what)
            optimizer.zero_grad()
            return {**metrics, f"{what}_skipped": 1.0}
        optimizer.step()
        return {**metrics, f"{what}_skipped": 0.0}


def _max_over_ranks(value: int) -> int:
    if distributed.world_size() == 1:
        return value
    import torch.distributed as dist

    tensor = torch.tensor(value)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return int(tensor)


def _gradient_sync(module, last: bool):
    """Synchronise gradients over ranks in this backward pass only when `last`."""

    if last or distributed.world_size() == 1:
        return contextlib.nullcontext()
    if hasattr(module, "no_sync"):  # DDP
        return module.no_sync()
    if hasattr(module, "set_requires_gradient_sync"):  # FSDP2
        @contextlib.contextmanager
        def deferred():
            module.set_requires_gradient_sync(False)
            try:
                yield
            finally:
                module.set_requires_gradient_sync(True)
        return deferred()
    return contextlib.nullcontext()


def _batch_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    """The mean of `values` where `mask` is 1, over the whole batch (every rank's rows)."""
    return float(distributed.all_sum((values * mask).sum()) / distributed.all_sum(mask.sum()).clamp(min=1))
