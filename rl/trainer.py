"""The closed search-train loop: search with the current policy and critic, learn from the trees.

Per iteration (DESIGN.md, "Trainer loop"):
  draw prompts -> grow one tree per prompt with the serving engine (and the critic as scorer)
  -> reward every leaf with the task's verifier -> rows from the trees (rl/batch.py)
  -> the learner's update (rl/learner.py: old, reference and critic values once, advantages from
  rl/estimators.py, K epochs of minibatch updates of the policy and the critic)
  -> push the new weights into the engine (`Policy.load_weights`) -> log -> checkpoint.

Every random choice of iteration i is drawn from seeds derived from (seed, i), and torch's global
RNG is seeded per iteration inside the trainer's scope (`rl.runtime.torch_settings`), so a run
resumed from a checkpoint continues exactly as an uninterrupted one, and the caller's torch settings
(threads, determinism, RNG) are as it left them.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Sequence

import numpy as np
import torch

from planner.policy import SamplingParams, load_policy
from planner.scorers import VerifierOracleScorer
from planner.scheduler import run_interleaved
from planner.strategies import STRATEGIES, MCTSConfig
from planner.strategies.common import complete
from planner.tree import ROOT
from rl import checkpoint
from rl.advantages import nonzero_variance_groups
from rl.batch import RolloutBatch, batch_from_trees, reward_leaves
from rl.config import TrainConfig
from rl.learner import Learner, derived_seed
from rl.metrics import MetricsLogger
from rl.runtime import torch_settings

__all__ = ["SearchTrainer"]


def _search(view, *, strategy, prompt_ids, scorer, settings, seed):
    scorer = scorer.for_search(view) if scorer is not None else None  # its own compute record
    return STRATEGIES[strategy](prompt_ids, view, scorer, None, settings, seed)


def _complete_leaves(view, *, tree, params, seed):
    unfinished = [leaf for leaf in tree.leaves() if leaf != ROOT and not tree[leaf].terminal]
    return complete(tree, unfinished, view, params, seed) if unfinished else []


class SearchTrainer:
    """Trains a policy and its value critic from the trees a search strategy grows.

    reward_fn(text, problem) -> float in [0, 1] grades a response (the task's verifier); extract(text)
    gives a response's answer for the strategies' votes (None: the strategy's default).
    """

    def __init__(self, config: TrainConfig, problems: Sequence, reward_fn, extract=None, resume: bool = False) -> None:
        if not problems:
            raise ValueError("SearchTrainer needs at least one problem to train on")
        self.config, self.problems, self.reward_fn, self.extract = config, list(problems), reward_fn, extract
        self.iteration = 0
        with self._scope():
            self.learner = Learner(config)
            engine_options = {"threads": config.threads}
            if config.backend == "hf":
                engine_options["device"] = str(self.learner.device)
            elif self.learner.device.type == "cuda":
                engine_options["kv_cache_fraction"] = config.engine_memory_fraction
            self.engine = load_policy(config.model, backend=config.backend, dtype=config.engine_dtype,
                                      seed=config.seed, **engine_options)
        self.tokenizer = self.engine.tokenizer
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        if resume and checkpoint.exists(config.output_dir):
            self.iteration = checkpoint.load(config.output_dir, self.learner)
            self.engine.load_weights(self.learner.weights())
        self.logger = MetricsLogger(config.output_dir, resume_from=self.iteration if resume else None)

    def _scope(self, *seed_parts: int):
        """Torch's threads, determinism and (per iteration) RNG while the trainer works; restored after."""
        seed = derived_seed(self.config.seed, *seed_parts) if seed_parts else self.config.seed
        return torch_settings(self.config.threads, self.config.deterministic, seed)

    # ---- search -----------------------------------------------------------------------------------
    def _settings(self, problem):
        """The strategy's config for one problem: the task's answer extraction, and for MCTS the
        verifier as the value of finished responses (allowed in training)."""
        changes = {"extract": self.extract} if self.extract is not None else {}
        if isinstance(self.config.search, MCTSConfig):
            changes["terminal_reward"] = lambda text: self.reward_fn(text, problem)
        return dataclasses.replace(self.config.search, **changes)

    def _scorer(self, problem):
        """The trained critic once it has learned something (the closed loop); before that the verifier
        (allowed in training) so the first trees are not guided by an untrained head."""
        if self.config.strategy == "best_of_n":
            return None
        if self.learner.critic is not None and self.config.critic.use_as_scorer and self.iteration > 0:
            return self.learner.critic
        return VerifierOracleScorer(problem.reference, self.engine.decode, extract=lambda text: text,
                                    verify=lambda reference, text: self.reward_fn(text, problem) > 0.5)

    def prompt_ids(self, problem) -> list[int]:
        """The prompt of a problem as the engine sees it and the learner trains on: the chat template
        (`config.chat`), the system message and the assistant prefill."""
        c = self.config
        return self.engine.encode_prompt(problem.question, chat=c.chat, system=c.system_prompt,
                                         prefill=c.assistant_prefill)

    def grow_trees(self, problems: Sequence, seed: int):
        """One search tree per problem, every leaf rewarded; returns (trees, search results).

        The searches advance together and their generate calls are merged into one engine call per
        round (`run_interleaved`), so the engine sees P problems' worth of prompts at once. Every
        root-to-leaf path must end in a response the verifier can grade: a leaf the search left
        unfinished (beam, DVTS and MCTS stop at their limits) is completed with one sample of at most
        the strategy's whole-response length.
        """
        jobs = [functools.partial(_search, strategy=self.config.strategy,
                                  prompt_ids=self.prompt_ids(problem), scorer=self._scorer(problem),
                                  settings=self._settings(problem), seed=derived_seed(seed, k))
                for k, problem in enumerate(problems)]
        results = run_interleaved(jobs, self.engine)
        params = SamplingParams(temperature=self.config.search.temperature, max_tokens=self.config.response_tokens)
        run_interleaved([functools.partial(_complete_leaves, tree=r.tree, params=params, seed=derived_seed(seed, k, 2))
                         for k, r in enumerate(results)], self.engine)
        for result, problem in zip(results, problems):
            reward_leaves(result.tree, self.reward_fn, problem)
        return [r.tree for r in results], results

    def greedy_rewards(self, problems: Sequence) -> torch.Tensor:
        """(P,) the reward of one greedy response per problem: ReMax's baseline."""
        prompts = [self.prompt_ids(p) for p in problems]
        greedy = self.engine.generate(prompts, SamplingParams(temperature=0, max_tokens=self.config.response_tokens))
        return torch.tensor([float(self.reward_fn(g[0].text, p)) for g, p in zip(greedy, problems)])

    def _drop_flat_groups(self, batch: RolloutBatch) -> RolloutBatch:
        flat = {int(g) for g in batch.group.unique()
                if not bool(nonzero_variance_groups(batch.rewards[batch.group == g][None])[0])}
        keep = [i for i, g in enumerate(batch.group.tolist()) if g not in flat]
        return batch.select(keep) if keep else batch

    # ---- the loop ---------------------------------------------------------------------------------
    def problems_for(self, iteration: int) -> list:
        rng = np.random.default_rng(derived_seed(self.config.seed, iteration, 7))
        index = rng.choice(len(self.problems), size=self.config.prompts_per_iteration,
                           replace=len(self.problems) < self.config.prompts_per_iteration)
        return [self.problems[i] for i in index]

    def step(self) -> dict:
        """One search-train iteration; returns its metrics."""
        with self._scope(self.iteration, 3):
            return self._iteration()

    def _iteration(self) -> dict:
        c, i = self.config, self.iteration
        start = time.perf_counter()
        problems = self.problems_for(i)
        engine_before = self.engine.stats.copy()
        trees, results = self.grow_trees(problems, derived_seed(c.seed, i, 1))
        greedy = self.greedy_rewards(problems) if c.estimator == "remax" else None
        search_seconds = time.perf_counter() - start
        batch = batch_from_trees(trees, self.pad_id)
        zero_var = [float(not nonzero_variance_groups(batch.rewards[batch.group == g][None])[0])
                    for g in batch.group.unique()]
        if c.drop_zero_variance_groups:
            batch = self._drop_flat_groups(batch)
        learn_start = time.perf_counter()
        metrics = self.learner.update(batch, i, greedy)
        push_start = time.perf_counter()
        self.engine.load_weights(self.learner.weights())
        push_end = time.perf_counter()
        spent = self.engine.stats - engine_before
        metrics.update({
            "iteration": i, "reward_mean": float(batch.rewards.mean()),
            "pass_rate": float(np.mean([self.reward_fn(r.text, p) > 0.5 for r, p in zip(results, problems)])),
            "trajectories": len(batch), "tree_nodes": float(np.mean([len(t) for t in trees])),
            "response_length": float(batch.response_mask.sum(-1).mean()),
            "zero_variance_groups": float(np.mean(zero_var)), "generated_tokens": spent.generated_tokens,
            "cached_prompt_tokens": spent.cached_prompt_tokens, "search_seconds": search_seconds,
            "learner_seconds": push_start - learn_start, "push_seconds": push_end - push_start,
            "seconds": time.perf_counter() - start})
        self.iteration += 1
        self.logger.log(metrics)
        if self.iteration % c.checkpoint_every == 0 or self.iteration == c.iterations:
            checkpoint.save(c.output_dir, self.learner, self.tokenizer, self.iteration)
        return metrics

    def run(self, progress: bool = True) -> list[dict]:
        from tqdm import tqdm

        history = []
        bar = tqdm(total=self.config.iterations, initial=self.iteration, desc="search-train", disable=not progress)
        while self.iteration < self.config.iterations:
            metrics = self.step()
            history.append(metrics)
            bar.set_postfix(reward=f"{metrics['reward_mean']:.2f}", passed=f"{metrics['pass_rate']:.2f}")
            bar.update(1)
        bar.close()
        self.logger.close()
        return history
