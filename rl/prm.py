"""A process reward model trained from tree labels, that judges the step a search proposes.

A value head that reads only the last hidden state of a prefix learns whether the prefix as a whole
is on track (depth, earlier slips) but barely tells apart the sibling steps that search compares: the
hidden state at a step's end is the trunk's plan for the next token, not a verdict on the tokens it
just read (measured in docs/results.md, "Values that guide search"). This model therefore reads
the whole last step:

- **per-token evidence**: the head's logit at every token of the last step, pooled by `read`
  ("last", "mean" or "min" over the step's tokens); the trunk's state at a written digit is where a
  wrong digit can show;
- **the policy's own confidence**: optionally, the mean and the least log-probability of the step's
  sampled tokens (free: the engine returned them while sampling) enter the logit with learned
  weights: logit = pooled head + w_mean * mean_logprob + w_min * min_logprob + b (the confidence
  baseline as an input, as the issue's "residual" suggestion has it);

and is trained with a binary cross-entropy on soft or hard Monte-Carlo labels (Math-Shepherd, Wang et
al. 2024) plus, optionally, a pairwise loss between siblings with different labels (the ranking search
uses; a Bradley-Terry term, -log sigmoid(logit_good - logit_bad)).

It is a planner scorer (`score(prefixes, prompt_len, finished, step_logprobs)`, values in [0, 1]),
saved as a folder (`save_pretrained`: the trunk, the head and `prm.json`) that `ProcessRewardModel.load`
reads back.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F

from planner.scorers import Scorer

__all__ = ["PRMConfig", "ProcessRewardModel", "StepExample"]


@dataclass
class PRMConfig:
    """How the process reward model reads a step and learns."""

    read: Literal["last", "mean", "min"] = "mean"
    """Pool of the head's per-token logits over the last step: its last token, the mean, or the least."""
    confidence: bool = True
    """Add the policy's mean and least step log-probability to the logit, with learned weights."""
    pairwise_weight: float = 1.0
    """Weight of the sibling pairwise loss (0: binary cross-entropy alone)."""
    lr: float = 1e-3
    """AdamW learning rate."""
    epochs: int = 4
    """Passes over the examples."""
    batch_size: int = 64
    """Sibling groups per step are kept whole, so a batch holds about this many prefixes."""
    seed: int = 0
    """Order of the examples."""

    def __post_init__(self) -> None:
        if self.read not in ("last", "mean", "min"):
            raise ValueError(f"PRMConfig.read must be one of ['last', 'mean', 'min']; got {self.read!r}")
        if self.pairwise_weight < 0:
            raise ValueError(f"PRMConfig.pairwise_weight must be >= 0; got {self.pairwise_weight!r}")
        for name in ("epochs", "batch_size"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"PRMConfig.{name} must be an integer >= 1; got {getattr(self, name)!r}")


@dataclass
class StepExample:
    """One labelled step: the prefix that ends with it, its sampled log-probabilities and its label."""

    prefix: list[int]
    step_logprobs: list[float]
    label: float
    """In [0, 1]: a Monte-Carlo value (soft), its rounding (hard), or a process oracle."""
    group: int
    """Siblings (steps proposed below the same parent) share a group."""


class ProcessRewardModel(Scorer):
    """A trunk with a one-logit token head, pooled over the last step, plus confidence features."""

    uses_step_logprobs = True

    def __init__(self, model, config: PRMConfig | None = None, *, batch_size: int = 64) -> None:
        super().__init__()
        self.model, self.config = model, config or PRMConfig()
        self.model.eval()
        self.device = next(self.model.parameters()).device
        self.confidence_weights = torch.nn.Parameter(torch.zeros(3, device=self.device))  # mean, min, bias
        self.pad_token_id = getattr(self.model.config, "pad_token_id", None) or 0
        self.batch_size = batch_size
        self.num_parameters = sum(p.numel() for p in self.model.parameters())

    # ---- building, saving, loading ----------------------------------------------------------------
    @classmethod
    def from_policy(cls, policy_folder: str | os.PathLike, config: PRMConfig | None = None,
                    device: str | None = None) -> "ProcessRewardModel":
        """A new PRM whose trunk is a copy of the policy's, head at zero (every logit 0: value 1/2)."""
        from rl.critic import ValueCritic

        critic = ValueCritic.from_policy(policy_folder, init_value=0.0, device=device)
        return cls(critic.model, config)

    def save_pretrained(self, folder: str | os.PathLike) -> None:
        folder = Path(folder)
        self.model.save_pretrained(folder, safe_serialization=True)
        (folder / "prm.json").write_text(json.dumps({"config": asdict(self.config),
                                                     "confidence_weights": self.confidence_weights.tolist()}))

    @classmethod
    def load(cls, folder: str | os.PathLike, device: str | None = None) -> "ProcessRewardModel":
        from transformers import AutoModelForTokenClassification

        folder = Path(folder)
        if not (folder / "prm.json").is_file():
            raise FileNotFoundError(f"no process reward model at {str(folder)!r} (expected prm.json there): train "
                                    "one with rl.prm.ProcessRewardModel.fit and save_pretrained")
        saved = json.loads((folder / "prm.json").read_text())
        model = AutoModelForTokenClassification.from_pretrained(folder, num_labels=1)
        prm = cls(model.to(device) if device else model, PRMConfig(**saved["config"]))
        with torch.no_grad():
            prm.confidence_weights.copy_(torch.tensor(saved["confidence_weights"]))
        return prm

    # ---- the value ----------------------------------------------------------------------------
    def logits(self, prefixes: Sequence[Sequence[int]], step_logprobs: Sequence[Sequence[float]]) -> torch.Tensor:
        """(B,) the value's logit per prefix, with gradients."""
        width = max(len(p) for p in prefixes)
        ids = torch.full((len(prefixes), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(prefixes), width), dtype=torch.long)
        step = torch.zeros((len(prefixes), width), dtype=torch.bool)  # the last step's tokens
        for i, (p, lp) in enumerate(zip(prefixes, step_logprobs)):
            ids[i, :len(p)] = torch.tensor(list(p))
            mask[i, :len(p)] = 1
            step[i, len(p) - max(1, len(lp)):len(p)] = True
        out = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits[..., 0].float()
        step = step.to(self.device)
        if self.config.read == "last":
            pooled = out[torch.arange(len(prefixes)), mask.sum(-1).to(self.device) - 1]
        elif self.config.read == "mean":
            pooled = (out * step).sum(-1) / step.sum(-1)
        else:
            pooled = out.masked_fill(~step, float("inf")).min(-1).values
        if not self.config.confidence:
            return pooled
        features = torch.tensor([[sum(lp) / len(lp) if lp else 0.0, min(lp) if lp else 0.0] for lp in step_logprobs],
                                device=self.device)  # (B, 2)
        return pooled + features @ self.confidence_weights[:2] + self.confidence_weights[2]

    def _score(self, prefixes, prompt_len, finished, step_logprobs):
        values = []
        with torch.no_grad():
            for start in range(0, len(prefixes), self.batch_size):
                chunk = slice(start, start + self.batch_size)
                values += torch.sigmoid(self.logits(prefixes[chunk], step_logprobs[chunk])).tolist()
        return values

    # ---- learning -----------------------------------------------------------------------------
    def fit(self, examples: Sequence[StepExample]) -> list[float]:
        """Train on labelled steps; returns each epoch's mean loss (cross-entropy + pairwise)."""
        if not examples:
            raise ValueError("fit needs at least one labelled step")
        c = self.config
        groups: dict[int, list[StepExample]] = {}
        for e in examples:
            groups.setdefault(e.group, []).append(e)
        order_of = list(groups)
        parameters = list(self.model.parameters()) + [self.confidence_weights]
        optimizer = torch.optim.AdamW(parameters, lr=c.lr)
        generator = torch.Generator().manual_seed(c.seed)
        self.model.train()
        history = []
        for _ in range(c.epochs):
            order = [order_of[k] for k in torch.randperm(len(order_of), generator=generator).tolist()]
            total, count, batch = 0.0, 0, []
            for g in order:
                batch += groups[g]
                if len(batch) >= c.batch_size or g == order[-1]:
                    loss = self._loss(batch)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    total, count, batch = total + loss.item() * len(batch), count + len(batch), []
            history.append(total / max(count, 1))
        self.model.eval()
        return history

    def _loss(self, batch: list[StepExample]) -> torch.Tensor:
        logits = self.logits([e.prefix for e in batch], [e.step_logprobs for e in batch])  # (b,)
        labels = torch.tensor([e.label for e in batch], device=logits.device)
        loss = F.binary_cross_entropy_with_logits(logits, labels)
        if self.config.pairwise_weight > 0:
            group = torch.tensor([e.group for e in batch], device=logits.device)
            better = (labels[:, None] > labels[None, :]) & (group[:, None] == group[None, :])  # (b, b) pairs i > j
            if better.any():
                margins = (logits[:, None] - logits[None, :])[better]
                loss = loss + self.config.pairwise_weight * -F.logsigmoid(margins).mean()
        return loss
