"""DPO from tree pairs, rejection-sampling SFT and GRPO from the same trees, at equal generated tokens.

On the embedded arithmetic task (`verifiers.arithmetic`): one cold start (`lab.cold_start.cold_start`, cached in
a folder and reused by every arm), then for each arm and seed a run that grows MCTS trees with the
current policy (the same search settings for every arm: `SearchTrainer.grow_trees`) and learns from
them, until it has generated `token_budget` tokens. Sampled pass@1 (temperature 1) on held-out problems
is measured at the start and each time the run's generated tokens cross a multiple of
token_budget / evals. Every run writes its trees to a tree store. Afterwards an outcome reward model is
trained on every run's stored trees (`rl.reward_model`) and judged as a best-of-N reranker (`lab.reranking`).

The arms (`ARMS`): "grpo" = `rl.trainer.SearchTrainer` (GRPO advantages over each tree's leaves, the
critic off so that every arm's trees are grown alike), "dpo" = `rl.dpo.OnlineDPO` (sibling-step and
response pairs, the trees' own log-probabilities as reference), "rs_sft" = `rl.rs_sft.RejectionSamplingSFT`.
The RL variants, each a `SearchTrainer` with another estimator (`rl.estimators`): "grpo_flat" (GRPO on
best-of-N groups: no tree), "tree" (V(node) - V(parent)), "treerl" (TreeRL's global + local advantages
with its leaf weighting), "ppo" (GAE with the value critic trained on its returns),
"reinforce_pp_baseline" (REINFORCE++-baseline).
Compute per run: generated tokens, prompt tokens the engine computed (not served from its prefix cache),
tokens the learner trained on, and FLOPs = 2 N (generated + computed prompt tokens) + 6 N (trained
tokens) for a policy of N parameters (a forward and backward of the learner; no reference forward in
any arm), plus 8 N per trained token for the "ppo" arm's critic (a copy of the trunk: a forward for the
old values, a forward and backward for its update).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lab.comparison_report import write_report
from lab.recipe import _backend
from lab.reranking import rerank_comparison, solved_matrix
from verifiers.arithmetic import STEP_DELIMITER, arithmetic_task
from verifiers.tasks import load_task

__all__ = ["ComparisonConfig", "ARMS", "run_comparison", "held_out_problems"]


@dataclass
class ComparisonConfig:
    """Sizes of the comparison (scripts/compare_trainers.py), chosen to finish well under an hour on 2 cores."""

    output_dir: str = "runs/compare"
    """Where the cold start, every run's metrics and trees, the reward model, CSVs, plots and summary go."""
    cold_start_dir: str | None = None
    """A cold-start model folder to reuse; None: <output_dir>/cold_start, trained once and reused after."""
    backend: str = "auto"
    """Serving engine: "vllm", "hf", or "auto" (vLLM when it imports)."""
    arms: list[str] = field(default_factory=lambda: ["dpo", "rs_sft", "grpo"])
    """Trainers to compare (names in lab.comparison.ARMS)."""
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    """Training seeds of every arm (search, prompt order, updates)."""
    token_budget: int = 100_000
    """Generated tokens of each run (search included); a run stops at the first iteration past it."""
    evals: int = 4
    """Evaluations after the start, at equal steps of generated tokens."""
    prompts_per_iteration: int = 32
    """Problems searched per iteration (one MCTS tree each)."""
    simulations: int = 8
    """MCTS simulations per tree."""
    eval_problems: int = 256
    """Held-out problems of pass@1 (and of the reranking), none seen in SFT or RL training."""
    eval_samples: int = 4
    """Samples per held-out problem for pass@1 (temperature 1)."""
    grpo_lr: float = 1e-4
    """GRPO's learning rate (the demo's)."""
    grpo_minibatches: int = 4
    """GRPO's updates per iteration (whole trees per minibatch); the other policy-gradient arms use the same
    learning rate and minibatches."""
    flat_samples: int = 8
    """Responses per prompt of the "grpo_flat" arm (best-of-N groups instead of trees)."""
    dpo_lr: float = 1e-4
    """Online DPO's learning rate."""
    dpo_beta: float = 0.1
    """Online DPO's beta."""
    dpo_continuation: str = "step"
    """What DPO's step pairs train on: "step" or "leaf" (rl.pairs.PairConfig.continuation)."""
    dpo_epochs: int = 4
    """Online DPO's passes over each round's pairs: with a round's pairs in one batch, as many optimizer steps
    per round as GRPO's minibatches."""
    rs_lr: float = 1e-4
    """Rejection-sampling SFT's learning rate."""
    rs_max_per_prompt: int = 4
    """Rejection-sampling SFT's cap of kept responses per prompt."""
    rs_epochs: int = 4
    """Rejection-sampling SFT's passes over each round's kept responses (as many steps as GRPO's minibatches
    while a round keeps at most one batch)."""
    reward_model: bool = True
    """Train the outcome reward model on stored trees and compare it with majority vote as a reranker."""
    reward_model_epochs: int = 4
    """Passes of the reward model over its pairs (every correct-incorrect combination of distinct responses,
    at most 4 per prompt, from every run's stored trees)."""
    reward_model_lr: float = 1e-3
    """The reward model's AdamW learning rate (3e-3 did not learn on this task; measured, docs/results.md)."""
    rerank_sizes: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16])
    """Best-of-N sizes of the reranking (sampled once at the largest, sub-sampled for the others)."""
    rerank_seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    """Sampling seeds of the reranking."""
    sft_minutes: float = 8.0
    """Most wall minutes of the cold start (it stops once sampled pass@1 reaches 0.3)."""
    progress: bool = True
    """Progress bars."""

    def __post_init__(self) -> None:
        unknown = [a for a in self.arms if a not in ARMS]
        if unknown or not self.arms:
            raise ValueError(f"ComparisonConfig.arms must be names in {sorted(ARMS)}; got {self.arms!r}")
        if not self.seeds or self.token_budget < 1 or self.evals < 1:
            raise ValueError("ComparisonConfig needs seeds, token_budget >= 1 and evals >= 1; got "
                             f"seeds={self.seeds!r}, token_budget={self.token_budget!r}, evals={self.evals!r}")


def held_out_problems(count: int, train_questions: set[str]) -> list:
    """`count` arithmetic problems ("medium") whose questions are in no training set, from a seed of their own."""

    pool = [p for p in arithmetic_task(4 * count, "medium", seed=31_337) if p.question not in train_questions]
    unique = list({p.question: p for p in pool}.values())
    if len(unique) < count:
        raise ValueError(f"only {len(unique)} held-out problems are unseen in training; ask for fewer than {count}")
    return unique[:count]


# ---- the arms ---------------------------------------------------------------------------------------
def _policy_gradient(estimator: str, *, flat: bool = False, critic: bool = False) -> Callable:
    """An arm that trains with `estimator` on the MCTS trees (or, flat=True, on best-of-N groups of
    whole responses as long as the trees' deepest path: GRPO as TRL runs it); critic=True trains the
    value critic on GAE returns (PPO)."""
    def build(train, config: ComparisonConfig, problems, task, engine):
        from planner.strategies import BestOfNConfig
        from rl.config import CriticConfig
        from rl.trainer import SearchTrainer

        replace = dataclasses.replace
        changes = dict(learner=replace(train.learner, lr=config.grpo_lr, minibatches=config.grpo_minibatches),
                       algorithm=replace(train.algorithm, estimator=estimator, old_logprobs="engine"))
        if flat:
            mcts = train.search.mcts
            changes.update(search=replace(train.search, strategy="best_of_n", best_of_n=BestOfNConfig(
                n=config.flat_samples, temperature=mcts.temperature, max_tokens=mcts.max_step_tokens * mcts.max_steps)))
        if critic:
            changes.update(value=replace(train.value, critic=CriticConfig(enabled=True, target="gae",
                                                                          use_as_scorer=False)))
        return SearchTrainer(replace(train, **changes), problems, task.reward,
                             extract=task.verifier.extract, engine=engine)
    return build


def _dpo(train, config: ComparisonConfig, problems, task, engine):
    from rl.dpo import DPOConfig, OnlineDPO
    from rl.pairs import PairConfig

    dpo = DPOConfig(beta=config.dpo_beta, lr=config.dpo_lr, pairs=PairConfig(continuation=config.dpo_continuation),
                    epochs=config.dpo_epochs, seed=train.loop.seed)
    return OnlineDPO(train, dpo, problems, task.reward, extract=task.verifier.extract, engine=engine)


def _rs_sft(train, config: ComparisonConfig, problems, task, engine):
    from rl.rs_sft import RejectionSamplingSFT, RSSFTConfig

    rs = RSSFTConfig(lr=config.rs_lr, max_per_prompt=config.rs_max_per_prompt, epochs=config.rs_epochs)
    return RejectionSamplingSFT(train, rs, problems, task.reward, extract=task.verifier.extract, engine=engine)


ARMS: dict[str, Callable] = {
    "grpo": _policy_gradient("grpo"),
    "grpo_flat": _policy_gradient("grpo", flat=True),
    "tree": _policy_gradient("tree"),
    "treerl": _policy_gradient("treerl"),
    "ppo": _policy_gradient("gae", critic=True),
    "reinforce_pp_baseline": _policy_gradient("reinforce_pp_baseline"),
    "dpo": _dpo,
    "rs_sft": _rs_sft,
}
"""Arm name -> `build(train_config, comparison_config, problems, task, engine) -> trainer` (a `SearchTrainer`
over the running `engine`)."""


def _trained_tokens(trainer, metrics: dict, trees_before: int) -> int:
    """Tokens the learner trained on in the last iteration: the metric DPO and RS-SFT log, or for GRPO every
    rewarded root-to-leaf row of the iteration's stored trees (prompt + response, one epoch)."""
    if "trained_tokens" in metrics:
        return int(metrics["trained_tokens"])
    stored = list(trainer.tree_store)[trees_before:]
    return sum(len(s.tree.prefix_ids(leaf)) for s in stored for leaf in s.tree.leaves()
               if leaf and s.tree[leaf].reward is not None) * trainer.config.learner.epochs


def _run_settings(config: ComparisonConfig) -> dict:
    """The settings a run's result depends on (not the reward model's, the output folder's or the arm list)."""
    skip = {"output_dir", "arms", "seeds", "reward_model", "reward_model_epochs", "reward_model_lr", "rerank_sizes",
            "rerank_seeds", "progress"}
    return {k: v for k, v in dataclasses.asdict(config).items() if k not in skip}


def run_arm(arm: str, seed: int, config: ComparisonConfig, model_dir: Path, problems, held_out, task,
            engine, start_weights: dict) -> list[dict]:
    """One run over the shared `engine` (first reset to `start_weights`, the cold start's): train until the
    token budget, evaluating pass@1 at equal steps of generated tokens. A run already finished with the same
    settings (its evaluations.json) is reused, so a rerun redoes only what changed."""
    from planner.strategies import MCTSConfig
    from rl.config import (CriticConfig, EngineConfig, LearnerConfig, LoopConfig, TrainConfig, TreeSearchConfig,
                           ValueConfig)

    out = Path(config.output_dir) / "runs" / f"{arm}_seed{seed}"
    record, settings = out / "evaluations.json", _run_settings(config)
    if record.is_file() and json.loads(record.read_text())["settings"] == settings:
        return json.loads(record.read_text())["rows"]  # this run is done with these settings: reuse it
    for name in ("trees.jsonl", "metrics.jsonl", "evaluations.json"):
        (out / name).unlink(missing_ok=True)
    search = MCTSConfig(num_simulations=config.simulations, num_candidates=2, step_delimiter=STEP_DELIMITER,
                        max_step_tokens=16, max_steps=8, temperature=1.0)
    engine.load_weights(start_weights)
    train = TrainConfig(
        model=str(model_dir),
        loop=LoopConfig(output_dir=str(out), iterations=10_000, prompts_per_iteration=config.prompts_per_iteration,
                        seed=seed, tree_store=str(out / "trees.jsonl"), checkpoint_every=10_000),
        engine=EngineConfig(backend=engine.backend),
        search=TreeSearchConfig(strategy="mcts", mcts=search),
        value=ValueConfig(critic=CriticConfig(enabled=False)),
        learner=LearnerConfig(device="cpu"))
    trainer = ARMS[arm](train, config, problems, task, engine)
    params = sum(p.numel() for p in trainer.learner.policy.parameters())
    marks = [config.token_budget * (k + 1) / config.evals for k in range(config.evals)]
    totals = {"generated_tokens": 0, "computed_prompt_tokens": 0, "trained_tokens": 0, "seconds": 0.0}
    rows = []

    def evaluate(iteration: int) -> None:
        solved, _ = solved_matrix(trainer.engine, held_out, task.reward, config.eval_samples, seed=1234)
        learner = 6 + (8 if trainer.learner.critic is not None else 0)  # FLOPs per parameter per trained token
        flops = 2 * params * (totals["generated_tokens"] + totals["computed_prompt_tokens"]) + \
            learner * params * totals["trained_tokens"]
        rows.append({"arm": arm, "seed": seed, "iteration": iteration, **totals, "flops": flops,
                     "pass@1": float(solved.mean()), "solved_per_problem": solved.mean(0).tolist()})

    evaluate(0)
    while totals["generated_tokens"] < config.token_budget:
        before, trees_before, start = trainer.engine.stats.copy(), len(trainer.tree_store), time.perf_counter()
        metrics = trainer.step()
        totals["seconds"] += time.perf_counter() - start
        spent = trainer.engine.stats - before
        totals["generated_tokens"] += spent.generated_tokens
        totals["computed_prompt_tokens"] += spent.prompt_tokens - spent.cached_prompt_tokens
        totals["trained_tokens"] += _trained_tokens(trainer, metrics, trees_before)
        if totals["generated_tokens"] >= marks[0] or totals["generated_tokens"] >= config.token_budget:
            evaluate(trainer.iteration)
            while marks and totals["generated_tokens"] >= marks[0]:
                marks.pop(0)
    trainer.logger.close()
    record.write_text(json.dumps({"settings": settings, "rows": rows}) + "\n")
    return rows


def run_comparison(config: ComparisonConfig) -> dict:
    """Every arm and seed, then the reward model's reranking; writes CSVs, plots and summary.json."""
    import torch
    from transformers import AutoModelForCausalLM

    from planner.policy import load_policy
    from rl.runtime import torch_settings
    from lab.cold_start import cold_start

    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    backend = _backend(config.backend)
    task = load_task("arithmetic", split="test")
    started = time.perf_counter()
    with torch_settings(threads=1):
        model_dir = Path(config.cold_start_dir or out / "cold_start")
        if not (model_dir / "config.json").is_file():
            cold_start(model_dir, max_minutes=config.sft_minutes, final_eval=False, progress=config.progress)
        sft_questions = {p.question for p in arithmetic_task(20_000, "medium", seed=0)}  # cold_start's training set
        rl_problems = arithmetic_task(4000, "medium", seed=1)
        held_out = held_out_problems(config.eval_problems, sft_questions | {p.question for p in rl_problems})
        engine = load_policy(model_dir, backend=backend, seed=0)  # one engine for every run: starts are slow
        start_weights = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).state_dict()
        runs = []
        for arm in config.arms:
            for seed in config.seeds:
                runs += run_arm(arm, seed, config, model_dir, rl_problems, held_out, task, engine, start_weights)
                (out / "runs.json").write_text(json.dumps(runs) + "\n")
        reranking = None
        if config.reward_model:
            engine.load_weights(start_weights)
            reranking = rerank_comparison(config, model_dir, held_out, task, engine)
        engine.close()
    return write_report(config, runs, reranking, seconds=time.perf_counter() - started)
