"""The closed search-train loop: search with the current policy and critic, learn from the trees.

Per iteration (DESIGN.md, "Trainer loop"):
  draw prompts -> grow one tree per prompt with the serving engine (and the critic as scorer)
  -> reward every leaf with the task's verifier -> rows from the trees (rl/batch.py)
  -> old, reference and critic values, once -> advantages (rl/estimators.py) -> K epochs of
  minibatch updates of the policy (clipped surrogate) and the critic (clipped value loss)
  -> push the new weights into the engine (`Policy.load_weights`) -> log -> checkpoint.

Every random choice of iteration i is drawn from seeds derived from (seed, i), and torch's global
RNG is seeded per iteration inside the trainer's scope (`rl.runtime.torch_settings`), so a run
resumed from a checkpoint continues exactly as an uninterrupted one, and the caller's torch settings
(threads, determinism, RNG) are as it left them.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Iterator, Sequence

import numpy as np
import torch

from planner.policy import SamplingParams, load_policy
from planner.scorers import VerifierOracleScorer
from planner.solve import run_interleaved
from planner.strategies import STRATEGIES, MCTSConfig
from planner.strategies.common import complete
from planner.tree import ROOT
from rl import checkpoint
from rl.advantages import nonzero_variance_groups
from rl.batch import RolloutBatch, batch_from_trees, reward_leaves
from rl.config import TrainConfig
from rl.critic import ValueCritic
from rl.estimators import ADVANTAGE_ESTIMATORS, AdvantageInputs
from rl.kl import AdaptiveKLController, FixedKLController, kl
from rl.losses import entropy_from_logits, is_finite_loss, masked_mean, policy_loss, sequence_logprobs, value_loss
from rl.metrics import MetricsLogger
from rl.runtime import torch_settings

__all__ = ["SearchTrainer", "token_logprobs", "derived_seed"]
log = logging.getLogger(__name__)
SYNC_TOLERANCE = 1e-3


def derived_seed(*parts: int) -> int:
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1)[0] % (2**31 - 1))


def token_logprobs(model, batch: RolloutBatch, entropy: str = "none"):
    """(B, L) log-probability of token t given tokens < t (0 at t = 0), and the entropy (B, L) when
    `entropy` is "grad" (an entropy bonus needs its gradient) or "log" (a diagnostic, no gradient)."""
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits.float()  # (B, L, V)
    logp = sequence_logprobs(logits[:, :-1], batch.input_ids[:, 1:])  # (B, L-1)
    logp = torch.nn.functional.pad(logp, (1, 0))  # (B, L): aligned with the token it scores
    if entropy == "none":
        return logp, None
    with torch.set_grad_enabled(entropy == "grad" and torch.is_grad_enabled()):
        source = logits if entropy == "grad" else logits.detach()
        values = torch.nn.functional.pad(entropy_from_logits(source[:, :-1]), (1, 0))  # (B, L)
    return logp, values


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
        from transformers import AutoModelForCausalLM

        if not problems:
            raise ValueError("SearchTrainer needs at least one problem to train on")
        self.config, self.problems, self.reward_fn, self.extract = config, list(problems), reward_fn, extract
        self.estimator = ADVANTAGE_ESTIMATORS[config.estimator]
        self.iteration = 0
        with self._scope():
            self.engine = load_policy(config.model, backend=config.backend, seed=config.seed, threads=config.threads)
            self.tokenizer = self.engine.tokenizer
            self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
            self.learner = AutoModelForCausalLM.from_pretrained(config.model, dtype=torch.float32)
            self.learner.train()
            self.reference = None
            if config.uses_reference:
                self.reference = AutoModelForCausalLM.from_pretrained(config.model, dtype=torch.float32).eval()
                self.reference.requires_grad_(False)
            self.optimizer = torch.optim.AdamW(self.learner.parameters(), lr=config.lr)
            self.critic = self.critic_optimizer = None
            if config.critic.enabled:
                self.critic = ValueCritic.from_policy(config.model)
                self.critic_optimizer = torch.optim.AdamW(self.critic.model.parameters(), lr=config.critic.lr)
        beta = config.loss.kl_coef if config.kl_placement == "loss" else config.kl_reward_coef
        self.kl_controller = (AdaptiveKLController(beta, config.kl_target, horizon=10_000)
                              if config.kl_target is not None else FixedKLController(beta))
        if resume and checkpoint.exists(config.output_dir):
            self.iteration = checkpoint.load(config.output_dir, self)
            self.engine.load_weights(self.learner.state_dict())
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
        if self.critic is not None and self.config.critic.use_as_scorer and self.iteration > 0:
            return self.critic
        return VerifierOracleScorer(problem.reference, self.engine.decode, extract=lambda text: text,
                                    verify=lambda reference, text: self.reward_fn(text, problem) > 0.5)

    def grow_trees(self, problems: Sequence, seed: int):
        """One search tree per problem, every leaf rewarded; returns (trees, search results).

        The searches advance together and their generate calls are merged into one engine call per
        round (`run_interleaved`), so the engine sees P problems' worth of prompts at once. Every
        root-to-leaf path must end in a response the verifier can grade: a leaf the search left
        unfinished (beam, DVTS and MCTS stop at their limits) is completed with one sample of at most
        the strategy's whole-response length.
        """
        jobs = [functools.partial(_search, strategy=self.config.strategy,
                                  prompt_ids=self.engine.encode_prompt(problem.question), scorer=self._scorer(problem),
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
        prompts = [self.engine.encode_prompt(p.question) for p in problems]
        greedy = self.engine.generate(prompts, SamplingParams(temperature=0, max_tokens=self.config.response_tokens))
        return torch.tensor([float(self.reward_fn(g[0].text, p)) for g, p in zip(greedy, problems)])

    # ---- learning ---------------------------------------------------------------------------------
    def _old_logprobs(self, batch: RolloutBatch) -> torch.Tensor | None:
        """(B, L) behaviour log-probabilities for the importance ratio, computed once before the updates:
        the engine's, or the learner's own. None means on-policy: with one epoch of one minibatch the
        update's own forward is the behaviour policy, so the ratio is 1 by definition (as TRL does)."""
        c = self.config
        if c.old_logprobs == "engine":
            return batch.old_logprobs
        kl_in_reward = c.kl_placement == "reward" and self.reference is not None
        if c.epochs == 1 and c.minibatches == 1 and not kl_in_reward:
            return None
        return token_logprobs(self.learner, batch)[0]

    def _minibatches(self, batch: RolloutBatch, iteration: int, epoch: int) -> Iterator[list[int]]:
        """Row indices of each minibatch: whole groups (trees), shuffled per (iteration, epoch)."""
        groups = batch.group.unique().tolist()
        order = np.random.default_rng(derived_seed(self.config.seed, iteration, epoch)).permutation(len(groups))
        for chunk in np.array_split(order, self.config.minibatches):
            chosen = {groups[j] for j in chunk}
            rows = [i for i, g in enumerate(batch.group.tolist()) if g in chosen]
            if rows:
                yield rows

    def train_on(self, batch: RolloutBatch, iteration: int, greedy_rewards: torch.Tensor | None = None) -> dict:
        """K epochs of minibatch updates of policy and critic on one iteration's rows."""
        c = self.config
        mask = batch.response_mask
        with torch.no_grad():
            old_logp = self._old_logprobs(batch)  # (B, L) or None (on-policy)
            behaviour = old_logp if old_logp is not None else batch.old_logprobs  # for the reward's KL only
            ref_logp = token_logprobs(self.reference, batch)[0] if self.reference is not None else None
            old_values = (self.critic.token_values(batch.input_ids, batch.attention_mask)
                          if self.critic is not None else torch.zeros_like(mask))  # (B, L)
        kl_in_reward = c.kl_placement == "reward" and ref_logp is not None
        out = self.estimator(AdvantageInputs(
            rewards=batch.rewards, group=batch.group, mask=mask,
            kl=kl(behaviour, ref_logp, kind=c.loss.kl_kind) * mask if kl_in_reward else torch.zeros_like(mask),
            kl_coef=self.kl_controller.value if kl_in_reward else 0.0, values=old_values,
            node_values=batch.token_values, parent_values=batch.parent_values, greedy_rewards=greedy_rewards,
            gamma=c.gamma, lam=c.lam))
        targets = out.value_targets if out.value_targets is not None else batch.token_values
        target_mask = out.value_mask if out.value_mask is not None else mask
        metrics: dict[str, float] = {}
        if self.critic is not None:  # error on this iteration's fresh (held-out) tree nodes, before training
            metrics["critic_heldout_mse"] = float(masked_mean((old_values.clamp(0, 1) - batch.token_values) ** 2, mask))
        loss_config = dataclasses.replace(c.loss, kl_coef=self.kl_controller.value if c.kl_placement == "loss" else 0.0)
        entropy_mode = "grad" if loss_config.entropy_coef != 0 else "log"
        sums: dict[str, list[float]] = {}
        for epoch in range(c.epochs):
            for rows in self._minibatches(batch, iteration, epoch):
                idx, mb = torch.tensor(rows), batch.select(rows)
                logp, entropy = token_logprobs(self.learner, mb, entropy=entropy_mode)
                if "engine_learner_logprob_gap" not in metrics:  # the learner before its first update
                    metrics["engine_learner_logprob_gap"] = self._sync_gap(logp.detach(), mb)
                loss, m = policy_loss(logp, old_logp[idx] if old_logp is not None else logp.detach(), out.advantages[idx],
                                      mb.response_mask, loss_config, entropy=entropy,
                                      ref_logp=ref_logp[idx] if ref_logp is not None and loss_config.kl_coef > 0 else None)
                self._update(self.learner, self.optimizer, loss, "policy", m)
                if self.critic is not None:
                    self.critic.model.train()
                    values = self.critic.token_values(mb.input_ids, mb.attention_mask)
                    v_loss, vm = value_loss(values, old_values[idx], targets[idx], target_mask[idx],
                                            clip_range=c.critic.clip_range)
                    self._update(self.critic.model, self.critic_optimizer, v_loss, "critic", vm)
                    self.critic.model.eval()
                    m.update(vm)
                for k, v in m.items():
                    sums.setdefault(k, []).append(float(v))
        metrics.update({k: float(np.mean(v)) for k, v in sums.items()})
        if ref_logp is not None:
            metrics["kl_to_reference"] = float(masked_mean(kl(behaviour, ref_logp, kind="k3"), mask))
            self.kl_controller.update(metrics["kl_to_reference"], len(batch))
        metrics["kl_coef"] = float(self.kl_controller.value)
        return metrics

    def _sync_gap(self, learner_logp: torch.Tensor, batch: RolloutBatch) -> float:
        """The engine sampled with the weights the learner holds before its first update: their
        log-probabilities of the sampled tokens must agree (float32, 1e-3). Logged every iteration;
        raised in debug mode."""
        gap = float(((learner_logp - batch.old_logprobs).abs() * batch.response_mask).max())
        if self.config.debug and gap > SYNC_TOLERANCE:
            raise RuntimeError(f"engine and learner disagree on sampled-token log-probabilities by {gap:.2e} "
                               f"(> {SYNC_TOLERANCE}): weights are out of sync")
        return gap

    def _update(self, model, optimizer, loss, what: str, metrics: dict) -> None:
        """One optimizer step on `loss`, skipped (with a warning) when the loss or its gradient is not finite."""
        optimizer.zero_grad()
        metrics[f"{what}_skipped"] = 1.0
        if not is_finite_loss(loss):
            log.warning("iteration %d: %s loss is %s; update skipped", self.iteration, what, loss.detach().item())
            return
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), self.config.max_grad_norm)
        if not torch.isfinite(norm):  # the total norm is NaN/inf whenever any gradient entry is
            log.warning("iteration %d: %s gradient is not finite; update skipped", self.iteration, what)
            optimizer.zero_grad()
            return
        optimizer.step()
        metrics[f"{what}_skipped"] = 0.0

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
        metrics = self.train_on(batch, i, greedy)
        self.engine.load_weights(self.learner.state_dict())
        spent = self.engine.stats - engine_before
        metrics.update({
            "iteration": i, "reward_mean": float(batch.rewards.mean()),
            "pass_rate": float(np.mean([self.reward_fn(r.text, p) > 0.5 for r, p in zip(results, problems)])),
            "trajectories": len(batch), "tree_nodes": float(np.mean([len(t) for t in trees])),
            "response_length": float(batch.response_mask.sum(-1).mean()),
            "zero_variance_groups": float(np.mean(zero_var)), "generated_tokens": spent.generated_tokens,
            "cached_prompt_tokens": spent.cached_prompt_tokens, "search_seconds": search_seconds,
            "seconds": time.perf_counter() - start})
        self.iteration += 1
        self.logger.log(metrics)
        if self.iteration % c.checkpoint_every == 0 or self.iteration == c.iterations:
            checkpoint.save(c.output_dir, self)
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
