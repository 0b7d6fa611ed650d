"""An outcome reward model trained with a Bradley-Terry loss on preference pairs from search trees.

The model: a sequence-classification head (one logit) on a copy of the policy's trunk, read at the last
token of prompt + response (Ouyang et al. 2022, InstructGPT's reward model; Cobbe et al. 2021's ORM).
The data: whole responses to one prompt with different verifier rewards, the correct one preferred, every
combination up to a cap per prompt (`rl.pairs.response_pairs` with response_pairing "all"). The loss (Bradley & Terry 1952, as InstructGPT eq. 1 and TRL's
RewardTrainer): -log sigmoid(r(chosen) - r(rejected)); accuracy is the share of pairs ranked right.
Held-out accuracy is measured on whole trees (prompts) kept out of training.

Saved as a folder (`save_pretrained` plus `scorer.json`) that loads as a planner scorer for best-of-N
reranking: `planner.prm_scorers.load_scorer(folder)` gives a `SequenceRewardScorer` that reads the
prefix ids as sampled (the policy's own tokens, which the model was trained on).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from planner.prm_scorers import SCORER_FILE, SequenceRewardScorer
from planner.tree import SearchTree
from rl.critic import _quiet
from rl.pairs import PairBatch, PairConfig, pair_batch, preference_pairs
from rl.runtime import torch_settings

__all__ = ["RewardModelConfig", "RewardModelResult", "bradley_terry_loss", "pair_rewards", "train_reward_model"]


def bradley_terry_loss(chosen_rewards: torch.Tensor, rejected_rewards: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """-mean log sigmoid(r_chosen - r_rejected) over pairs (B,) each; metrics: the loss, accuracy
    (share of pairs with r_chosen > r_rejected) and the mean margin."""
    if chosen_rewards.shape != rejected_rewards.shape or chosen_rewards.dim() != 1:
        raise ValueError(f"chosen and rejected rewards must both be (B,); got {tuple(chosen_rewards.shape)} and "
                         f"{tuple(rejected_rewards.shape)}")
    margin = chosen_rewards - rejected_rewards  # (B,)
    loss = -F.logsigmoid(margin).mean()
    with torch.no_grad():
        metrics = {"bt_loss": loss.item(), "accuracy": (margin > 0).float().mean().item(),
                   "margin": margin.mean().item()}
    return loss, metrics


@dataclass
class RewardModelConfig:
    """Bradley-Terry training of an outcome reward model on response pairs from trees (rl/reward_model.py)."""

    pairs_per_prompt: int = 8
    """Most (better, worse) response pairs per prompt (>= 1): every combination of distinct responses with
    different rewards, best first (rl.pairs, response_pairing "all")."""
    lr: float = 1e-3
    """AdamW learning rate (> 0)."""
    epochs: int = 2
    """Passes over the training pairs (>= 1)."""
    batch_size: int = 32
    """Pairs per optimizer step (>= 1)."""
    heldout_fraction: float = 0.1
    """Share of the trees (prompts) kept out of training to measure accuracy, in [0, 1)."""
    max_grad_norm: float = 1.0
    """Gradient clipping norm (> 0)."""
    seed: int = 0
    """Seeds the held-out split, the pair order and the head's initialisation."""
    threads: int = 1
    """torch CPU threads while training (restored afterwards)."""
    progress: bool = True
    """Show a tqdm progress bar."""

    def __post_init__(self) -> None:
        for name in ("pairs_per_prompt", "epochs", "batch_size", "threads"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"RewardModelConfig.{name} must be an integer >= 1; got {getattr(self, name)!r}")
        for name in ("lr", "max_grad_norm"):
            if not getattr(self, name) > 0:
                raise ValueError(f"RewardModelConfig.{name} must be > 0; got {getattr(self, name)!r}")
        if not 0 <= self.heldout_fraction < 1:
            raise ValueError(f"RewardModelConfig.heldout_fraction must be in [0, 1); got {self.heldout_fraction!r}")


@dataclass
class RewardModelResult:
    folder: Path
    """The saved reward model (loads with `planner.prm_scorers.load_scorer`)."""
    history: list[dict] = field(default_factory=list)
    """Per epoch: training loss and accuracy (means over steps), held-out loss and accuracy."""
    train_pairs: int = 0
    heldout_pairs: int = 0


def pair_rewards(model, batch: PairBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """(chosen (B,), rejected (B,)) rewards: the sequence-classification logit of each row."""
    device = next(model.parameters()).device
    logits = model(input_ids=batch.input_ids.to(device), attention_mask=batch.attention_mask.to(device)).logits
    return logits.float()[:, 0].chunk(2)  # (2B,) -> (B,), (B,)


def _from_policy(policy_folder: str | os.PathLike):
    from transformers import AutoConfig, AutoModelForSequenceClassification

    config = AutoConfig.from_pretrained(policy_folder, num_labels=1)
    with _quiet("transformers.modeling_utils"):  # its load report lists the new head, which is the point
        model = AutoModelForSequenceClassification.from_pretrained(policy_folder, config=config, dtype=torch.float32)
    with torch.no_grad():  # the untrained model ranks every response the same
        model.score.weight.zero_()
    return model


def _evaluate(model, pairs, pad_id: int, batch_size: int) -> dict:
    model.eval()
    chosen, rejected = [], []
    with torch.no_grad():
        for start in range(0, len(pairs), batch_size):
            c, r = pair_rewards(model, pair_batch(pairs[start:start + batch_size], pad_id))
            chosen.append(c)
            rejected.append(r)
    _, metrics = bradley_terry_loss(torch.cat(chosen), torch.cat(rejected))
    model.train()
    return {"heldout_" + k: v for k, v in metrics.items()}


def train_reward_model(policy_folder: str | os.PathLike, trees: Sequence[SearchTree], config: RewardModelConfig,
                       output_dir: str | os.PathLike) -> RewardModelResult:
    """Train an outcome reward model from the rewarded `trees` (e.g. `TreeStore(path).load()`'s trees)
    on a copy of the policy in `policy_folder`; save it to `output_dir` as a scorer folder."""
    from transformers import AutoTokenizer

    if not (Path(policy_folder) / "config.json").is_file():
        raise FileNotFoundError(f"no model folder at {str(policy_folder)!r} (expected a config.json there)")
    rng = np.random.default_rng(config.seed)
    heldout = set(rng.permutation(len(trees))[:int(round(config.heldout_fraction * len(trees)))].tolist())
    pair_config = PairConfig(step_pairs=False, response_pairs=config.pairs_per_prompt, response_pairing="all")
    pairs = preference_pairs(trees, pair_config)
    train = [p for p in pairs if p.group not in heldout]
    test = [p for p in pairs if p.group in heldout]
    if not train:
        raise ValueError(f"all {len(pairs)} pairs fall in the held-out trees: lower heldout_fraction "
                         f"(now {config.heldout_fraction}) or pass more trees")
    tokenizer = AutoTokenizer.from_pretrained(policy_folder)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    history = []
    with torch_settings(config.threads, seed=config.seed):
        model = _from_policy(policy_folder)
        model.config.pad_token_id = pad_id  # the head reads the last token that is not padding
        optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr)
        model.train()
        steps = config.epochs * -(-len(train) // config.batch_size)
        bar = tqdm(total=steps, desc="reward model", disable=not config.progress, leave=False)
        for epoch in range(config.epochs):
            order = rng.permutation(len(train))
            sums = {}
            for start in range(0, len(order), config.batch_size):
                batch = pair_batch([train[i] for i in order[start:start + config.batch_size]], pad_id)
                loss, metrics = bradley_terry_loss(*pair_rewards(model, batch))
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
                optimizer.step()
                for k, v in metrics.items():
                    sums.setdefault(k, []).append(v)
                bar.update(1)
                bar.set_postfix(loss=f"{metrics['bt_loss']:.3f}")
            row = {"epoch": epoch, **{k: float(np.mean(v)) for k, v in sums.items()}}
            if test:
                row.update(_evaluate(model, test, pad_id, config.batch_size))
            history.append(row)
        bar.close()
    model.eval()
    folder = Path(output_dir)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    (folder / SCORER_FILE).write_text(json.dumps({"format": SequenceRewardScorer.format, "input": "ids",
                                                  "aggregation": "last"}, indent=1) + "\n")
    (folder / "reward_model_history.json").write_text(json.dumps({"config": asdict(config), "history": history,
                                                                  "train_pairs": len(train),
                                                                  "heldout_pairs": len(test)}, indent=1) + "\n")
    return RewardModelResult(folder, history, len(train), len(test))
