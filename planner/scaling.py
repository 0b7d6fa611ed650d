"""Compute-scaling curves: accuracy against measured compute for each strategy and size.

For a policy, a task (or a slice of one), a list of strategies and a list of sizes per strategy,
`run_scaling` runs every strategy at every size over several seeds and returns one row per
(strategy, size, seed), each with its per-problem outcomes; `run` also writes them
(`planner.scaling_report.write_outputs`: results.csv, problems.csv, summary.json and two plots).
The x axis is always the *measured* compute (generated tokens or estimated FLOPs per problem, the
scorer's included), so strategies with different size knobs share one plot: the compute-optimal
scaling curves of Snell et al. 2024 ("Scaling LLM Test-Time Compute Optimally can be More Effective
than Scaling Model Parameters"). Each accuracy comes with a 95% bootstrap interval over problems
(see `planner.scaling_report`).

**Size** is each strategy's natural size knob (`SIZE_KNOBS`); it is not a compute limit (that is a
`planner.Budget`):

- best_of_n: N, the number of samples. Sampled *once* per problem and seed at the largest N, in
  one generate call; a smaller n uses the first n of those N samples (they are i.i.d., so the
  first n are an n-sample run). The sub-sample's compute is pro-rated: generated tokens of those
  n samples, the prompt (and its cached part) once, one policy call, the scorer's tokens (and
  FLOPs) of those n responses, and wall seconds times n / N (an estimate: n samples in one batch
  take less than n / N of the time of N).
  A Monte-Carlo scorer's pool of samples from the prompt (drawn once, whatever n) counts in full.
- beam, dvts: `num_beams` (N), with `beam_width` M = gcd(N, 4) unless set in the options
  (Snell et al. 2024 use M = 4; N must be a multiple of M). mcts: `num_simulations`.
- budget_forcing: the thinking tokens b (s1's own scaling axis, Muennighoff et al. 2025):
  `max_thinking_tokens = b`, `min_thinking_tokens = round(forcing_min_fraction * b)`, one sample
  (set `n` in the strategy options for best-of-N on top of forcing).

**Grading.** Strategies never see the reference answer: the scorer is "mc" (Monte-Carlo rollouts
with the same policy, scored by majority agreement among them), a critic / PRM folder, or none
(beam, dvts and mcts then get `planner.solve`'s default Monte-Carlo scorer). Only after the search
does the task's verifier grade the chosen response: `reward = task.reward(text, problem)`, and a
problem counts as solved when `reward >= SOLVED_AT`. **accuracy** = solved problems / problems (for
one strategy, size and seed); `mean_reward` is the mean reward.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from planner.budget import ComputeRecord
from planner.monte_carlo import MonteCarloScorer
from planner.scaling_report import SIZE_KNOBS, SOLVED_AT, write_outputs
from planner.scorers import ConfidenceScorer, ModelScorer, Scorer
from planner.solve import solve, solve_batch
from planner.strategies import STRATEGIES, make_config
from planner.strategies.common import choose_answer
from planner.tree import ROOT
from verifiers.tasks import load_task

__all__ = ["ScalingConfig", "DEFAULT_SIZES", "resolve_model", "make_scorer", "select_problems", "run_scaling",
           "solve_all", "best_of_n_rows", "strategy_rows", "load_inputs", "run"]

DEFAULT_SIZES: dict[str, tuple[int, ...]] = {
    "best_of_n": (1, 2, 4, 8, 16),
    "beam": (1, 2, 4, 8),
    "dvts": (2, 4, 8),
    "mcts": (4, 8, 16, 32),
    "budget_forcing": (32, 64, 128, 256),
}
"""Sizes used for a strategy when none are given for it (see `SIZE_KNOBS`)."""


@dataclass
class ScalingConfig:
    """One compute-scaling run (Snell et al. 2024): strategies x sizes x seeds over a task slice."""

    model: str = "smollm2"
    """Policy: a Hugging Face save_pretrained folder, or a name: "smollm2" (SmolLM2-135M-Instruct) or
    "qwen2.5-coder-0.5b" (Qwen2.5-Coder-0.5B-Instruct; `make qwen-parts` first)."""
    backend: Literal["hf", "vllm"] = "hf"
    """Policy backend: "hf" (transformers) or "vllm" (in-process engine with prefix caching)."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Policy weights' dtype."""
    threads: int = 1
    """CPU threads of the backend (two threads on two busy cores can be slower than one)."""
    replicas: int = 1
    """Engine replicas: 1 = one engine in this process; N > 1 = an engine pool of N Ray actors
    (planner.policy.EnginePool), which runs in parallel only on merged calls: use with batched=True."""
    max_model_len: int | None = None
    """vLLM only: longest prompt + response (None: the model's own limit)."""
    task: str = "gsm8k"
    """Task name for verifiers.load_task (gsm8k, math500, countdown, game24, humaneval, custom: docs/data.md)."""
    task_path: str | None = None
    """The task's data file or Hugging Face id (None: the copy in ../shared/data)."""
    split: str = "test"
    """The task's split ("test": an evaluation, as in every evaluation script; the training scripts read "train")."""
    task_options: dict[str, str] = field(default_factory=dict)
    """The task's own load_task options (the custom task's question_field, answer_field, answer_kind,
    instruction: docs/data.md)."""
    offset: int = 0
    """Skip this many problems first."""
    limit: int | None = None
    """Use this many problems after the offset (None: all)."""
    strategies: list[str] = field(default_factory=lambda: ["best_of_n"])
    """Strategies to compare (names in planner.strategies.STRATEGIES)."""
    sizes: dict[str, list[int]] = field(default_factory=dict)
    """Strategy -> its sizes (the values of its size knob, `SIZE_KNOBS`); a strategy missing here gets
    DEFAULT_SIZES."""
    seeds: list[int] = field(default_factory=lambda: [0, 1])
    """Run seeds; problem i under seed s is searched with seed s * 1_000_003 + i."""
    max_tokens: int = 256
    """Most tokens per response: best_of_n's max_tokens, budget_forcing's max_answer_tokens and the "mc"
    scorer's rollouts (beam, dvts, mcts: set max_step_tokens and max_steps in `options`)."""
    temperature: float = 0.8
    """Sampling temperature of every strategy: 0.8 as the planner's strategies sample by default for test-time
    search (scripts/solve.py too); training samples at 1.0, the policy itself (scripts/train.py)."""
    final: Literal["majority", "weighted", "best"] = "majority"
    """best_of_n and budget_forcing pick rule ("weighted" and "best" need a scorer)."""
    votes: list[str] = field(default_factory=list)
    """best_of_n only: more pick rules applied to the same samples, each its own curve "best_of_n_<rule>"
    (e.g. ["majority"] beside final="weighted": both curves from one sampling pass). A rule's compute is
    what that rule alone spends: "majority" counts no scorer tokens, rollouts or FLOPs."""
    forcing_min_fraction: float = 0.5
    """budget_forcing: min_thinking_tokens = round(this * size)."""
    scorer: str | None = None
    """None, "mc" (Monte-Carlo majority agreement with the same policy), "confidence" (the policy's own
    step log-probabilities, read from the search tree: no scorer FLOPs), or a model folder: one with a
    scorer.json loads as the format it names (`planner.prm_scorers.load_scorer`: a PRM, the generative
    verifier of `scripts/lab/verifier_lm.py`), another as a critic (ModelScorer, squash="clamp")."""
    mc_rollouts: int = 4
    """Rollouts per prefix of the "mc" scorer."""
    options: dict[str, dict] = field(default_factory=dict)
    """Strategy -> extra config fields (e.g. {"beam": {"beam_width": 2}})."""
    chat: bool = True
    """Wrap each question in the tokenizer's chat template (policy.encode_prompt)."""
    batched: bool = False
    """Search the problems together (`planner.solve.solve_batch(batched=True)`): each round's generate
    calls are merged into one engine call. Per-problem tokens stay exact (cache hits shared out);
    wall_seconds is then the measured wall time. Samples differ from the one-by-one run (merged seeds)."""
    progress: bool = True
    """Show a tqdm progress bar."""

    def __post_init__(self) -> None:
        unknown = [s for s in self.strategies if s not in STRATEGIES]
        if unknown or not self.strategies:
            raise ValueError(f"strategies must be a non-empty list of {sorted(STRATEGIES)}; got {self.strategies!r}")
        for name, given in (("sizes", self.sizes), ("options", self.options)):
            extra = sorted(set(given) - set(self.strategies))
            if extra:
                raise ValueError(f"{name} given for strategies not run: {extra}; strategies: {self.strategies}")
        for name in self.strategies:
            sizes = self.sizes_for(name)
            if not sizes or any(not isinstance(b, int) or isinstance(b, bool) or b < 1 for b in sizes):
                raise ValueError(f"sizes for {name} must be integers >= 1; got {list(sizes)!r}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be a non-empty list of distinct integers; got {self.seeds!r}")
        if self.offset < 0 or (self.limit is not None and self.limit < 1):
            raise ValueError("offset must be >= 0 and limit >= 1 or None; "
                             f"got offset={self.offset}, limit={self.limit}")
        if not isinstance(self.replicas, int) or isinstance(self.replicas, bool) or self.replicas < 1:
            raise ValueError(f"replicas must be an integer >= 1 (engine replicas); got {self.replicas!r}")
        if not 0.0 <= self.forcing_min_fraction <= 1.0:
            raise ValueError(f"forcing_min_fraction must be in [0, 1]; got {self.forcing_min_fraction!r}")
        if self.final != "majority" and self.scorer is None and {"best_of_n", "budget_forcing"} & set(self.strategies):
            raise ValueError(f"final={self.final!r} needs a scorer ('mc', 'confidence' or a folder); or use final='majority'")
        rules = ("majority", "weighted", "best")
        if any(v not in rules for v in self.votes) or len(set(self.votes)) != len(self.votes) or self.final in self.votes:
            raise ValueError(f"votes must be distinct rules of {list(rules)} other than final={self.final!r}; "
                             f"got {self.votes!r}")
        if self.votes and "best_of_n" not in self.strategies:
            raise ValueError(f"votes={self.votes!r} applies to best_of_n, which is not run; strategies: {self.strategies}")
        if self.scorer is None and set(self.votes) - {"majority"}:
            raise ValueError(f"votes={self.votes!r} needs a scorer ('mc', 'confidence' or a folder) for 'weighted' and 'best'")
        for name in self.strategies:  # a bad strategy option fails here, before any model is loaded
            for size in self.sizes_for(name):
                self.strategy_config(name, size)

    def sizes_for(self, strategy: str) -> list[int]:
        return sorted(self.sizes.get(strategy) or DEFAULT_SIZES[strategy])

    def strategy_config(self, strategy: str, size: int, **extra) -> dict:
        """Config fields for `strategy` at `size` (validated by building the config once)."""
        fields = {"temperature": self.temperature, SIZE_KNOBS[strategy]: size}
        if strategy == "best_of_n":
            fields.update(max_tokens=self.max_tokens, final=self.final)
        elif strategy in ("beam", "dvts"):  # N must be a multiple of M: M = gcd(N, 4) unless set
            fields["beam_width"] = math.gcd(size, 4)
        elif strategy == "budget_forcing":
            fields.update(min_thinking_tokens=round(self.forcing_min_fraction * size),
                          max_answer_tokens=self.max_tokens, final=self.final)
        fields.update(self.options.get(strategy, {}))
        fields.update(extra)
        make_config(strategy, **fields)
        return fields


def resolve_model(model: str | os.PathLike) -> Path:
    """A model folder: `planner.policy.local_models.resolve_model` (a name such as "smollm2" or
    "qwen2.5-coder-0.5b", or a save_pretrained folder)."""
    from planner.policy.local_models import resolve_model as resolve
    return resolve(model)


def make_scorer(spec: str | None, policy, *, extract=None, equivalent=None, rollouts: int = 4,
                max_tokens: int = 256, temperature: float = 0.8) -> Scorer | None:
    """The scorer factory: None -> None; "mc" -> MonteCarloScorer over `policy` (majority agreement,
    no reference); "confidence" -> ConfidenceScorer (the sampled steps' mean log-probability, free);
    a folder with a scorer.json -> `planner.prm_scorers.load_scorer` (the format it names: a PRM, a
    generative verifier, ...); another folder -> ModelScorer(folder, squash="clamp") (a critic trained
    on returns)."""
    _check_scorer(spec)
    if spec is None:
        return None
    if spec == "confidence":
        return ConfidenceScorer()
    if spec == "mc":
        return MonteCarloScorer(policy, rollouts=rollouts, max_tokens=max_tokens, temperature=temperature,
                                extract=extract, equivalent=equivalent)
    from planner.prm_scorers import SCORER_FILE, load_scorer

    if (Path(spec) / SCORER_FILE).is_file():
        return load_scorer(spec, decode=policy.decode)
    return ModelScorer(spec, squash="clamp")


def _check_scorer(spec: str | None) -> None:
    if spec not in (None, "mc", "confidence") and not (Path(spec) / "config.json").is_file():
        raise FileNotFoundError("scorer must be 'mc', 'confidence' or a critic / PRM folder with a config.json; "
                                f"got {spec!r}")


def select_problems(problems: Sequence, offset: int = 0, limit: int | None = None) -> list:
    """problems[offset : offset + limit]; raises when that slice is empty."""
    chosen = list(problems)[offset: None if limit is None else offset + limit]
    if not chosen:
        raise ValueError(f"no problems left with offset={offset}, limit={limit} (the task has {len(problems)})")
    return chosen


def _problem_seed(seed: int, index: int) -> int:
    return seed * 1_000_003 + index


def _outcome(strategy: str, size: int, seed: int, problem: int, reward: float, compute: ComputeRecord) -> dict:
    return {"strategy": strategy, "size": size, "seed": seed, "problem": problem, "reward": reward,
            "solved": int(reward >= SOLVED_AT), "generated_tokens": compute.generated_tokens, "flops": compute.flops}


def _row(strategy: str, size: int, seed: int, outcomes: list[dict], compute: ComputeRecord) -> dict:
    """One results.csv row (compute: the totals over the problems) with its per-problem `outcomes`."""
    n = len(outcomes)
    return {"strategy": strategy, "size": size, "seed": seed, "problems": n,
            "accuracy": sum(o["solved"] for o in outcomes) / n, "mean_reward": sum(o["reward"] for o in outcomes) / n,
            "generated_tokens": compute.generated_tokens, "generated_tokens_per_problem": compute.generated_tokens / n,
            "prompt_tokens": compute.prompt_tokens, "cached_prompt_tokens": compute.cached_prompt_tokens,
            "flops": compute.flops, "flops_per_problem": compute.flops / n, "policy_calls": compute.policy_calls,
            "scorer_calls": compute.scorer_calls, "wall_seconds": compute.seconds, "outcomes": outcomes}


def solve_all(problems, policy, strategy: str, scorer: Scorer | None, seed: int, *, chat: bool = True,
              batched: bool = False, on_problem: Callable[[], None] | None = None, **config):
    """(solutions, wall seconds): problem i searched with seed `seed * 1_000_003 + i`, one by one with
    `solve` or together with `solve_batch(batched=True)`."""
    tick = on_problem or (lambda: None)
    start = time.perf_counter()
    if batched:
        solutions = solve_batch(problems, policy, strategy, scorer, seed=_problem_seed(seed, 0), batched=True,
                                chat=chat, **config)
        for _ in solutions:
            tick()
        return solutions, time.perf_counter() - start
    solutions = []
    for i, problem in enumerate(problems):
        solutions.append(solve(problem, policy, strategy, scorer, seed=_problem_seed(seed, i), chat=chat, **config))
        tick()
    return solutions, sum(s.compute.seconds for s in solutions)


def best_of_n_rows(problems, policy, reward: Callable[[str, object], float], sizes: Sequence[int], seed: int, *,
                   scorer: Scorer | None = None, chat: bool = True, batched: bool = False,
                   on_problem: Callable[[], None] | None = None, votes: Sequence[str] = (), **config) -> list[dict]:
    """Best-of-N rows for every size n from one sampling pass per problem at N = max(sizes).

    The first n leaves (in sampling order) are voted on by `config["final"]` exactly as
    `best_of_n` would; their compute is pro-rated (see the module docstring). Each rule in `votes`
    gives rows "best_of_n_<rule>" from the same leaves; "majority" there uses no scores and counts no
    scorer compute, so its rows are those a run without a scorer would give.
    """
    sizes = sorted(sizes)
    top = sizes[-1]
    config = {**config, "n": top, "batch_size": None}
    settings = make_config("best_of_n", **config)
    curves = {settings.final: "best_of_n", **{rule: f"best_of_n_{rule}" for rule in votes}}
    outcomes = {(rule, n): [] for rule in curves for n in sizes}
    compute = {key: ComputeRecord() for key in outcomes}
    solutions, wall = solve_all(problems, policy, "best_of_n", scorer, seed, chat=chat, batched=batched,
                                on_problem=on_problem, **config)
    for index, (problem, solution) in enumerate(zip(problems, solutions)):
        tree, full = solution.tree, solution.compute
        leaves = list(tree[ROOT].children)
        # with a scorer, best_of_n scored every leaf; the vote uses those scores (as a tie-break for "majority")
        weights = [tree[leaf].score for leaf in leaves] if scorer is not None else None
        samples = sum(len(tree[leaf].token_ids) for leaf in leaves)
        fixed = full.generated_tokens - samples  # a rollout scorer's samples from the prompt: needed at any n
        uncached = full.prompt_tokens - full.cached_prompt_tokens
        scored = [len(tree.prefix_ids(leaf)) if scorer is not None else 0 for leaf in leaves]  # scorer input per leaf
        for rule, n in outcomes:
            scoring = scorer is not None and not (rule == "majority" and rule != settings.final)
            first = weights[:n] if scoring else None
            leaf, _ = choose_answer(tree, leaves[:n], rule, first, settings)
            generated = (fixed if scoring else 0) + sum(len(tree[x].token_ids) for x in leaves[:n])
            share = n / len(leaves) if leaves else 0.0
            spent = ComputeRecord(
                generated_tokens=generated, prompt_tokens=full.prompt_tokens,
                cached_prompt_tokens=full.cached_prompt_tokens, policy_calls=full.policy_calls,
                scorer_calls=full.scorer_calls if scoring else 0, scorer_tokens=sum(scored[:n]) if scoring else 0,
                policy_flops=full.policy_flops * (uncached + generated) / max(uncached + full.generated_tokens, 1),
                scorer_flops=full.scorer_flops * sum(scored[:n]) / max(full.scorer_tokens, 1) if scoring else 0.0,
                seconds=0.0 if batched else full.seconds * share)
            compute[rule, n] = compute[rule, n] + spent
            outcomes[rule, n].append(_outcome(curves[rule], n, seed, index,
                                              float(reward(tree.response_text(leaf), problem)), spent))
    if batched:  # one merged call's seconds are in every problem's record: use the measured wall time
        for rule, n in compute:
            compute[rule, n].seconds = wall * n / top
    return [_row(curves[rule], n, seed, outcomes[rule, n], compute[rule, n]) for rule, n in outcomes]


def strategy_rows(problems, policy, reward: Callable[[str, object], float], strategy: str, size: int, seed: int,
                  *, scorer: Scorer | None = None, chat: bool = True, batched: bool = False,
                  on_problem: Callable[[], None] | None = None, **config) -> dict:
    """One row: `strategy` with `config` (its size already set) on every problem, graded by `reward`."""
    solutions, wall = solve_all(problems, policy, strategy, scorer, seed, chat=chat, batched=batched,
                                on_problem=on_problem, **config)
    compute = sum((s.compute for s in solutions), ComputeRecord())
    compute.seconds = wall
    outcomes = [_outcome(strategy, size, seed, i, float(reward(s.text, p)), s.compute)
                for i, (s, p) in enumerate(zip(solutions, problems))]
    return _row(strategy, size, seed, outcomes, compute)


def run_scaling(config: ScalingConfig, policy, problems: Sequence, reward: Callable[[str, object], float], *,
                extract=None, equivalent=None, scorer: Scorer | None = None) -> list[dict]:
    """Every strategy at every size for every seed; one row per (strategy, size, seed), each with its
    per-problem "outcomes" (see `planner.scaling_report`).

    reward(text, problem) -> float grades the chosen response (the strategies never see it).
    extract / equivalent: the verifier's answer extraction and equality, used for voting.
    scorer: overrides `config.scorer` when given.
    """
    from tqdm.auto import tqdm

    if scorer is None:
        scorer = make_scorer(config.scorer, policy, extract=extract, equivalent=equivalent, rollouts=config.mc_rollouts,
                             max_tokens=config.max_tokens, temperature=config.temperature)
    voting = {k: v for k, v in (("extract", extract), ("equivalent", equivalent)) if v is not None}
    runs = sum(1 if s == "best_of_n" else len(config.sizes_for(s)) for s in config.strategies)
    bar = tqdm(total=runs * len(config.seeds) * len(problems), desc="scaling", unit="problem",
               disable=not config.progress)
    rows = []
    try:
        for strategy in config.strategies:
            sizes = config.sizes_for(strategy)
            for seed in config.seeds:
                bar.set_postfix_str(f"{strategy} seed={seed}")
                if strategy == "best_of_n":
                    fields = config.strategy_config(strategy, sizes[-1], **voting)
                    rows += best_of_n_rows(problems, policy, reward, sizes, seed, scorer=scorer, chat=config.chat,
                                           batched=config.batched, on_problem=bar.update, votes=config.votes,
                                           **fields)
                    continue
                for size in sizes:
                    bar.set_postfix_str(f"{strategy} size={size} seed={seed}")
                    fields = config.strategy_config(strategy, size, **voting)
                    rows.append(strategy_rows(problems, policy, reward, strategy, size, seed, scorer=scorer,
                                              chat=config.chat, batched=config.batched, on_problem=bar.update,
                                              **fields))
    finally:
        bar.close()
    return rows


def load_inputs(config: ScalingConfig):
    """(model folder, task, problem slice), checked before any model is loaded; raises ValueError or
    FileNotFoundError with one clear message."""

    task = load_task(config.task, config.task_path, config.split, **config.task_options)  # the data before the model
    _check_scorer(config.scorer)
    model = resolve_model(config.model)
    wanted = config.offset + (config.limit or 0)
    if config.task == "arithmetic" and config.split == "test" and wanted > len(task.problems):
        from verifiers.arithmetic import held_out_task

        task = held_out_task(wanted)  # generated: the held-out draw goes on past the split's own problems
    return model, task, select_problems(task.problems, config.offset, config.limit)


def run(config: ScalingConfig, out_dir: str | os.PathLike | None = None, inputs=None,
        band: Literal["interval", "minmax", "std"] = "interval") -> list[dict]:
    """Everything `scripts/scaling.py` does: load the task slice and the policy, run, write the outputs
    (when `out_dir` is given; `band`: the plots' band, see `planner.scaling_report.plot_curves`).
    `inputs`: `load_inputs(config)`."""
    from planner.policy import load_policy

    model, task, problems = inputs or load_inputs(config)
    kwargs = {"threads": config.threads}
    if config.backend == "vllm" and config.max_model_len is not None:
        kwargs["max_model_len"] = config.max_model_len
    policy = load_policy(model, backend=config.backend, dtype=config.dtype, seed=config.seeds[0],
                         replicas=config.replicas, **kwargs)
    try:
        rows = run_scaling(config, policy, problems, task.reward, extract=task.verifier.extract,
                           equivalent=task.verifier.equivalent)
    finally:
        policy.close()
    if out_dir is not None:
        write_outputs(rows, out_dir, config, band)
    return rows
