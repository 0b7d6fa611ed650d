"""Rounds of search then learning, for trainers other than GRPO/PPO: online DPO and rejection-sampling SFT.

Each round draws prompts, grows one tree per prompt with the current policy exactly as the GRPO/PPO
trainer does (`SearchTrainer.grow_trees`: the same strategy settings, the same merged engine calls, the
verifier's rewards on every leaf, the tree store when `TrainConfig.loop.tree_store` is set), hands the trees
to the subclass's `learn`, and pushes the new weights into the engine. The search, the prompt draws,
the seeds, the metrics files and the progress bar are the GRPO trainer's own (a subclass of
`SearchTrainer`), so the trainers differ only in what they learn from the same kind of trees.

The value critic is switched off: these trainers do not train it, and an untrained critic would
guide the search with a constant. Trees are valued as the GRPO trainer values them in its first
iteration: the verifier on finished responses (allowed in training). No resumable checkpoints: the
final policy is saved with `save_policy`.
"""

from __future__ import annotations

import dataclasses
import time
from abc import abstractmethod
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from planner.tree import SearchTree
from rl.config import CriticConfig, TrainConfig
from rl.learner import derived_seed
from rl.runtime import torch_settings
from rl.trainer import SearchTrainer

__all__ = ["RoundTrainer", "round_metrics"]


def round_metrics(trees: Sequence[SearchTree], results, problems, reward_fn) -> dict:
    """What every round logs about its trees: mean leaf reward, the searches' pass rate, tree size."""
    rewards = [t[leaf].reward for t in trees for leaf in t.leaves() if t[leaf].reward is not None]
    return {"reward_mean": float(np.mean(rewards)) if rewards else 0.0,
            "pass_rate": float(np.mean([reward_fn(r.text, p) > 0.5 for r, p in zip(results, problems)])),
            "tree_nodes": float(np.mean([len(t) for t in trees])), "leaves": len(rewards)}


class RoundTrainer(SearchTrainer):
    """A `SearchTrainer` whose learning step is `learn(trees, problems, iteration) -> metrics`."""

    def __init__(self, config: TrainConfig, problems: Sequence, reward_fn, extract=None, engine=None) -> None:
        value = dataclasses.replace(config.value, critic=CriticConfig(enabled=False))
        super().__init__(dataclasses.replace(config, value=value), problems, reward_fn,
                         extract, engine=engine)

    @property
    def policy(self):
        """The policy being trained (the learner's model; the engine gets its weights after every round)."""
        return self.learner.policy

    @abstractmethod
    def learn(self, trees: list[SearchTree], problems: list, iteration: int) -> dict:
        """Update `self.policy` from one round's rewarded trees; return metrics."""

    def step(self) -> dict:
        """One round: search, learn, push the weights, log."""
        c, i = self.config.loop, self.iteration
        with torch_settings(c.threads, c.deterministic, derived_seed(c.seed, i, 3)):
            start = time.perf_counter()
            problems = self.problems_for(i)
            engine_before = self.engine.stats.copy()
            trees, results = self.grow_trees(problems, derived_seed(c.seed, i, 1))
            search_seconds = time.perf_counter() - start
            metrics = self.learn(trees, problems, i)
            self.engine.load_weights(self.learner.weights())
            spent = self.engine.stats - engine_before
            metrics.update(iteration=i, **round_metrics(trees, results, problems, self.reward_fn),
                           generated_tokens=spent.generated_tokens, search_seconds=search_seconds,
                           seconds=time.perf_counter() - start)
        self.iteration += 1
        self.logger.log(metrics)
        return metrics

    def save_policy(self, folder: str | Path | None = None) -> Path:
        """The trained policy as a `save_pretrained` folder (default: <output_dir>/policy)."""
        folder = Path(folder or Path(self.config.loop.output_dir) / "policy")
        self.policy.save_pretrained(folder, safe_serialization=True)
        self.tokenizer.save_pretrained(folder)
        return folder
