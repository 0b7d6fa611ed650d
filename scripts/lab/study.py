"""The value study on the embedded arithmetic task: which value ranks the steps search compares, whether
search guided by it beats sampling at equal FLOPs, and whether budget forcing buys accuracy.

Stages (each writes its CSV under `output_dir`; `scripts/lab/study_report.py` turns them into plots and the
"Values that guide search" section of docs/results.md):

1. **policies**: the cold start (`lab.cold_start`, or `policy` when given) and a second cold start whose
   traces are partly s1-style self-corrections (a slip, "Wait", the correct pass).
2. **a process reward model** (`rl/prm.py`) trained on sibling steps the cold start proposes for
   training problems (never the held-out ones), labelled by Monte-Carlo rollouts checked against the
   reference (Math-Shepherd's soft labels, `prm_labels="mc"`) or by the process oracle (`"oracle"`:
   the labels' noise-free limit).
3. **a generative verifier** (`scripts/lab/verifier_lm.py`): a separate small LM trained to convergence on the
   gold traces of training problems (or `verifier` when given).
4. **values graded** (`planner/value_eval.py`) on held-out sibling sets, several sampling seeds: random,
   the policy's step confidence, Monte-Carlo-k, the PRM, the verifier, and a trained critic when one is
   given.
5. **search at equal FLOPs** (`planner/scaling.py`): best-of-N majority against beam guided by the
   step confidence, by the PRM and by the verifier, accuracy against generated tokens and against FLOPs
   (the PRM's and the verifier's forward passes included).
6. **budget forcing** at several thinking budgets, on both cold starts.

The process oracle grades and labels training data only; no search at test time reads it.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lab.study_report import write_values
from planner.paths import check_model_dir
from planner.scaling_report import summarize, write_outputs
from planner.strategies.common import check_int, check_number
from planner.value_eval import collect_cases, grade_scorers
from verifiers.arithmetic import STEP_DELIMITER, arithmetic_task, held_out_task, step_value

__all__ = ["StudyConfig", "run_study", "TINY_STUDY"]


@dataclass
class StudyConfig:
    """Sizes of every stage (the defaults fit in about an hour on 2 CPU cores)."""

    output_dir: str = "runs/study"
    """Where models, CSVs, plots and summary.json go."""
    policy: str | None = None
    """A cold-start model folder to study (e.g. a demo's `sft/`, or its RL policy `rl/checkpoint/policy`);
    None: trained here."""
    verifier: str | None = None
    """A generative verifier folder (`lab.verifier_lm`, e.g. a demo's `verifier/`); None: trained here."""
    verifier_minutes: float = 3.0
    """Most minutes of the verifier's training here (it stops at a held-out pass@1 of 0.97; about 1 min)."""
    critic: str | None = None
    """A trained ValueCritic folder to grade beside the others (e.g. a demo's `rl/checkpoint/critic`)."""
    critic_policy: str | None = None
    """The policy the critic was trained with (a demo's `rl/checkpoint/policy`); its steps are the ones
    the critic is graded on. None: the studied policy."""
    backend: str = "vllm"
    """The engine: "vllm" or "hf"."""
    sft_minutes: float = 8.0
    """Most minutes of each cold start trained here; each stops earlier, at a sampled pass@1 of 0.3 (about
    2 minutes plain, 4 with self-correction traces on an idle core), so that the clock does not decide
    how skilled a cold start is on a busy machine."""
    self_correction: float = 0.5
    """Share of self-correction traces in the second cold start's data. At 0.3 some cold-start seeds
    learned the redo badly (accuracy fell as forced "Wait"s grew); at 0.5 each of four seeds rose over
    at least four budgets (16 to 96 thinking tokens)."""
    problems: int = 256
    """Held-out problems for the value grading, the search curves and budget forcing."""
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    """Sampling seeds of the value grading and of every curve point."""
    train_problems: int = 400
    """Training problems whose sibling steps train the PRM."""
    prm_labels: str = "mc"
    """"mc": Monte-Carlo labels (fraction of `mc_rollouts` rollouts reaching the reference answer);
    "oracle": the process oracle's labels."""
    prm_epochs: int = 4
    """PRM training epochs."""
    mc_rollouts: int = 4
    """Rollouts of the Monte-Carlo scorer graded as a value (and of the MC labels)."""
    best_of_n: list[int] = field(default_factory=lambda: [1, 4, 8, 16])
    """Best-of-N sizes (majority vote)."""
    beam: list[int] = field(default_factory=lambda: [2, 4, 8])
    """Beam sizes (number of beams) for each guided beam curve."""
    forcing: list[int] = field(default_factory=lambda: [16, 32, 64, 96, 128])
    """Budget forcing's thinking budgets (tokens)."""
    seed: int = 0
    """Seed of the cold starts and the PRM."""
    progress: bool = True
    """Progress bars."""

    def __post_init__(self) -> None:
        if self.prm_labels not in ("mc", "oracle"):
            raise ValueError(f"StudyConfig.prm_labels must be 'mc' or 'oracle'; got {self.prm_labels!r}")
        if self.backend not in ("vllm", "hf"):
            raise ValueError(f"StudyConfig.backend must be 'vllm' or 'hf'; got {self.backend!r}")
        for name in ("problems", "train_problems", "prm_epochs", "mc_rollouts"):
            check_int("StudyConfig", name, getattr(self, name))
        for name in ("sft_minutes", "verifier_minutes"):
            check_number("StudyConfig", name, getattr(self, name), 0.0)
        check_number("StudyConfig", "self_correction", self.self_correction, 0.0, 1.0)
        for name in ("seeds", "best_of_n", "beam", "forcing"):
            values = getattr(self, name)
            if not values or any(not isinstance(v, int) or v < (0 if name == "seeds" else 1) for v in values):
                raise ValueError(f"StudyConfig.{name} must be a non-empty list of integers >= "
                                 f"{0 if name == 'seeds' else 1}; got {values!r}")
        for name in ("policy", "verifier", "critic", "critic_policy"):
            if getattr(self, name) is not None:
                check_model_dir(getattr(self, name), f"StudyConfig.{name}")


TINY_STUDY = StudyConfig(sft_minutes=0.3, verifier_minutes=0.05, problems=8, seeds=[0], train_problems=8,
                         prm_epochs=1, mc_rollouts=2, best_of_n=[1, 2], beam=[2], forcing=[16, 32], progress=False,
                         backend="hf")
"""Every stage at a smoke-test size."""

STEPS = {"max_step_tokens": 16, "max_steps": 8}
"""The demo's step settings (steps end at the task's delimiter)."""


def mc_labels(policy, cases, problems, task, rollouts: int, seed: int) -> None:
    """Replace the oracle labels of `cases` by Monte-Carlo labels: the fraction of `rollouts` completions
    from each prefix whose response verifies against the reference (Math-Shepherd's soft label; a finished
    prefix is graded as it is). One engine call for every prefix."""
    from planner.policy import SamplingParams

    groups = iter(policy.generate([p for s in cases.sets for p, done in zip(s.prefixes, s.finished) if not done],
                                  SamplingParams(n=rollouts, temperature=1.0, max_tokens=64, seed=seed)))
    for s in cases.sets:  # the groups come back in the order the open prefixes were sent
        problem, start = problems[s.problem], cases.prompt_lengths[s.problem]
        labels = []
        for prefix, done in zip(s.prefixes, s.finished):
            text = policy.tokenizer.decode(prefix[start:])
            if done:
                labels.append(float(task.reward(text, problem) >= 0.5))
            else:
                samples = next(groups)
                labels.append(sum(task.reward(text + x.text, problem) >= 0.5 for x in samples) / len(samples))
        s.labels = labels


def train_prm(policy, policy_dir: Path, task, config: StudyConfig, out: Path):
    """A PRM on the policy's sibling steps for training problems; saved to out/prm."""
    from rl.prm import PRMConfig, ProcessRewardModel, StepExample

    problems = arithmetic_task(config.train_problems, seed=20_000 + config.seed)  # neither SFT's nor held-out
    cases = collect_cases(policy, problems, step_value, task.reward, task.verifier.extract, candidates=4, samples=1,
                          step_delimiter=STEP_DELIMITER, seed=config.seed, **STEPS)
    if config.prm_labels == "mc":
        mc_labels(policy, cases, problems, task, config.mc_rollouts, config.seed)
    examples = [StepExample(p, lp, y, k) for k, s in enumerate(cases.sets)
                for p, lp, y in zip(s.prefixes, s.step_logprobs, s.labels)]
    prm = ProcessRewardModel.from_policy(policy_dir, PRMConfig(epochs=config.prm_epochs, seed=config.seed))
    start = time.perf_counter()
    history = prm.fit(examples)
    prm.save_pretrained(out / "prm")
    return prm, {"examples": len(examples), "label_mean": sum(e.label for e in examples) / len(examples),
                 "loss_history": history, "seconds": round(time.perf_counter() - start, 1)}


def search_curves(policy, scorers: dict, task, config: StudyConfig) -> list[dict]:
    """Best-of-N majority, then beam under each scorer (its curve named beam_<scorer>)."""
    from planner.scaling import ScalingConfig, run_scaling

    common = dict(seeds=config.seeds, max_tokens=64, temperature=1.0, progress=config.progress, batched=True)
    voting = {"extract": task.verifier.extract, "equivalent": task.verifier.equivalent}
    rows = run_scaling(ScalingConfig(strategies=["best_of_n"], sizes={"best_of_n": config.best_of_n}, **common),
                       policy, task.problems, task.reward, **voting)
    for name, scorer in scorers.items():
        beam = ScalingConfig(strategies=["beam"], sizes={"beam": config.beam},
                             options={"beam": {"step_delimiter": STEP_DELIMITER, **STEPS}}, **common)
        for row in run_scaling(beam, policy, task.problems, task.reward, scorer=scorer, **voting):
            rows.append(_named(row, f"beam_{name}"))
    return rows


def _named(row: dict, curve: str) -> dict:
    """`row` as a point of the curve `curve`, its per-problem outcomes too (problems.csv names the curve)."""
    return {**row, "strategy": curve, "outcomes": [{**o, "strategy": curve} for o in row["outcomes"]]}


def forcing_curves(policies: dict, task, config: StudyConfig) -> list[dict]:
    """Budget forcing at every thinking budget, per cold start (curve budget_forcing_<name>)."""
    from planner.policy import load_policy
    from planner.scaling import ScalingConfig, run_scaling

    forcing = ScalingConfig(strategies=["budget_forcing"], sizes={"budget_forcing": config.forcing}, seeds=config.seeds,
                            max_tokens=8, temperature=1.0, progress=config.progress, batched=True,
                            options={"budget_forcing": {"answer_prefix": ""}})
    rows = []
    for name, folder in policies.items():
        policy = load_policy(folder, backend=config.backend, seed=config.seed)
        for row in run_scaling(forcing, policy, task.problems, task.reward, extract=task.verifier.extract,
                               equivalent=task.verifier.equivalent):
            rows.append(_named(row, f"budget_forcing_{name}"))
        policy.close()
    return rows


def run_study(config: StudyConfig = StudyConfig()) -> dict:
    """Every stage; returns the summary written to `<output_dir>/summary.json`."""
    from planner.policy import load_policy
    from planner.scorers import ConfidenceScorer, RandomScorer
    from planner.monte_carlo import MonteCarloScorer
    from planner.prm_scorers import load_scorer
    from lab.cold_start import cold_start
    from lab.verifier_lm import train_verifier_lm
    from rl.runtime import torch_settings

    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    start, stages = time.perf_counter(), {}
    task = held_out_task(config.problems)
    with torch_settings(threads=1):
        t = time.perf_counter()
        policy_dir = Path(config.policy) if config.policy else cold_start(
            out / "cold_start", max_minutes=config.sft_minutes, seed=config.seed, final_eval=False,
            progress=config.progress).model_dir
        corrected_dir = cold_start(out / "cold_start_self_correction", max_minutes=config.sft_minutes,
                                   self_correction=config.self_correction, seed=config.seed, final_eval=False,
                                   progress=config.progress).model_dir
        stages["cold_starts"] = round(time.perf_counter() - t, 1)

        t = time.perf_counter()
        verifier_dir = Path(config.verifier) if config.verifier else train_verifier_lm(
            out / "verifier", max_minutes=config.verifier_minutes, eval_problems=config.problems, seed=config.seed,
            progress=config.progress).model_dir
        stages["verifier"] = round(time.perf_counter() - t, 1)

        t = time.perf_counter()
        policy = load_policy(policy_dir, backend=config.backend, seed=config.seed)
        prm, prm_record = train_prm(policy, policy_dir, task, config, out)
        stages["prm"] = round(time.perf_counter() - t, 1)

        t = time.perf_counter()
        mc = MonteCarloScorer(policy, rollouts=config.mc_rollouts, max_tokens=64, temperature=1.0,
                              extract=task.verifier.extract, equivalent=task.verifier.equivalent)
        verifier = load_scorer(verifier_dir, decode=policy.decode)
        scorers = {"random": RandomScorer(), "confidence": ConfidenceScorer(), f"mc{config.mc_rollouts}": mc,
                   "prm": prm, "verifier": verifier}
        grading = dict(seeds=config.seeds, candidates=4, samples=8, step_delimiter=STEP_DELIMITER, **STEPS)
        value_rows = grade_scorers(policy, task.problems, scorers, task, step_value,
                                   first_seed_only=(f"mc{config.mc_rollouts}",), **grading)
        if config.critic:
            from rl.critic import ValueCritic
            critic_policy = load_policy(config.critic_policy, backend=config.backend, seed=config.seed) \
                if config.critic_policy else policy
            critic_scorers = {"critic": ValueCritic.from_pretrained(config.critic), "confidence": ConfidenceScorer()}
            for row in grade_scorers(critic_policy, task.problems, critic_scorers, task, step_value, **grading):
                value_rows.append({**row, "scorer": f"{row['scorer']} (critic's policy)"})
            if critic_policy is not policy:
                critic_policy.close()
        stages["values"] = round(time.perf_counter() - t, 1)

        t = time.perf_counter()
        search_rows = search_curves(policy, {"confidence": ConfidenceScorer(), "prm": prm, "verifier": verifier},
                                    task, config)
        write_outputs(search_rows, out / "search")
        policy.close()
        stages["search"] = round(time.perf_counter() - t, 1)

        t = time.perf_counter()
        forcing_rows = forcing_curves({"plain": policy_dir, "self_correction": corrected_dir}, task, config)
        write_outputs(forcing_rows, out / "forcing")
        stages["forcing"] = round(time.perf_counter() - t, 1)

    summary = {"config": asdict(config), "seconds": round(time.perf_counter() - start, 1), "stage_seconds": stages,
               "prm": prm_record, "verifier": {"folder": str(verifier_dir), "parameters": verifier.num_parameters},
               **write_values(value_rows, out), "search": summarize(search_rows),
               "forcing": summarize(forcing_rows)}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary
