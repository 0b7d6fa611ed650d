"""The R1 recipe in miniature, end to end on a CPU: what `make demo` runs.

1. Cold-start SFT of a ~1M-parameter Llama on generated arithmetic traces, stopped on purpose at
   partial skill (DeepSeek-R1's first stage; `lab.cold_start.cold_start`).
2. The value that guides search: a generative verifier, a separate 35k-parameter LM trained to
   convergence on the same gold traces (`lab.verifier_lm`; a value head on the policy's trunk ranks
   sibling steps no better than the policy's own confidence, docs/results.md), in a second process
   beside the cold start.
3. Compute-scaling curves of the cold start (Snell et al. 2024): best-of-N with majority vote, beam
   search and MCTS valued by the verifier, and s1-style budget forcing.
4. Search-guided RL: MCTS trees from the current policy, valued by the verifier, the policy and the
   value critic trained on them, the new weights pushed into the serving engine every iteration
   (`rl.trainer`).
5. Scaling curves again after RL, and the values (verifier, the loop's critic, the policy's step
   confidence) graded against the process oracle on held-out sibling steps.
6. A report with the numbers: pass@1 before and after RL, accuracy per strategy and size before
   and after, each with its 95% interval, and the generated tokens and total FLOPs (the verifier's
   included) each strategy needed to reach best-of-N-majority's best accuracy (`report.md`,
   `summary.json`, PNG plots).
"""

from __future__ import annotations

import json
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from lab.demo_report import write_report
from planner.scaling_report import curve, summarize, write_outputs
from planner.strategies.common import check_choice, check_int, check_number
from planner.value_eval import grade_scorers
from verifiers.arithmetic import STEP_DELIMITER, arithmetic_task, step_value
from verifiers.tasks import load_task

__all__ = ["DemoConfig", "run_demo", "TINY", "VALUES"]

VALUES = ("verifier", "critic", "confidence")
"""The values the demo grades against the process oracle after RL: the generative verifier that guides its
searches, the critic the loop trains on the trees' values, and the policy's own step confidence."""


@dataclass
class DemoConfig:
    """Sizes of every stage, chosen to finish within 15 minutes on a 2-core CPU (each run's own time
    is in its summary.json)."""

    output_dir: str = "runs/demo"
    """Where the models, curves, metrics and the report go."""
    backend: str = "auto"
    """Serving engine: "vllm", "hf", or "auto" (vLLM when the module imports, else transformers)."""
    difficulty: str = "medium"
    """Arithmetic difficulty (verifiers.arithmetic.DIFFICULTIES)."""
    sft_minutes: float = 4.0
    """Most wall minutes of the cold start (it stops earlier once sampled pass@1 reaches sft_target)."""
    sft_target: float = 0.3
    """Sampled pass@1 at which the cold start stops (the issue's window is 0.3-0.6)."""
    eval_problems: int = 128
    """Held-out problems for pass@1 (sampled, temperature 1)."""
    pass_samples: int = 4
    """Samples per held-out problem for pass@1."""
    scaling_problems: int = 48
    """Held-out problems of each scaling curve."""
    seeds: list[int] = field(default_factory=lambda: [0, 1])
    """Seeds of each scaling point (mean and band over them)."""
    best_of_n: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16])
    """Best-of-N sizes (N)."""
    beam: list[int] = field(default_factory=lambda: [2, 4])
    """Beam sizes (number of beams)."""
    mcts: list[int] = field(default_factory=lambda: [4, 8])
    """MCTS sizes (simulations)."""
    forcing: list[int] = field(default_factory=lambda: [24, 48])
    """Budget-forcing sizes (thinking-token budgets)."""
    value_problems: int = 64
    """Held-out problems whose sibling steps grade the verifier, the trained critic and the policy's step
    confidence against the process oracle (summary: verifier_sibling_accuracy, critic_step_auc, ...)."""
    verifier_minutes: float = 3.0
    """Most wall minutes of the verifier's training (it stops earlier at verifier_target; about 1 minute)."""
    verifier_target: float = 0.97
    """Sampled pass@1 on the held-out problems at which the verifier's training stops."""
    rl_iterations: int = 40
    """Search-train iterations (the demo's run time is in its summary.json, `stage_seconds`; how the gain
    grows with them: docs/results.md)."""
    rl_prompts: int = 32
    """Problems per iteration."""
    rl_simulations: int = 8
    """MCTS simulations per tree during RL."""
    rl_candidates: int = 4
    """Candidate steps sampled per MCTS expansion during RL. More candidates let the verifier find a right
    step the policy rarely writes, which is what RL learns from; each one costs search time and learner
    time (more leaves)."""
    rl_temperature: float = 1.0
    """Sampling temperature of the candidate steps and leaf completions during RL (pass@1 is always
    measured at temperature 1). At 1 the trees come from the policy the update trains. Above 1 the
    search proposes the digits the policy rarely writes more often, and the update weighs each token by
    min(pi / mu, rl_tis_cap), mu the hotter distribution it was drawn from (truncated importance
    sampling, `TrainConfig.tis_cap`)."""
    rl_tis_cap: float = 2.0
    """Cap of the importance weights that correct a search at rl_temperature != 1; unused at 1."""
    rl_lr: float = 1e-4
    """Policy learning rate during RL. Adam's first steps move every weight by about lr, and the
    policy gradient of a few hundred rows is noisy, so a small lr with several minibatches per
    iteration is the safe side on this 1M-parameter model."""
    rl_minibatches: int = 4
    """Policy and critic updates per iteration (whole trees per minibatch; divides rl_prompts)."""
    rl_estimator: str = "grpo"
    """Advantage estimator during RL (rl.ADVANTAGE_ESTIMATORS)."""
    rl_critic: str = "verifier"
    """Trunk of the value critic the loop trains on the trees' values (`CriticConfig.model`): "verifier" copies
    the 35k-parameter verifier's (the same vocabulary), "policy" the 1.06M-parameter policy's
    (`CriticConfig`'s default). The searches are valued by the verifier either way and GRPO reads no critic, so
    this changes the graded critic and the time only: a learner update with the verifier's trunk took
    0.48x as long as with the policy's, 5.09 s against 10.52 s (docs/benchmarks.md, "Critic trunk")."""
    learner_threads: int = 2
    """Torch threads of RL's learner update (`TrainConfig.learner_threads`; the engine waits meanwhile).
    Every other stage, the engine included, runs on one; the cold start and the verifier train side by
    side, one process each. 2 use both cores of a 2-core machine: 1.73x faster updates
    (docs/benchmarks.md, "Learner threads"). Set 1 when other work shares the cores."""
    dtype: str = "float32"
    """Precision of the cold start's and RL's learner: "float32", or "bfloat16" (autocast with float32
    master weights, rl/runtime.py). With bfloat16 the RL ratio uses the learner's own old
    log-probabilities (the float32 engine's differ from a bfloat16 learner's)."""
    seed: int = 0
    """Seed of the cold start and the RL run."""
    progress: bool = True
    """Progress bars."""

    def __post_init__(self) -> None:
        from rl.runtime import check_precision

        check_precision("DemoConfig", self.dtype, "cpu")
        for name in ("rl_iterations", "rl_prompts", "rl_simulations", "rl_candidates", "rl_minibatches",
                     "learner_threads"):
            check_int("DemoConfig", name, getattr(self, name))  # before any stage runs, not minutes into one
        check_number("DemoConfig", "rl_temperature", self.rl_temperature, 0.01)
        check_number("DemoConfig", "rl_tis_cap", self.rl_tis_cap, 1.0)
        check_choice("DemoConfig", "rl_critic", self.rl_critic, ("verifier", "policy"))


TINY = DemoConfig(sft_minutes=0.4, sft_target=0.05, eval_problems=8, pass_samples=2, scaling_problems=4, seeds=[0],
                  best_of_n=[1, 2], beam=[2], mcts=[2], forcing=[16], verifier_minutes=0.05, rl_iterations=2,
                  rl_prompts=2, rl_simulations=2, rl_candidates=2, rl_minibatches=2, value_problems=4, progress=False)
"""The smoke-test size: every stage and artifact, in well under two minutes."""


def _backend(name: str) -> str:
    if name != "auto":
        return name
    try:
        import vllm  # noqa: F401
        return "vllm"
    except ImportError:
        return "hf"


def _scaling(policy, problems, task, config: DemoConfig, scorer, phase: str, out: Path) -> list[dict]:
    """Best-of-N (majority, no scorer), beam and MCTS (with `scorer`) and budget forcing."""
    from planner.scaling import ScalingConfig, run_scaling

    steps = {"step_delimiter": STEP_DELIMITER, "max_step_tokens": 16, "max_steps": 8}
    common = dict(seeds=config.seeds, max_tokens=64, temperature=1.0, progress=config.progress, batched=True)
    plain = ScalingConfig(strategies=["best_of_n", "budget_forcing"],
                          sizes={"best_of_n": config.best_of_n, "budget_forcing": config.forcing},
                          options={"budget_forcing": {"answer_prefix": "", "max_answer_tokens": 8}}, **common)
    searched = ScalingConfig(strategies=["beam", "mcts"], sizes={"beam": config.beam, "mcts": config.mcts},
                             options={"beam": steps, "mcts": {**steps, "num_candidates": 2}}, **common)
    voting = {"extract": task.verifier.extract, "equivalent": task.verifier.equivalent}
    rows = run_scaling(plain, policy, problems, task.reward, **voting)
    rows += run_scaling(searched, policy, problems, task.reward, scorer=scorer, **voting)
    for row in rows:
        row["phase"] = phase
    write_outputs(rows, out / f"scaling_{phase}")
    return rows


def _compute_to_bon_best(rows: list[dict]) -> dict:
    """Per strategy: generated tokens and total FLOPs (policy and scorer) per problem to reach
    best-of-N-majority's best accuracy, and the savings against best-of-N's own cost there (from
    `planner.scaling_report.summarize`, which computes both)."""

    summary = summarize(rows)
    tokens, flops = summary["tokens_to_reach_best_of_n_best"], summary["flops_to_reach_best_of_n_best"]
    ratio = lambda base, x: base / x if base and x else None  # noqa: E731
    return {"best_of_n_best_accuracy": summary["best_of_n_best_accuracy"],
            "best_of_n_tokens_at_best": tokens["best_of_n"], "best_of_n_flops_at_best": flops["best_of_n"],
            "strategies": {s: {"tokens_per_problem": tokens[s], "flops_per_problem": flops[s],
                               "fewer_tokens_than_best_of_n": ratio(tokens["best_of_n"], tokens[s]),
                               "fewer_flops_than_best_of_n": ratio(flops["best_of_n"], flops[s])}
                           for s in tokens}}


def run_demo(config: DemoConfig = DemoConfig()) -> dict:
    """Run every stage on one torch thread (RL's learner update on `config.learner_threads`); returns the
    summary written to `<output_dir>/summary.json`."""
    from rl.runtime import torch_settings

    with torch_settings(threads=1):
        return _run_demo(config)


def _run_demo(config: DemoConfig) -> dict:
    from planner.policy import load_policy
    from planner.prm_scorers import load_scorer
    from planner.strategies import MCTSConfig
    from rl.config import (AlgorithmConfig, CriticConfig, EngineConfig, LearnerConfig, LoopConfig, TrainConfig,
                           TreeSearchConfig, ValueConfig)
    from lab.cold_start import COLD_START_SFT, cold_start, pass_rates
    from rl.trainer import SearchTrainer
    from lab.verifier_lm import train_verifier_lm

    start = time.perf_counter()
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    backend = _backend(config.backend)
    timings: dict[str, float] = {}

    def lap(name: str, since: float) -> float:
        timings[name] = round(time.perf_counter() - since, 1)
        return time.perf_counter()

    task = load_task("arithmetic", split="test")
    held_out = task.problems[: config.eval_problems]
    scaling_set = task.problems[: config.scaling_problems]
    train_problems = arithmetic_task(4000, config.difficulty, seed=config.seed + 1)

    t = time.perf_counter()
    # The verifier's training needs nothing from the cold start: it runs beside it, one core each.
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as side:
        verifier_job = side.submit(train_verifier_lm, out / "verifier", target_pass=config.verifier_target,
                                   max_minutes=config.verifier_minutes, eval_problems=config.eval_problems,
                                   seed=config.seed, progress=False)
        sft = cold_start(out / "sft", difficulty=config.difficulty, target_pass_range=(config.sft_target, 0.6),
                         max_minutes=config.sft_minutes, seed=config.seed, final_eval=False,
                         progress=config.progress, config=replace(COLD_START_SFT, dtype=config.dtype))
        verifier = verifier_job.result()
    t = lap("cold_start_and_verifier", t)

    # one engine for the curves and RL, with TrainConfig's one thread, so RL starts no other
    policy = load_policy(sft.model_dir, backend=backend, seed=config.seed, threads=1)
    value = load_scorer(verifier.model_dir, decode=policy.decode)
    max_tokens = 64

    def pass_at_1(engine) -> dict:
        return pass_rates(engine, held_out, task.reward, n=config.pass_samples, max_tokens=max_tokens,
                          seed=config.seed)

    before = pass_at_1(policy)
    rows_before = _scaling(policy, scaling_set, task, config, value, "before_rl", out)
    t = lap("scaling_before_rl", t)  # (the engine's start is in it)

    search = MCTSConfig(num_simulations=config.rl_simulations, num_candidates=config.rl_candidates,
                        step_delimiter=STEP_DELIMITER, max_step_tokens=16, max_steps=8,
                        temperature=config.rl_temperature)
    train_config = TrainConfig(
        model=str(sft.model_dir),
        loop=LoopConfig(output_dir=str(out / "rl"), iterations=config.rl_iterations,
                        prompts_per_iteration=config.rl_prompts, seed=config.seed),
        engine=EngineConfig(backend=backend),
        search=TreeSearchConfig(strategy="mcts", mcts=search, scorer=str(verifier.model_dir)),
        algorithm=AlgorithmConfig(estimator=config.rl_estimator,
                                  tis_cap=config.rl_tis_cap if config.rl_temperature != 1.0 else None,
                                  old_logprobs="engine" if config.dtype == "float32" else "learner"),
        learner=LearnerConfig(lr=config.rl_lr, minibatches=config.rl_minibatches, threads=config.learner_threads,
                              dtype=config.dtype, device="cpu"),
        value=ValueConfig(critic=CriticConfig(enabled=True, lr=1e-3,
                                              model=str(verifier.model_dir) if config.rl_critic == "verifier" else "")))
    trainer = SearchTrainer(train_config, train_problems, task.reward, extract=task.verifier.extract, engine=policy)
    history = trainer.run(progress=config.progress)
    t = lap("rl", t)

    after = pass_at_1(trainer.engine)
    values = _grade_values(trainer.engine, {"verifier": value, "critic": trainer.learner.critic},
                           held_out[: config.value_problems], task, config)
    rows_after = _scaling(trainer.engine, scaling_set, task, config, value, "after_rl", out)
    trainer.engine.close()
    lap("scaling_after_rl", t)  # (the value grading is in it)

    summary = {
        "backend": backend, "config": asdict(config), "seconds": round(time.perf_counter() - start, 1),
        "stage_seconds": timings,
        "cold_start": {"steps": sft.steps, "seconds": round(sft.seconds, 1), "curve": sft.curve},
        "verifier": {"steps": verifier.steps, "seconds": round(verifier.seconds, 1), "curve": verifier.curve,
                     "parameters": value.num_parameters},
        "pass@1_before_rl": before["pass@1"], "pass@1_after_rl": after["pass@1"],
        "pass@1_interval_before_rl": [before["pass@1_low"], before["pass@1_high"]],
        "pass@1_interval_after_rl": [after["pass@1_low"], after["pass@1_high"]],
        "rl_gain_points": round(100 * (after["pass@1"] - before["pass@1"]), 1),
        **{f"{name}_{key}": values[name][key] for name in VALUES
           for key in ("sibling_accuracy", "sibling_accuracy_interval", "step_auc")},
        f"pass@{config.pass_samples}_before_rl": before[f"pass@{config.pass_samples}"],
        f"pass@{config.pass_samples}_after_rl": after[f"pass@{config.pass_samples}"],
        "rl_history": [{k: m[k] for k in ("iteration", "reward_mean", "pass_rate", "critic_heldout_mse", "seconds")
                        if k in m} for m in history],
        "scaling_before_rl": _accuracy_table(rows_before), "scaling_after_rl": _accuracy_table(rows_after),
        "compute_to_best_of_n_best_before_rl": _compute_to_bon_best(rows_before),
        "compute_to_best_of_n_best_after_rl": _compute_to_bon_best(rows_after),
    }
    summary["targets"] = _targets(summary)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    write_report(summary, out)
    return summary


def _grade_values(policy, scorers: dict, problems, task, config: DemoConfig) -> dict:
    """`scorers` (the verifier, the trained critic) and the policy's own step confidence graded against the
    process oracle on the same held-out sibling sets (planner/value_eval.py): the oracle grades, it guides
    nothing."""
    from planner.scorers import ConfidenceScorer

    rows = grade_scorers(policy, problems, {**scorers, "confidence": ConfidenceScorer()}, task, step_value,
                         seeds=[config.seed], candidates=4, samples=4, step_delimiter=STEP_DELIMITER,
                         max_step_tokens=16, max_steps=8)
    return {row["scorer"]: row for row in rows}


def _accuracy_table(rows: list[dict]) -> dict:
    """{strategy: {size: accuracy (seed mean) with its 95% interval over problems, and tokens and FLOPs
    per problem (seed means; FLOPs include the scorer's)}}."""

    return {s: {str(p["size"]): {"accuracy": p["accuracy_mean"], "accuracy_interval": [p["accuracy_low"],
                                                                                         p["accuracy_high"]],
                                 "tokens_per_problem": p["generated_tokens_per_problem_mean"],
                                 "flops_per_problem": p["flops_per_problem_mean"]}
                for p in curve(rows, s)}
            for s in dict.fromkeys(r["strategy"] for r in rows)}


def _targets(summary: dict) -> dict:
    """The issue's targets, stated as met or not with the measured numbers: the savings are
    best-of-N-majority's cost at its best accuracy over the cost of the search guided by the learned value
    (the verifier; the keys keep the issue's names) to reach it."""
    after = summary["compute_to_best_of_n_best_after_rl"]["strategies"]
    best = lambda key: max((after[s][key] for s in ("beam", "mcts") if s in after and after[s][key]),  # noqa: E731
                           default=None)
    return {
        "rl_gain_at_least_20_points": summary["rl_gain_points"] >= 20,
        "critic_search_saving": best("fewer_tokens_than_best_of_n"),
        "critic_search_flops_saving": best("fewer_flops_than_best_of_n"),
        "critic_search_4x_fewer_flops": bool(best("fewer_flops_than_best_of_n")
                                             and best("fewer_flops_than_best_of_n") >= 4),
    }
