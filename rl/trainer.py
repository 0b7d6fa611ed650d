"""The closed search-train loop: search with the current policy and critic, learn from the trees.

Per iteration:
  draw prompts -> grow one tree per prompt with the serving engine, valued by the loop's own verifier
  (rl/loop_verifier.py), a scorer folder or the critic -> reward every leaf with the task's verifier
  -> the loop verifier learns from the verified leaves -> rows from the trees (rl/batch.py)
  -> the learner's update (rl/learner.py: old, reference and critic values once, advantages from
  rl/estimators.py, K epochs of minibatch updates of the policy and the critic)
  -> push the new weights into the engine (`Policy.load_weights`) -> log -> checkpoint.

Every random choice of iteration i is drawn from seeds derived from (seed, i), and torch's global
RNG is seeded per iteration inside the trainer's scope (`rl.runtime.torch_settings`), so a run
resumed from a checkpoint (rl/checkpoint.py: the newest valid one) continues exactly as an
uninterrupted one, and the caller's torch settings (threads, determinism, RNG) are as it left them.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Sequence

import numpy as np
import torch
from tqdm import tqdm

from planner.policy import EnginePool, SamplingParams, load_policy
from planner.policy.local_models import NAMED_MODELS, resolve_model
from planner.policy.scoped import torch_threads
from planner.prm_scorers import load_scorer
from planner.scorers import VerifierOracleScorer
from planner.scheduler import run_interleaved, scorer_for_search
from planner.strategies import STRATEGIES, MCTSConfig
from planner.strategies.common import complete
from planner.tree import ROOT
from rl import checkpoint, distributed
from rl.advantages import nonzero_variance_groups
from rl.batch import RolloutBatch, batch_from_trees, reward_leaves
from rl.critic import check_same_vocabulary
from rl.config import TrainConfig
from rl.learner import Learner, derived_seed
from rl.loop_verifier import LoopVerifier
from rl.metrics import MetricsLogger
from rl.runtime import torch_settings
from rl.tree_store import TreeStore

__all__ = ["SearchTrainer", "LOOP_VALUE"]

LOOP_VALUE = "loop_value"
"""The loop verifier's folder inside each checkpoint (`<output_dir>/checkpoint/loop_value` is the newest's): a
folder `planner.load_scorer` loads, with its AdamW state and buffers for --resume."""

log = logging.getLogger(__name__)


def _warn_if_no_reward(metrics: dict, response_tokens: int) -> None:
    """One warning when every response of an iteration got reward 0: GRPO then has no signal, and the
    usual cause is the data or the settings, not the model."""
    if metrics["reward_mean"] != 0.0:
        return
    log.warning("iteration %d: all %d responses got reward 0, so its rewards cannot tell a better response "
                "from a worse one. Likely causes: "
                "the reference answers are not in the form the task's verifier reads (GSM8K wants \"#### 8\"; for "
                "your own file use the custom task, docs/data.md); responses cut off by the token limit before "
                "their final answer (limit %d tokens, mean response %.0f tokens: raise max_tokens, or max_step_tokens "
                "x max_steps); or the task's answer field holds something other than the answer (answer_field).",
                metrics["iteration"], metrics["trajectories"], response_tokens, metrics["response_length"])


def _search(view, *, strategy, prompt_ids, scorer, settings, seed, done):
    scorer = scorer_for_search(scorer, view) if scorer is not None else None  # its own compute record
    result = STRATEGIES[strategy](prompt_ids, view, scorer, None, settings, seed)
    done(1)
    return result


def _complete_leaves(view, *, tree, params, seed):
    unfinished = [leaf for leaf in tree.leaves() if leaf != ROOT and not tree[leaf].terminal]
    return complete(tree, unfinished, view, params, seed) if unfinished else []


class SearchTrainer:
    """Trains a policy and its value critic from the trees a search strategy grows.

    reward_fn(text, problem) -> float in [0, 1] grades a response (the task's verifier); extract(text)
    gives a response's answer for the strategies' votes (None: the strategy's default).
    """

    progress = False
    """Show the phases of each iteration as bars under the iteration's (set by `run(progress=...)`)."""

    def __init__(self, config: TrainConfig, problems: Sequence, reward_fn, extract=None, resume: bool = False,
                 engine=None) -> None:
        """engine: a running `Policy` that already holds config.model's weights, to use instead of starting one
        (several runs in one process share it: scripts/lab/comparison.py)."""
        if not problems:
            raise ValueError("SearchTrainer needs at least one problem to train on")
        if str(config.model) in NAMED_MODELS:  # a name such as "smollm2": the folder it converts to, once
            config = dataclasses.replace(config, model=str(resolve_model(config.model)))
        if resume:
            checkpoint.require(config.loop.output_dir)  # before any model loads
        distributed.init_from_environment()  # launched by torchrun: one learner rank per process
        self.world = distributed.world_size()
        prompts, minibatches = config.loop.prompts_per_iteration, config.learner.minibatches
        if prompts % (self.world * minibatches):
            raise ValueError(f"TrainConfig: loop.prompts_per_iteration={prompts} trees cannot be shared out evenly to "
                             f"{self.world} ranks x learner.minibatches={minibatches}: pick a multiple of "
                             f"{self.world * minibatches}, or launch another number of ranks")
        if self.world > 1 and config.algorithm.drop_zero_variance_groups:
            raise ValueError("TrainConfig.algorithm.drop_zero_variance_groups leaves ranks with unequal minibatches; "
                             "it is not supported with more than one learner rank: set it to false or run one process")
        self.config, self.problems, self.reward_fn, self.extract = config, list(problems), reward_fn, extract
        self.iteration = 0
        with self._scope():
            self.learner = Learner(config)
            self.shares_policy = engine is None and self._can_share_policy()
            if not distributed.is_main():
                self.engine = None  # rank 0 searches
            else:
                self.engine = engine if engine is not None else self._load_engine()
        self.search_scorer = (load_scorer(config.search.scorer, decode=self.engine.decode)
                              if config.search.scorer and self.engine is not None else None)
        if self.engine is not None:
            self.tokenizer = self.engine.tokenizer
        else:
            from transformers import AutoTokenizer
            self.tokenizer = AutoTokenizer.from_pretrained(config.model)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        if resume:  # the newest valid checkpoint, or CheckpointError: resuming never means starting over
            self.iteration = checkpoint.load(config.loop.output_dir, self.learner)
            self._push()
        self.loop_verifier = None
        if config.value.loop_verifier.model and distributed.is_main():
            check_same_vocabulary(config.model, config.value.loop_verifier.model, "the loop verifier",
                                  "TrainConfig.value.loop_verifier.model")
            saved = checkpoint.iteration_dir(config.loop.output_dir, self.iteration) / LOOP_VALUE if resume else None
            self.loop_verifier = LoopVerifier(config.value.loop_verifier, start=saved)
        self._saved = resume  # a run that did not resume replaces earlier runs' checkpoints at its first save
        self.tree_store = (TreeStore(config.loop.tree_store).start(self.iteration)
                           if config.loop.tree_store and distributed.is_main() else None)
        self.logger = (MetricsLogger(config.loop.output_dir, resume_from=self.iteration if resume else None)
                       if distributed.is_main() else None)

    def _can_share_policy(self) -> bool:
        """Whether the transformers engine can serve the learner's own module: one process, one engine, both
        in float32 on one device. Then the weights exist once and the update reaches the engine without a push."""
        engine = self.config.engine
        return (engine.share_weights and engine.backend == "hf" and engine.replicas == 1 and engine.dtype == "float32"
                and self.world == 1)

    def _load_engine(self):
        engine = self.config.engine
        options = {"threads": self.config.loop.threads}
        if engine.backend == "hf":
            options["device"] = str(self.learner.device)
            if self.shares_policy:
                options["model"] = self.learner.policy
        else:
            options["in_process"] = engine.in_process
            if self.learner.device.type == "cuda":  # shares the learner's GPU
                options.update(kv_cache_fraction=engine.memory_fraction, sleep_mode=engine.sleep)
        return load_policy(self.config.model, backend=engine.backend, dtype=engine.dtype, seed=self.config.loop.seed,
                           replicas=engine.replicas, **options)

    def _push(self) -> None:
        """The learner's weights into the engine (gathered on every rank, pushed by rank 0)."""
        if self.shares_policy:  # the engine serves the learner's module: it already holds the new weights
            return
        weights = self.learner.weights()
        if self.engine is not None:
            dtype = getattr(torch, self.config.engine.dtype)
            if dtype != torch.float32:  # in the engine's own precision: half the bytes to move, no cast per tensor
                weights = {name: t.to(dtype) if t.is_floating_point() else t for name, t in weights.items()}
            self.engine.wake_up()
            self.engine.load_weights(weights)

    def _scope(self, *seed_parts: int):
        """Torch's threads, determinism and (per iteration) RNG while the trainer works; restored after."""
        loop = self.config.loop
        seed = derived_seed(loop.seed, *seed_parts) if seed_parts else loop.seed
        return torch_settings(loop.threads, loop.deterministic, seed)

    # ---- search -----------------------------------------------------------------------------------
    def _settings(self, problem):
        """The strategy's config for one problem: the task's answer extraction, and for MCTS the
        verifier as the value of finished responses (allowed in training)."""
        changes = {"extract": self.extract} if self.extract is not None else {}
        if isinstance(self.config.search.chosen, MCTSConfig):
            changes["terminal_reward"] = lambda text: self.reward_fn(text, problem)
        return dataclasses.replace(self.config.search.chosen, **changes)

    def _scorer(self, problem):
        """The scorer of `config.search.scorer` when given; else the trained critic once it has learned something
        (the closed loop), and before that the verifier (allowed in training) so the first trees are not
        guided by an untrained head."""
        if self.config.search.strategy == "best_of_n":
            return None
        if self.loop_verifier is not None:
            return self.loop_verifier.scorer()
        if self.search_scorer is not None:
            return self.search_scorer
        if self.learner.critic is not None and self.config.value.critic.use_as_scorer and self.iteration > 0:
            return self.learner.critic
        return VerifierOracleScorer(problem.reference, self.engine.decode, extract=lambda text: text,
                                    verify=lambda reference, text: self.reward_fn(text, problem) > 0.5)

    def prompt_ids(self, problem) -> list[int]:
        """The prompt of a problem as the engine sees it and the learner trains on: the chat template
        (`config.engine.chat`), the system message and the assistant prefill."""
        engine = self.config.engine
        return self.engine.encode_prompt(problem.question, chat=engine.chat, system=engine.system_prompt,
                                         prefill=engine.assistant_prefill)

    def grow_trees(self, problems: Sequence, seed: int):
        """One search tree per problem, every leaf rewarded; returns (trees, search results).

        The searches advance together and their generate calls are merged into one engine call per
        round (`run_interleaved`), so the engine sees P problems' worth of prompts at once. Every
        root-to-leaf path must end in a response the verifier can grade: a leaf the search left
        unfinished (beam, DVTS and MCTS stop at their limits) is completed with one sample of at most
        the strategy's whole-response length.
        """
        with self._phase_bar("search", len(problems), "tree") as bar:
            jobs = [functools.partial(_search, strategy=self.config.search.strategy,
                                      prompt_ids=self.prompt_ids(problem), scorer=self._scorer(problem),
                                      settings=self._settings(problem), seed=derived_seed(seed, k), done=bar.update)
                    for k, problem in enumerate(problems)]
            results = run_interleaved(jobs, self.engine)
        search = self.config.search
        params = SamplingParams(temperature=search.temperature, max_tokens=search.response_tokens)
        run_interleaved([functools.partial(_complete_leaves, tree=r.tree, params=params, seed=derived_seed(seed, k, 2))
                         for k, r in enumerate(results)], self.engine)
        for result, problem in zip(results, problems):
            reward_leaves(result.tree, self.reward_fn, problem)
        if self.tree_store is not None:  # tagged with the policy version that sampled them
            self.tree_store.append([r.tree for r in results], problems, self.iteration)
        return [r.tree for r in results], results

    def greedy_rewards(self, problems: Sequence) -> torch.Tensor:
        """(P,) the reward of one greedy response per problem: ReMax's baseline."""
        prompts = [self.prompt_ids(p) for p in problems]
        params = SamplingParams(temperature=0, max_tokens=self.config.search.response_tokens)
        greedy = self.engine.generate(prompts, params)
        return torch.tensor([float(self.reward_fn(g[0].text, p)) for g, p in zip(greedy, problems)])

    @staticmethod
    def _flat_groups(batch: RolloutBatch) -> set[int]:
        """The groups (trees) whose leaves all got the same reward: their group-relative advantages are 0."""
        return {int(g) for g in batch.group.unique()
                if not bool(nonzero_variance_groups(batch.rewards[batch.group == g][None])[0])}

    # ---- the loop ---------------------------------------------------------------------------------
    def _phase_bar(self, phase: str, total: int, unit: str) -> tqdm:
        """A bar for one phase of an iteration, erased when the phase ends (leave=False) so that only the
        iteration's bar stays; disabled unless `progress`."""
        return tqdm(total=total, desc=f"  {phase}", unit=unit, leave=False,
                    disable=not self.progress or not distributed.is_main())

    def problems_for(self, iteration: int) -> list:
        rng = np.random.default_rng(derived_seed(self.config.loop.seed, iteration, 7))
        size = self.config.loop.prompts_per_iteration
        index = rng.choice(len(self.problems), size=size, replace=len(self.problems) < size)
        return [self.problems[i] for i in index]

    def step(self) -> dict:
        """One search-train iteration; returns its metrics."""
        with self._scope(self.iteration, 3):
            return self._iteration()

    def _search_phase(self, i: int) -> tuple[list, dict]:
        """Rank 0: grow and reward the iteration's trees; returns them with the search's own metrics."""
        c = self.config
        start = time.perf_counter()
        problems = self.problems_for(i)
        engine_before = self.engine.stats.copy()
        trees, results = self.grow_trees(problems, derived_seed(c.loop.seed, i, 1))
        greedy = self.greedy_rewards(problems) if c.algorithm.estimator == "remax" else None
        spent = self.engine.stats - engine_before
        return trees, {
            "greedy": greedy,
            "pass_rate": float(np.mean([self.reward_fn(r.text, p) > 0.5 for r, p in zip(results, problems)])),
            "tree_nodes": float(np.mean([len(t) for t in trees])), "generated_tokens": spent.generated_tokens,
            "cached_prompt_tokens": spent.cached_prompt_tokens, "search_seconds": time.perf_counter() - start,
            "scorer_flops": float(sum(r.compute.scorer_flops for r in results))}

    def _iteration(self) -> dict:
        c, i = self.config, self.iteration
        start = time.perf_counter()
        share = None
        if distributed.is_main():
            trees, searched = self._search_phase(i)
            per_rank = len(trees) // self.world  # each rank gets whole trees (and their greedy rewards)
            greedy = searched.pop("greedy")
            share = [(trees[r * per_rank:(r + 1) * per_rank],
                      greedy[r * per_rank:(r + 1) * per_rank] if greedy is not None else None) for r in range(self.world)]
        trees, greedy = distributed.scatter_objects(share)
        batch = batch_from_trees(trees, self.pad_id, pack_tokens=c.learner.pack_tokens)
        flat, groups = self._flat_groups(batch), len(batch.group.unique())
        rows = distributed.all_sum(len(batch))
        metrics = {"iteration": i, "reward_mean": float(distributed.all_sum(batch.rewards.sum()) / rows),
                   "trajectories": int(rows),
                   "response_length": float(distributed.all_sum(batch.response_mask.sum()) / rows),
                   "zero_variance_groups": float(distributed.all_sum(len(flat)) / distributed.all_sum(groups))}
        trained = batch
        if c.algorithm.drop_zero_variance_groups:  # DAPO's dynamic sampling (one rank only, see __init__)
            keep = [row for row, g in enumerate(batch.group.tolist()) if g not in flat]
            trained = batch.select(keep) if keep else None  # None: no group carries a signal
        sleep_seconds = time.perf_counter()
        if self.engine is not None:
            self.engine.sleep()  # frees the engine's GPU memory for the learner (a no-op without a shared GPU)
        sleep_seconds = time.perf_counter() - sleep_seconds
        learn_start = time.perf_counter()
        with torch_threads(c.learner.threads):  # the engine is idle now: the update may use its cores
            if trained is None:  # every group's rewards are equal: no signal, so no update and nothing to push
                metrics["policy_skipped"] = 1.0
            else:
                with self._phase_bar("learn", c.learner.epochs * c.learner.minibatches, "minibatch") as bar:
                    metrics.update(self.learner.update(trained, i, greedy, done=bar.update))
            if self.loop_verifier is not None:  # learns from this iteration's verified leaves; values the next search
                metrics.update(self.loop_verifier.observe(trees))
                metrics.update(self.loop_verifier.train(derived_seed(c.loop.seed, i, 5)))
        learner_seconds = time.perf_counter() - learn_start
        wake = time.perf_counter()
        if self.engine is not None:
            self.engine.wake_up()
        sleep_seconds += time.perf_counter() - wake
        push_start = time.perf_counter()
        if trained is not None:
            self._push()
        push_seconds = time.perf_counter() - push_start
        self.iteration += 1
        if distributed.is_main():
            metrics.update(searched)
            _warn_if_no_reward(metrics, c.search.response_tokens)
            metrics.update({"engine_sleep_seconds": sleep_seconds, "learner_seconds": learner_seconds,
                            "push_seconds": push_seconds, "seconds": time.perf_counter() - start})
            if isinstance(self.engine, EnginePool):  # how many replicas hold the weights just pushed
                metrics["replicas_current"] = sum(v == self.engine.weights_version
                                                  for v in self.engine.weights_versions())
            self.logger.log(metrics)
        if self.iteration % c.loop.checkpoint_every == 0 or self.iteration == c.loop.iterations:
            extras = {LOOP_VALUE: self.loop_verifier.save} if self.loop_verifier is not None else None
            checkpoint.save(c.loop.output_dir, self.learner, self.tokenizer, self.iteration,  # rank 0 writes
                            keep=c.loop.checkpoints_kept, discard_others=not self._saved, extras=extras)
            self._saved = True
        return metrics

    def run(self, progress: bool = True,
            on_iteration: Callable[[SearchTrainer, dict], None] | None = None) -> list[dict]:
        """Iterate to `config.loop.iterations`; returns each iteration's metrics (rank 0 logs them; every rank
        returns its own view, the learner's metrics averaged over ranks). progress: a bar of iterations
        (its postfix the last iteration's `passed` and `reward`: docs/metrics.md), and under it one of the
        current phase (searched trees, then learner minibatches). `on_iteration(trainer, metrics)` runs
        after every iteration, e.g. to grade the current policy or value on held-out problems."""
        history = []
        self.progress = progress
        bar = tqdm(total=self.config.loop.iterations, initial=self.iteration, desc="search-train",
                   disable=not progress or not distributed.is_main())
        while self.iteration < self.config.loop.iterations:
            metrics = self.step()
            history.append(metrics)
            if on_iteration is not None:
                on_iteration(self, metrics)
            bar.set_postfix(reward=f"{metrics['reward_mean']:.2f}", passed=f"{metrics.get('pass_rate', 0.0):.2f}")
            bar.update(1)
        bar.close()
        if self.logger is not None:
            self.logger.close()
        return history
