"""The closed search-train loop: search with the current policy and critic, learn from the trees.

Per iteration (DESIGN.md, "Trainer loop"):
  draw prompts -> grow one tree per prompt with the serving engine (and the critic as scorer)
  -> reward every leaf with the task's verifier -> rows from the trees (rl/batch.py)
  -> learner and reference log-probabilities -> advantages -> K epochs of minibatch updates of the
  policy (clipped surrogate) and the critic (clipped value loss) -> push the new weights into the
  engine (`Policy.load_weights`) -> log -> checkpoint.

Every random choice of iteration i is drawn from seeds derived from (seed, i), so a run resumed
from a checkpoint continues exactly as an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Sequence

import numpy as np
import torch

from planner.policy import load_policy
from planner.scorers import VerifierOracleScorer
from planner.solve import run_interleaved
from planner.policy import SamplingParams
from planner.strategies import STRATEGIES, make_config
from planner.strategies.common import complete
from planner.tree import ROOT
from rl import checkpoint
from rl.advantages import (broadcast_to_tokens, compute_advantages, gae, nonzero_variance_groups,
                           tree_advantages_to_tokens, tree_step_advantages)
from rl.batch import RolloutBatch, batch_from_trees, reward_leaves
from rl.config import TrainConfig
from rl.critic import ValueCritic
from rl.kl import AdaptiveKLController, FixedKLController, kl, kl_penalized_rewards
from rl.losses import entropy_from_logits, is_finite_loss, masked_mean, masked_whiten, policy_loss, sequence_logprobs, value_loss
from rl.metrics import MetricsLogger

__all__ = ["SearchTrainer"]
log = logging.getLogger(__name__)
SYNC_TOLERANCE = 1e-3


def _search(strategy, prompt_ids, policy, *, scorer, config, seed):
    scorer = scorer.for_search(policy) if scorer is not None else None  # its own compute record
    return strategy(prompt_ids, policy, scorer, None, config, seed)


def _complete_leaves(tree, policy, *, params, seed):
    unfinished = [leaf for leaf in tree.leaves() if leaf != ROOT and not tree[leaf].terminal]
    return complete(tree, unfinished, policy, params, seed) if unfinished else []


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


class SearchTrainer:
    """Trains a policy and its value critic from the trees a search strategy grows."""

    def __init__(self, config: TrainConfig, problems: Sequence, reward_fn: Callable[[str, object], float],
                 extract: Callable[[str], str | None] | None = None, resume: bool = False) -> None:
        from transformers import AutoModelForCausalLM

        if not problems:
            raise ValueError("SearchTrainer needs at least one problem to train on")
        self.config, self.problems, self.reward_fn, self.extract = config, list(problems), reward_fn, extract
        torch.set_num_threads(config.threads)
        if config.deterministic:
            torch.use_deterministic_algorithms(True)
        torch.manual_seed(config.seed)
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
        self.iteration = 0
        if resume and checkpoint.exists(config.output_dir):
            self.iteration = checkpoint.load(config.output_dir, self)
            self.engine.load_weights(self.learner.state_dict())
        self.logger = MetricsLogger(config.output_dir, resume_from=self.iteration if resume else None)

    # ---- search -----------------------------------------------------------------------------------
    def _strategy_config(self, problem):
        c = self.config
        common = {"temperature": c.temperature, "extract": self.extract}
        if c.strategy in ("sample", "best_of_n"):
            return "best_of_n", make_config("best_of_n", n=c.samples_per_prompt, max_tokens=c.max_tokens, **common)
        steps = {"step_delimiter": c.step_delimiter, "max_step_tokens": c.step_max_tokens, "max_steps": c.max_steps}
        if c.strategy == "beam":
            width = max(w for w in (1, 2, 3, 4) if c.samples_per_prompt % w == 0)  # beams per parent
            return "beam", make_config("beam", num_beams=c.samples_per_prompt, beam_width=width, **steps, **common)
        return "mcts", make_config("mcts", num_simulations=c.samples_per_prompt, num_candidates=c.mcts_candidates,
                                   **steps, **common,
                                   terminal_reward=lambda text: self.reward_fn(text, problem))

    def _scorer(self, problem):
        """The trained critic once it has learned something (the closed loop); before that the verifier
        (allowed in training) so the first trees are not guided by an untrained head."""
        if self.critic is not None and self.config.critic.use_as_scorer and self.iteration > 0:
            return self.critic
        return VerifierOracleScorer(problem.reference, self.engine.decode, extract=lambda text: text,
                                    verify=lambda reference, text: self.reward_fn(text, problem) > 0.5)

    def grow_trees(self, problems: Sequence, seed: int):
        """One search tree per problem, every leaf rewarded; returns (trees, search results).

        The searches advance together and their generate calls are merged into one engine call per
        round (`planner.solve.run_interleaved`), so the engine sees P problems' worth of prompts at once.
        """
        jobs = []
        for k, problem in enumerate(problems):
            name, settings = self._strategy_config(problem)
            scorer = self._scorer(problem) if name != "best_of_n" else None
            prompt_ids = self.engine.encode_prompt(problem.question)
            jobs.append(functools.partial(_search, STRATEGIES[name], prompt_ids, scorer=scorer, config=settings,
                                          seed=derived_seed(seed, k)))
        results = run_interleaved(jobs, self.engine)
        # Every root-to-leaf path must end in a response the verifier can grade: a leaf the search left
        # unfinished (MCTS and beam stop at their budget) is rolled out to the end, one sample each.
        params = SamplingParams(temperature=self.config.temperature, max_tokens=self.config.max_tokens)
        rollouts = [functools.partial(_complete_leaves, r.tree, params=params, seed=derived_seed(seed, k, 2))
                    for k, r in enumerate(results)]
        run_interleaved(rollouts, self.engine)
        for result, problem in zip(results, problems):
            reward_leaves(result.tree, lambda text, p=problem: self.reward_fn(text, p))
        return [r.tree for r in results], results

    # ---- learning ---------------------------------------------------------------------------------
    def advantages(self, batch: RolloutBatch, old_logp, ref_logp, old_values):
        """Token advantages (B, L) and the critic's targets (B, L) with their mask."""
        c = self.config
        mask = batch.response_mask
        kl_tokens = torch.zeros_like(mask)
        if ref_logp is not None and c.kl_placement == "reward":
            kl_tokens = kl(old_logp, ref_logp, kind=c.loss.kl_kind) * mask  # (B, L)
        beta = self.kl_controller.value if c.kl_placement == "reward" else 0.0
        # critic targets, default: Monte-Carlo node values at every response token (prefix ends there)
        targets, target_mask = batch.token_values, mask
        if c.estimator == "gae":
            state_values = torch.nn.functional.pad(old_values[:, :-1], (1, 0))  # V(s_t) = value at t - 1
            token_rewards = kl_penalized_rewards(batch.rewards, kl_tokens, mask, beta)  # (B, L)
            adv, returns = gae(token_rewards, state_values, mask, gamma=c.gamma, lam=c.lam)
            adv = masked_whiten(adv, mask) * mask
            if c.critic.target == "gae":  # value at t - 1 regresses the return of token t
                targets, target_mask = returns[:, 1:], mask[:, 1:]
                targets = torch.nn.functional.pad(targets, (0, 1))
                target_mask = torch.nn.functional.pad(target_mask, (0, 1))
            return adv, targets, target_mask
        if c.estimator == "tree":
            steps = tree_step_advantages(batch.path_values)
            spread = tree_advantages_to_tokens(steps, batch.step_lengths)  # (B, R)
            adv = torch.zeros_like(mask)
            for b, start in enumerate(batch.prompt_lengths):
                adv[b, start:start + spread.shape[1]] = spread[b][: adv.shape[1] - start]
            return adv * mask, targets, target_mask
        rewards = batch.rewards - beta * kl_tokens.sum(-1)  # (B,)
        return broadcast_to_tokens(self._sequence_advantages(batch, rewards), mask), targets, target_mask

    def _sequence_advantages(self, batch: RolloutBatch, rewards: torch.Tensor) -> torch.Tensor:
        """(B,) advantages of a group estimator. Equal groups go in as one (P, G) tensor; trees with
        different leaf counts go group by group, except the batch-normalised REINFORCE++."""
        c = self.config
        groups = batch.group.unique()
        sizes = {int((batch.group == g).sum()) for g in groups}
        extra = {"greedy_rewards": self._greedy_rewards} if c.estimator == "remax" else {}
        order = torch.argsort(batch.group, stable=True)
        seq_adv = torch.zeros_like(rewards)
        if len(sizes) == 1:
            table = rewards[order].view(len(groups), -1)  # (P, G)
            seq_adv[order] = compute_advantages(c.estimator, table, **extra).reshape(-1)
        elif c.estimator == "reinforce_pp":  # normalised over the whole batch: one row holds it all
            seq_adv = compute_advantages(c.estimator, rewards[None])[0]
        elif c.estimator == "reinforce_pp_baseline":
            raise ValueError("reinforce_pp_baseline needs groups of equal size; these trees have "
                             f"{sorted(sizes)} leaves: use strategy 'sample' or 'best_of_n', or another estimator")
        else:
            for k, g in enumerate(groups):
                rows = (batch.group == g).nonzero().squeeze(-1)
                cfg = {name: value[k:k + 1] for name, value in extra.items()}
                seq_adv[rows] = compute_advantages(c.estimator, rewards[rows][None], **cfg)[0]
        return seq_adv

    def _drop_flat_groups(self, batch: RolloutBatch) -> RolloutBatch:
        groups = batch.group.unique()
        rewards = [batch.rewards[batch.group == g] for g in groups]
        keep_groups = {int(g) for g, r in zip(groups, rewards)
                       if bool(nonzero_variance_groups(r[None])[0])}
        keep = [i for i in range(len(batch)) if int(batch.group[i]) in keep_groups]
        return batch.select(keep) if keep else batch

    def train_on(self, batch: RolloutBatch, iteration: int) -> dict:
        """K epochs of minibatch updates of policy and critic on one iteration's rows."""
        c = self.config
        metrics: dict[str, float] = {}
        # The pre-update log-probabilities: the engine's own (old_logprobs="engine": no extra forward),
        # or the learner's, which with one epoch of one minibatch come out of the update's own forward
        # pass (as TRL does) and otherwise need a forward over the whole batch.
        from_engine = c.old_logprobs == "engine"
        single_pass = (not from_engine and c.epochs == 1 and c.minibatches == 1
                       and not (c.kl_placement == "reward" and self.reference is not None))
        with torch.no_grad():
            if from_engine:
                old_logp = batch.old_logprobs
            else:
                old_logp = None if single_pass else token_logprobs(self.learner, batch)[0]
            ref_logp = token_logprobs(self.reference, batch)[0] if self.reference is not None else None
            old_values = (self.critic.token_values(batch.input_ids, batch.attention_mask)
                          if self.critic is not None else torch.zeros_like(batch.old_logprobs))
        adv, targets, target_mask = self.advantages(batch, old_logp, ref_logp, old_values)
        if self.critic is not None:  # error on this iteration's fresh (held-out) tree nodes, before training
            metrics["critic_heldout_mse"] = float(masked_mean((old_values.clamp(0, 1) - batch.token_values) ** 2,
                                                              batch.response_mask))
        loss_config = dataclasses.replace(c.loss, kl_coef=self.kl_controller.value if c.kl_placement == "loss" else 0.0)
        entropy_mode = "grad" if loss_config.entropy_coef != 0 else "log"
        groups = batch.group.unique().tolist()
        sums: dict[str, list[float]] = {}
        for epoch in range(c.epochs):
            order = np.random.default_rng(derived_seed(c.seed, iteration, epoch)).permutation(len(groups))
            for chunk in np.array_split(order, c.minibatches):
                chosen = {groups[j] for j in chunk}
                rows = [i for i, g in enumerate(batch.group.tolist()) if g in chosen]
                if not rows:
                    continue
                idx = torch.tensor(rows)
                mb = batch.select(rows)
                logp, entropy = token_logprobs(self.learner, mb, entropy=entropy_mode)
                if old_logp is None:  # single pass: mb is the whole batch, in order
                    old_logp = logp.detach()
                    self._check_sync(old_logp, batch, metrics)
                elif from_engine and "engine_learner_logprob_gap" not in metrics:  # before the first step
                    self._check_sync(logp.detach(), mb, metrics)
                loss, m = policy_loss(logp, old_logp[idx], adv[idx], mb.response_mask, loss_config,
                                      ref_logp=ref_logp[idx] if ref_logp is not None and loss_config.kl_coef > 0
                                      else None, entropy=entropy)
                self._step(self.learner, self.optimizer, loss, "policy", m)
                if self.critic is not None:
                    values = self.critic.token_values(mb.input_ids, mb.attention_mask)
                    v_loss, vm = value_loss(values, old_values[idx], targets[idx], target_mask[idx],
                                            clip_range=c.critic.clip_range)
                    self.critic.model.train()
                    self._step(self.critic.model, self.critic_optimizer, v_loss, "critic", vm)
                    self.critic.model.eval()
                    m.update(vm)
                for k, v in m.items():
                    sums.setdefault(k, []).append(float(v))
        if "engine_learner_logprob_gap" not in metrics:
            self._check_sync(old_logp, batch, metrics)
        metrics.update({k: float(np.mean(v)) for k, v in sums.items()})
        if ref_logp is not None:
            metrics["kl_to_reference"] = float(masked_mean(kl(old_logp, ref_logp, kind="k3"), batch.response_mask))
            self.kl_controller.update(metrics["kl_to_reference"], len(batch))
        metrics["kl_coef"] = float(self.kl_controller.value)
        return metrics

    def _check_sync(self, learner_logp: torch.Tensor, batch: RolloutBatch, metrics: dict) -> None:
        """The engine sampled with the weights the learner holds now: their log-probabilities of the
        sampled tokens must agree (float32, 1e-3). Logged every iteration; raised in debug mode."""
        gap = float(((learner_logp - batch.old_logprobs).abs() * batch.response_mask).max())
        metrics["engine_learner_logprob_gap"] = gap
        if self.config.debug and gap > SYNC_TOLERANCE:
            raise RuntimeError(f"engine and learner disagree on sampled-token log-probabilities by {gap:.2e} "
                               f"(> {SYNC_TOLERANCE}): weights are out of sync")

    def _step(self, model, optimizer, loss, what: str, metrics: dict) -> None:
        optimizer.zero_grad()
        if not is_finite_loss(loss):
            log.warning("iteration %d: %s loss is %s; update skipped", self.iteration, what, loss.detach().item())
            metrics[f"{what}_skipped"] = 1.0
            return
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), self.config.max_grad_norm)
        if not torch.isfinite(norm):  # the total norm is NaN/inf whenever any gradient entry is
            log.warning("iteration %d: %s gradient is not finite; update skipped", self.iteration, what)
            optimizer.zero_grad()
            metrics[f"{what}_skipped"] = 1.0
            return
        optimizer.step()
        metrics[f"{what}_skipped"] = 0.0

    # ---- the loop ---------------------------------------------------------------------------------
    def problems_for(self, iteration: int) -> list:
        rng = np.random.default_rng(derived_seed(self.config.seed, iteration, 7))
        index = rng.choice(len(self.problems), size=self.config.prompts_per_iteration,
                           replace=len(self.problems) < self.config.prompts_per_iteration)
        return [self.problems[i] for i in index]

    def step(self) -> dict:
        """One search-train iteration; returns its metrics."""
        c, i = self.config, self.iteration
        start = time.perf_counter()
        problems = self.problems_for(i)
        engine_before = self.engine.stats.copy()
        trees, results = self.grow_trees(problems, derived_seed(c.seed, i, 1))
        if c.estimator == "remax":
            greedy = self.engine.generate([self.engine.encode_prompt(p.question) for p in problems],
                                          SamplingParams(temperature=0, max_tokens=c.max_tokens))
            self._greedy_rewards = torch.tensor([self.reward_fn(g[0].text, p) for g, p in zip(greedy, problems)])
        search_seconds = time.perf_counter() - start
        batch = batch_from_trees(trees, self.pad_id)
        zero_var = [float(not nonzero_variance_groups(batch.rewards[batch.group == g][None])[0])
                    for g in batch.group.unique()]
        if c.drop_zero_variance_groups:
            batch = self._drop_flat_groups(batch)
        metrics = self.train_on(batch, i)
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
