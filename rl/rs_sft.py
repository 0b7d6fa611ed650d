"""Rejection-sampling SFT from search trees (ReST, Gulcehre et al. 2023; RAFT, Dong et al. 2023; ReST-EM,
Singh et al. 2023; the third stage of DeepSeek-R1's pipeline).

Each round: grow trees with the current policy (`rl.rounds.RoundTrainer`), keep per prompt the verified
best leaves (reward >= `min_reward`; distinct responses; the highest rewards first, ties in a seeded
random order; at most `max_per_prompt`), then one round of SFT on them with `rl.sft.train_sft` (loss on
the response tokens, the sampled token ids trained on as they are), then push the weights and repeat.
The data kept per round (responses, prompts with at least one, their share) is logged every round.

Departures: ReST-EM restarts every round's SFT from the base model; here it continues from the current
policy (RAFT's and ReST's "Improve" step), with a fresh optimizer each round, as `train_sft` makes one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from planner.tree import ROOT, SearchTree
from rl.rounds import RoundTrainer
from rl.sft import SFTConfig, train_sft

__all__ = ["RSSFTConfig", "select_best_leaves", "RejectionSamplingSFT"]


@dataclass
class RSSFTConfig:
    """Rejection-sampling SFT: which leaves are kept, and the SFT round on them (rl/rs_sft.py)."""

    min_reward: float = 1.0
    """A leaf is kept only with a verifier reward at least this (1.0: verified correct)."""
    max_per_prompt: int = 4
    """Most distinct responses kept per prompt (>= 1): the cap that keeps easy prompts from dominating."""
    lr: float = 1e-4
    """AdamW learning rate of each round's SFT (> 0); constant, no warm-up."""
    epochs: int = 1
    """Passes over a round's kept responses (>= 1)."""
    batch_size: int = 32
    """Responses per optimizer step (>= 1)."""

    def __post_init__(self) -> None:
        for name in ("max_per_prompt", "epochs", "batch_size"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"RSSFTConfig.{name} must be an integer >= 1; got {getattr(self, name)!r}")
        if not self.lr > 0:
            raise ValueError(f"RSSFTConfig.lr must be > 0; got {self.lr!r}")

    def sft_config(self, examples: int, seed: int) -> SFTConfig:
        """`train_sft`'s settings for one round over `examples` responses."""
        steps = max(1, math.ceil(self.epochs * examples / self.batch_size))
        return SFTConfig(lr=self.lr, batch_size=min(self.batch_size, examples), max_steps=steps, warmup_steps=0,
                         schedule="constant", seed=seed, progress=False)


def select_best_leaves(tree: SearchTree, config: RSSFTConfig, seed: int) -> list[int]:
    """The leaves of `tree` kept for SFT: reward >= min_reward, one per distinct response, the highest
    rewards first (ties in an order shuffled by `seed`), at most `max_per_prompt`."""
    distinct: dict[tuple[int, ...], int] = {}
    for leaf in tree.leaves():
        reward = tree[leaf].reward
        if leaf != ROOT and reward is not None and reward >= config.min_reward:
            distinct.setdefault(tuple(tree.response_ids(leaf)), leaf)
    leaves = list(distinct.values())
    tie_break = np.random.default_rng(seed).permutation(len(leaves))
    ranked = sorted(range(len(leaves)), key=lambda k: (-tree[leaves[k]].reward, tie_break[k]))
    return [leaves[k] for k in ranked[:config.max_per_prompt]]


def kept_data(trees: Sequence[SearchTree], config: RSSFTConfig, seed: int) -> tuple[list[dict], dict]:
    """The SFT examples (sampled token ids) of every tree's kept leaves, and the round's data metrics."""
    examples, per_prompt = [], []
    for k, tree in enumerate(trees):
        kept = select_best_leaves(tree, config, seed + k)
        per_prompt.append(len(kept))
        examples += [{"prompt_ids": list(tree.prompt_ids), "response_ids": tree.response_ids(leaf)} for leaf in kept]
    metrics = {"kept_responses": len(examples), "prompts_with_kept": sum(n > 0 for n in per_prompt),
               "kept_prompt_share": float(np.mean([n > 0 for n in per_prompt])) if trees else 0.0,
               "kept_tokens": sum(len(e["response_ids"]) for e in examples)}
    return examples, metrics


class RejectionSamplingSFT(RoundTrainer):
    """Rounds of: grow trees, keep the verified best leaves per prompt, SFT on them."""

    def __init__(self, config, rs: RSSFTConfig, problems: Sequence, reward_fn, extract=None, engine=None) -> None:
        super().__init__(config, problems, reward_fn, extract, engine)
        self.rs = rs

    def learn(self, trees: list[SearchTree], problems: list, iteration: int) -> dict:
        examples, metrics = kept_data(trees, self.rs, seed=iteration * 1_000_003 + self.config.loop.seed)
        metrics["trained_tokens"] = 0
        if examples:
            sft = self.rs.sft_config(len(examples), seed=iteration)
            result = train_sft(self.policy, examples, sft, tokenizer=self.tokenizer)
            mean_length = np.mean([len(e["prompt_ids"]) + len(e["response_ids"]) for e in examples])
            metrics.update(sft_steps=result.steps, sft_loss=float(np.mean(result.losses)),
                           trained_tokens=int(mean_length * result.steps * sft.batch_size))
        return metrics
