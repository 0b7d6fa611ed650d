"""The value critic: a scalar head on a causal-LM trunk that is also the planner's scorer.

The critic is a Hugging Face `AutoModelForTokenClassification` with one label: a linear head on the
last hidden state of a Llama-style trunk gives a value at every position. Position t holds the value
of the prefix ending at token t. PPO reads it at every response token (GAE, Schulman et al. 2016);
search reads it at the end of a prefix through the scorer contract it inherits from
`planner.scorers.ModelScorer` ("clamp": values regress returns in [0, 1] directly). Trained on
Monte-Carlo node values of search trees (as AlphaZero's value head and TS-LLM's critic are), the
same object then guides the next search: that is the loop this project exists for.

The trunk starts as a copy of the policy's (a separate model, as in TRL's PPO and OpenRLHF), or of any
model that reads the policy's token ids (`check_same_vocabulary`), such as a smaller one; the head
starts at zero weight and `init_value` bias, so the untrained critic says "unknown" (0.5) everywhere.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F

from planner.scorers import ModelScorer

__all__ = ["ValueCritic", "check_same_vocabulary"]


@contextlib.contextmanager
def _quiet(logger_name: str):
    """Errors only from `logger_name` inside."""
    logger = logging.getLogger(logger_name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def check_same_vocabulary(policy_folder: str | os.PathLike, trunk_folder: str | os.PathLike,
                          what: str = "the critic's trunk", setting: str = "CriticConfig.model") -> None:
    """A critic (or another model, `what`, set by `setting`) reads the policy's token ids, so a model from another
    folder must share the policy's tokenizer vocabulary (token to id, entry for entry); raises one ValueError
    naming the fix otherwise."""
    from transformers import AutoTokenizer

    vocabularies = []
    for folder in (policy_folder, trunk_folder):
        try:
            vocabularies.append(AutoTokenizer.from_pretrained(folder).get_vocab())
        except (OSError, ValueError) as error:
            raise ValueError(f"no tokenizer in {str(folder)!r} to check the vocabulary of {what} against the "
                             f"policy's ({error})") from error
    policy, trunk = vocabularies
    if policy != trunk:
        differ = len(set(policy.items()) ^ set(trunk.items()))
        raise ValueError(f"{what} {str(trunk_folder)!r} has another vocabulary than the policy "
                         f"{str(policy_folder)!r} ({len(trunk)} and {len(policy)} entries, {differ} token-id pairs "
                         f"not shared): it reads the policy's token ids, so pick a model with the policy's "
                         f"tokenizer for {setting}" + (", or leave CriticConfig.model empty to copy the policy's "
                                                       "trunk" if setting == "CriticConfig.model" else ""))


class ValueCritic(ModelScorer):
    """A token-level value model. `score(prefixes)` in [0, 1]; `token_values(...)` with gradients."""

    def __init__(self, model, *, batch_size: int = 32, device: str | None = None) -> None:
        super().__init__(model, squash="clamp", padding_side="right", batch_size=batch_size, device=device)

    @classmethod
    def from_policy(cls, policy_folder: str | os.PathLike, *, init_value: float = 0.5, dtype: str = "float32",
                    device: str | None = None) -> "ValueCritic":
        """A new critic whose trunk is a copy of the model in `policy_folder` (the policy's, or any model
        with its vocabulary: `check_same_vocabulary`)."""
        from transformers import AutoConfig, AutoModelForTokenClassification

        if not (Path(policy_folder) / "config.json").is_file():
            raise FileNotFoundError(f"no model folder at {str(policy_folder)!r} to build the critic from")
        config = AutoConfig.from_pretrained(policy_folder, num_labels=1)
        config.classifier_dropout = 0.0  # a keyword to from_pretrained is dropped silently: the head had p=0.1
        with _quiet("transformers.modeling_utils"):  # its load report lists the new head, which is the point
            model = AutoModelForTokenClassification.from_pretrained(policy_folder, config=config,
                                                                    dtype=getattr(torch, dtype))
        with torch.no_grad():
            model.score.weight.zero_()
            if model.score.bias is not None:
                model.score.bias.fill_(init_value)
        return cls(model, device=device)

    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike, *, device: str | None = None) -> "ValueCritic":
        """A critic saved with `save_pretrained`."""
        from transformers import AutoModelForTokenClassification

        if not (Path(folder) / "config.json").is_file():
            raise FileNotFoundError(f"no critic folder at {str(folder)!r} (expected a config.json there)")
        return cls(AutoModelForTokenClassification.from_pretrained(folder, num_labels=1), device=device)

    def save_pretrained(self, folder: str | os.PathLike) -> None:
        self.model.save_pretrained(folder, safe_serialization=True)

    def token_values(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """(B, T) raw values at every position (right-padded input), with gradients."""
        out = self.model(input_ids=input_ids.to(self.device), attention_mask=attention_mask.to(self.device))
        return out.logits[..., 0].float()  # (B, T)

    def packed_values(self, packed: dict) -> torch.Tensor:
        """(G, N) raw values at every token of trees packed by `rl.packing.collate`: the trunk with the
        tree attention mask and path positions, then the head (with gradients)."""
        from rl.packing import mask_for

        dtype = next(self.model.parameters()).dtype
        hidden = self.model.base_model(input_ids=packed["input_ids"], position_ids=packed["position_ids"],
                                       attention_mask=mask_for(self.model, packed["attention"], dtype)).last_hidden_state
        return self.model.score(hidden)[..., 0].float()  # (G, N)

    def fit(self, prefixes: Sequence[Sequence[int]], targets: Sequence[float], *, epochs: int = 4,
            lr: float = 1e-3, batch_size: int = 32, seed: int = 0, optimizer=None) -> list[float]:
        """Regress the value at each prefix's last token on its target (e.g. a tree node's Monte-Carlo
        value); returns the mean squared error of each epoch. The head sees unclamped values so
        gradients flow at the boundaries of [0, 1]."""
        if len(prefixes) != len(targets) or not prefixes:
            raise ValueError(f"fit needs as many targets as prefixes (> 0); got {len(prefixes)} and {len(targets)}")
        optimizer = optimizer or torch.optim.AdamW(self.model.parameters(), lr=lr)
        generator = torch.Generator().manual_seed(seed)
        target = torch.tensor([float(t) for t in targets])
        self.model.train()
        losses = []
        for _ in range(epochs):
            order = torch.randperm(len(prefixes), generator=generator).tolist()
            total = 0.0
            for start in range(0, len(order), batch_size):
                index = order[start:start + batch_size]
                ids, mask = self.pad([prefixes[i] for i in index])
                values = self.token_values(ids, mask)  # (b, T)
                last = mask.sum(-1) - 1  # (b,)
                predicted = values[torch.arange(len(index)), last.to(values.device)]  # (b,)
                loss = F.mse_loss(predicted, target[index].to(predicted.device))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                total += loss.item() * len(index)
            losses.append(total / len(order))
        self.model.eval()
        return losses

    def pad(self, rows: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Right-pad token-id rows: (input_ids (B, T), attention_mask (B, T))."""
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, :len(r)] = torch.tensor(list(r), dtype=torch.long)
            mask[i, :len(r)] = 1
        return ids, mask
