"""The R1 recipe in miniature, end to end on a CPU, in the RLVR setting: what `make demo` runs.

The setting (what a real user has): problems with checkable final answers, the gold step traces of a
fixed budget of problems (`DemoConfig.gold_problems`), and no stronger model. The gold traces are the only
step-level supervision any model sees; the process oracle (`verifiers.arithmetic.step_value`) only grades.

1. Cold-start SFT of a ~1M-parameter Llama on the gold traces, trained to its best validation pass@1
   (early stopping; DeepSeek-R1's first stage, `lab.cold_start.cold_start`). Beside it, in a second
   process, the loop value's starting point: a 35k-parameter LM trained the same way on the same traces.
2. Compute-scaling curves of the cold start (Snell et al. 2024): best-of-N with majority vote, beam
   search and MCTS valued by the value, and s1-style budget forcing.
3. Search-guided RL (`rl.trainer`): MCTS trees from the current policy valued by the loop's own value, a
   generative verifier that trains every iteration on the trees' verified-correct leaves
   (`rl/loop_verifier.py`); the policy trains on the trees (GRPO) and its weights go back into the
   serving engine. The value is graded against the process oracle every `value_grade_every` iterations.
4. Scaling curves again after RL, with the final loop value, and the values (the loop value, its frozen
   start, the policy's step confidence) graded against the process oracle on held-out sibling steps.
5. A report: pass@1 before and after RL, accuracy per strategy and size, each with its 95% interval, the
   generated tokens and total FLOPs (the value's included) each strategy needed to reach
   best-of-N-majority's best accuracy, and the loop value's sibling accuracy per iteration (`report.md`,
   `summary.json`, PNG plots).

`value="teacher"` replaces the loop value with a teacher: a verifier trained to convergence on the gold
traces of 20,000 problems (far beyond the budget), frozen; every output of such a run says "teacher".
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
from verifiers.arithmetic import STEP_DELIMITER, step_value, training_problems
from verifiers.tasks import load_task

__all__ = ["DemoConfig", "run_demo", "TINY", "VALUE_SOURCES"]

VALUE_SOURCES = ("loop", "teacher")
"""What values the demo's searches: "loop", the loop's own value (trained from the gold budget and the
trees' verified leaves), or "teacher", a verifier trained on 20,000 problems' gold traces (labelled so)."""


@dataclass
class DemoConfig:
    """Sizes of every stage. Every stage stops by steps and validation, never by wall time, so a slower
    machine gives the same models, later (each run's own time is in its summary.json)."""

    output_dir: str = "runs/demo"
    """Where the models, curves, metrics and the report go."""
    backend: str = "auto"
    """Serving engine: "vllm", "hf", or "auto" (vLLM when the module imports, else transformers)."""
    difficulty: str = "medium"
    """Arithmetic difficulty (verifiers.arithmetic.DIFFICULTIES)."""
    gold_problems: int = 300
    """The gold budget: problems whose step-by-step gold traces the cold start and the loop value's starting
    LM train on, the only step-level supervision of the run (at most 2,000)."""
    sft_steps: int = 3000
    """Most SFT steps of the cold start and of the value's start; each stops earlier at its best validation
    pass@1 (`lab.cold_start.GOLD_BUDGET_SFT`: after 6 evaluations without a new best)."""
    value: str = "loop"
    """What values the searches (VALUE_SOURCES): "loop" (the default) or "teacher"."""
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
    """Held-out problems whose sibling steps grade the values against the process oracle after RL."""
    value_grade_every: int = 10
    """Iterations between gradings of the loop value during RL (on value_history_problems problems)."""
    value_history_problems: int = 32
    """Held-out problems of each grading during RL (summary: loop_value_history)."""
    rl_iterations: int = 40
    """Search-train iterations."""
    rl_prompts: int = 32
    """Problems per iteration."""
    rl_simulations: int = 8
    """MCTS simulations per tree during RL."""
    rl_candidates: int = 4
    """Candidate steps sampled per MCTS expansion during RL. More candidates let the value find a right
    step the policy rarely writes, which is what RL learns from; each one costs search time and learner
    time (more leaves)."""
    rl_temperature: float = 1.0
    """Sampling temperature of the candidate steps and leaf completions during RL (pass@1 is always
    measured at temperature 1). At 1 the trees come from the policy the update trains. Above 1 the
    search proposes the digits the policy rarely writes more often, and the update weighs each token by
    min(pi / mu, rl_tis_cap), mu the hotter distribution it was drawn from (truncated importance
    sampling, `TrainConfig.algorithm.tis_cap`)."""
    rl_tis_cap: float = 2.0
    """Cap of the importance weights that correct a search at rl_temperature != 1; unused at 1."""
    rl_lr: float = 1e-4
    """Policy learning rate during RL. Adam's first steps move every weight by about lr, and the
    policy gradient of a few hundred rows is noisy, so a small lr with several minibatches per
    iteration is the safe side on this 1M-parameter model."""
    rl_minibatches: int = 4
    """Policy updates per iteration (whole trees per minibatch; divides rl_prompts)."""
    rl_estimator: str = "grpo"
    """Advantage estimator during RL (rl.ADVANTAGE_ESTIMATORS)."""
    loop_value_steps: int = 40
    """AdamW steps of the loop value per iteration (`LoopVerifierConfig.steps`)."""
    loop_value_unlikelihood: float = 0.0
    """Weight of the loop value's unlikelihood term on the steps its trees show went wrong
    (`LoopVerifierConfig.unlikelihood_coef`; 0: SFT on verified leaves alone)."""
    loop_value_min_likelihood: float = 0.0
    """Train the loop value only on the verified responses whose least likely token it already gives at
    least this probability (`LoopVerifierConfig.min_likelihood`; 0: every verified response)."""
    learner_threads: int = 2
    """Torch threads of RL's learner update (`TrainConfig.learner.threads`; the engine waits meanwhile).
    Every other stage, the engine included, runs on one; the cold start and the value's start train side
    by side, one process each. Set 1 when other work shares the cores."""
    dtype: str = "float32"
    """Precision of the cold start's and RL's learner: "float32", or "bfloat16" (autocast with float32
    master weights, rl/runtime.py). With bfloat16 the RL ratio uses the learner's own old
    log-probabilities (the float32 engine's differ from a bfloat16 learner's)."""
    seed: int = 0
    """Seed of the cold start, the value and the RL run."""
    progress: bool = True
    """Progress bars."""

    def __post_init__(self) -> None:
        from rl.runtime import check_precision

        check_precision("DemoConfig", self.dtype, "cpu")
        for name in ("gold_problems", "sft_steps", "rl_iterations", "rl_prompts", "rl_simulations", "rl_candidates",
                     "rl_minibatches", "learner_threads", "value_grade_every", "value_history_problems",
                     "loop_value_steps"):
            check_int("DemoConfig", name, getattr(self, name))  # before any stage runs, not minutes into one
        if self.gold_problems > 2000:
            raise ValueError(f"DemoConfig.gold_problems must be at most 2000 (the RLVR setting's gold budget); "
                             f"got {self.gold_problems}")
        check_number("DemoConfig", "rl_temperature", self.rl_temperature, 0.01)
        check_number("DemoConfig", "rl_tis_cap", self.rl_tis_cap, 1.0)
        check_number("DemoConfig", "loop_value_unlikelihood", self.loop_value_unlikelihood, 0.0)
        check_choice("DemoConfig", "value", self.value, VALUE_SOURCES)


TINY = DemoConfig(gold_problems=200, sft_steps=60, eval_problems=8, pass_samples=2, scaling_problems=4, seeds=[0],
                  best_of_n=[1, 2], beam=[2], mcts=[2], forcing=[16], rl_iterations=2, rl_prompts=2,
                  rl_simulations=2, rl_candidates=2, rl_minibatches=2, value_problems=4, value_grade_every=1,
                  value_history_problems=4, loop_value_steps=2, progress=False)
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


def _train_value_start(config: DemoConfig, folder: Path):
    """The searches' value before RL: the loop value's start (the gold budget, to its best validation
    pass@1) or the teacher (20,000 problems' traces, to a sampled pass@1 of 0.97)."""
    from lab.verifier_lm import train_verifier_lm

    if config.value == "teacher":
        return train_verifier_lm(folder, difficulty=config.difficulty, seed=config.seed, max_minutes=120,
                                 eval_problems=config.eval_problems, progress=False)
    return train_verifier_lm(folder, target_pass=None, num_train=config.gold_problems, difficulty=config.difficulty,
                             max_steps=config.sft_steps, max_minutes=120, eval_problems=config.eval_problems,
                             seed=config.seed, progress=False)


def _run_demo(config: DemoConfig) -> dict:
    from lab.cold_start import GOLD_BUDGET_SFT, cold_start, pass_rates
    from planner.policy import load_policy
    from planner.prm_scorers import load_scorer
    from planner.strategies import MCTSConfig
    from rl.checkpoint import iteration_dir
    from rl.config import (AlgorithmConfig, EngineConfig, LearnerConfig, LoopConfig, LoopVerifierConfig,
                           TrainConfig, TreeSearchConfig, ValueConfig)
    from rl.trainer import LOOP_VALUE, SearchTrainer

    start = time.perf_counter()
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    backend = _backend(config.backend)
    timings: dict[str, float] = {}
    loop = config.value == "loop"

    def lap(name: str, since: float) -> float:
        timings[name] = round(time.perf_counter() - since, 1)
        return time.perf_counter()

    task = load_task("arithmetic", split="test", difficulty=config.difficulty)
    held_out = task.problems[: config.eval_problems]
    scaling_set = task.problems[: config.scaling_problems]
    # RL's problems carry final answers only: their gold traces reach no model
    rl_problems = training_problems(4000, config.difficulty, seed=config.seed + 1)  # none of the test questions

    t = time.perf_counter()
    # The value's start needs nothing from the cold start: it trains beside it, one core each.
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as side:
        value_job = side.submit(_train_value_start, config, out / ("value_start" if loop else "teacher"))
        sft = cold_start(out / "sft", difficulty=config.difficulty, num_train=config.gold_problems,
                         target_pass_range=None, max_minutes=120, eval_problems=config.eval_problems,
                         seed=config.seed, final_eval=False, progress=config.progress,
                         config=replace(GOLD_BUDGET_SFT, max_steps=config.sft_steps, dtype=config.dtype))
        value_start = value_job.result()
    t = lap("cold_start_and_value_start", t)

    # one engine for the curves and RL, with TrainConfig's one thread, so RL starts no other
    policy = load_policy(sft.model_dir, backend=backend, seed=config.seed, threads=1)
    start_value = load_scorer(value_start.model_dir, decode=policy.decode)

    def pass_at_1(engine) -> dict:
        return pass_rates(engine, held_out, task.reward, n=config.pass_samples, max_tokens=64, seed=config.seed)

    before = pass_at_1(policy)
    rows_before = _scaling(policy, scaling_set, task, config, start_value, "before_rl", out)
    t = lap("scaling_before_rl", t)  # (the engine's start is in it)

    search = MCTSConfig(num_simulations=config.rl_simulations, num_candidates=config.rl_candidates,
                        step_delimiter=STEP_DELIMITER, max_step_tokens=16, max_steps=8,
                        temperature=config.rl_temperature)
    loop_value = LoopVerifierConfig(model=str(value_start.model_dir), steps=config.loop_value_steps,
                                    unlikelihood_coef=config.loop_value_unlikelihood,
                                    min_likelihood=config.loop_value_min_likelihood) if loop else LoopVerifierConfig()
    train_config = TrainConfig(
        model=str(sft.model_dir),
        loop=LoopConfig(output_dir=str(out / "rl"), iterations=config.rl_iterations,
                        prompts_per_iteration=config.rl_prompts, seed=config.seed),
        engine=EngineConfig(backend=backend),
        search=TreeSearchConfig(strategy="mcts", mcts=search, scorer=None if loop else str(value_start.model_dir)),
        algorithm=AlgorithmConfig(estimator=config.rl_estimator,
                                  tis_cap=config.rl_tis_cap if config.rl_temperature != 1.0 else None,
                                  old_logprobs="engine" if config.dtype == "float32" else "learner"),
        learner=LearnerConfig(lr=config.rl_lr, minibatches=config.rl_minibatches, threads=config.learner_threads,
                              dtype=config.dtype, device="cpu"),
        value=ValueConfig(loop_verifier=loop_value))
    trainer = SearchTrainer(train_config, rl_problems, task.reward, extract=task.verifier.extract, engine=policy)

    def value_now(trainer):
        return trainer.loop_verifier.scorer() if loop else start_value

    history_problems = held_out[: config.value_history_problems]
    value_history = [{"iteration": 0, **_grade_values(policy, {"value": start_value}, history_problems, task,
                                                      config)["value"]}]

    def grade_during_rl(trainer, metrics) -> None:
        if trainer.iteration % config.value_grade_every == 0 or trainer.iteration == config.rl_iterations:
            graded = _grade_values(trainer.engine, {"value": value_now(trainer)}, history_problems, task, config)
            value_history.append({"iteration": trainer.iteration, **graded["value"]})

    history = trainer.run(progress=config.progress, on_iteration=grade_during_rl)
    t = lap("rl", t)

    final_value = value_now(trainer)
    saved = iteration_dir(train_config.loop.output_dir, trainer.iteration)  # the last checkpoint: policy, loop value
    after = pass_at_1(trainer.engine)
    graded = {"value": final_value, **({"value_start": start_value} if loop else {})}
    values = _grade_values(trainer.engine, graded, held_out[: config.value_problems], task, config)
    rows_after = _scaling(trainer.engine, scaling_set, task, config, final_value, "after_rl", out)
    trainer.engine.close()
    lap("scaling_after_rl", t)  # (the value grading is in it)

    name = "loop_value" if loop else "teacher"
    summary = {
        "backend": backend, "config": asdict(config), "seconds": round(time.perf_counter() - start, 1),
        "stage_seconds": timings, "value_source": config.value, "gold_traces": config.gold_problems,
        "policy_dir": str(saved / "policy"),
        "loop_value_dir": str(saved / LOOP_VALUE) if loop else None,
        "teacher_dir": None if loop else str(value_start.model_dir),
        "cold_start": {"steps": sft.steps, "best_step": sft.best_step, "seconds": round(sft.seconds, 1),
                       "curve": sft.curve},
        "value_start": {"steps": value_start.steps, "best_step": value_start.best_step,
                        "seconds": round(value_start.seconds, 1), "curve": value_start.curve,
                        "parameters": start_value.num_parameters},
        "pass@1_before_rl": before["pass@1"], "pass@1_after_rl": after["pass@1"],
        "pass@1_interval_before_rl": [before["pass@1_low"], before["pass@1_high"]],
        "pass@1_interval_after_rl": [after["pass@1_low"], after["pass@1_high"]],
        "rl_gain_points": round(100 * (after["pass@1"] - before["pass@1"]), 1),
        **{f"{label}_{key}": values[graded_name][key]
           for graded_name, label in (("value", name), ("value_start", "value_start"), ("confidence", "confidence"))
           if graded_name in values for key in ("sibling_accuracy", "sibling_accuracy_interval", "step_auc")},
        f"{name}_history": [{k: row[k] for k in ("iteration", "sibling_accuracy", "sibling_accuracy_interval",
                                                  "step_auc")} for row in value_history],
        f"pass@{config.pass_samples}_before_rl": before[f"pass@{config.pass_samples}"],
        f"pass@{config.pass_samples}_after_rl": after[f"pass@{config.pass_samples}"],
        "rl_history": [{k: m[k] for k in ("iteration", "reward_mean", "pass_rate", "loop_value_loss",
                                          "loop_value_correct", "seconds") if k in m} for m in history],
        "scaling_before_rl": _accuracy_table(rows_before), "scaling_after_rl": _accuracy_table(rows_after),
        "compute_to_best_of_n_best_before_rl": _compute_to_bon_best(rows_before),
        "compute_to_best_of_n_best_after_rl": _compute_to_bon_best(rows_after),
    }
    summary["targets"] = _targets(summary)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    write_report(summary, out)
    return summary


def _grade_values(policy, scorers: dict, problems, task, config: DemoConfig) -> dict:
    """`scorers` and the policy's own step confidence graded against the process oracle on the same held-out
    sibling sets (planner/value_eval.py): the oracle grades, it guides nothing. {name: grade row}."""
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
    """Issue 35's targets that one demo run measures, stated as met or not with the numbers (the savings are
    best-of-N-majority's cost at its best accuracy over the value-guided search's cost to reach it)."""
    after = summary["compute_to_best_of_n_best_after_rl"]["strategies"]
    best = lambda key: max((after[s][key] for s in ("beam", "mcts") if s in after and after[s][key]),  # noqa: E731
                           default=None)
    value = "loop_value" if summary["value_source"] == "loop" else "teacher"
    accuracy, confidence = summary.get(f"{value}_sibling_accuracy"), summary.get("confidence_sibling_accuracy")
    low = (summary.get(f"{value}_sibling_accuracy_interval") or [None])[0]
    high = (summary.get("confidence_sibling_accuracy_interval") or [None, None])[1]
    return {
        "rl_gain_at_least_10_points": summary["rl_gain_points"] >= 10,
        "value_search_saving": best("fewer_tokens_than_best_of_n"),
        "value_search_flops_saving": best("fewer_flops_than_best_of_n"),
        "value_search_3x_fewer_flops": bool(best("fewer_flops_than_best_of_n")
                                            and best("fewer_flops_than_best_of_n") >= 3),
        "value_sibling_accuracy_at_least_0.90": bool(accuracy is not None and accuracy >= 0.90),
        "value_beats_confidence_by_0.05_separated": bool(
            accuracy is not None and confidence is not None and accuracy >= confidence + 0.05
            and low is not None and high is not None and low > high),
    }
