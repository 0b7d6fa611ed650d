"""Grade a scorer the way search uses it, against a task's process oracle.

On a task whose every step is checkable (the embedded arithmetic task: `verifiers.arithmetic.step_value`
says whether every step of a partial response is right), `collect_cases` samples, from the policy:

- **sibling sets**: walking down one sampled response per problem (and seed), at every depth the
  policy proposes `candidates` next steps from the current prefix (one generate call per depth over
  all problems), each labelled by the oracle; the walk continues below the first candidate, so
  parents are right or wrong as the policy makes them;
- **complete samples**: `samples` whole responses per problem, graded by the task's reward.

`grade` then scores every candidate prefix and every complete sample with the scorer (the candidates'
sampled log-probabilities go along, for scorers that read them) and reports the metrics of
`planner.value_metrics` with 95% bootstrap intervals over problems, the scorer's FLOPs per scored
prefix (a Monte-Carlo scorer's are its rollouts' policy FLOPs), and, for reference, majority vote and
a random pick among the same samples. The oracle only grades here; it never steers a search.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from planner.answers import same_answer, vote
from planner.budget import ComputeMeter
from planner.policy.types import ComputeStats, SamplingParams
from planner.value_metrics import (auc_within_depths, expected_calibration_error, rerank_accuracy, sibling_accuracy)

__all__ = ["SiblingSet", "ValueCases", "collect_cases", "grade", "grade_scorers", "BOOTSTRAP_RESAMPLES"]

BOOTSTRAP_RESAMPLES = 1000
"""Resamples of the problems for each metric's 95% interval."""


@dataclass
class SiblingSet:
    """The candidate next steps the policy proposed below one prefix."""

    problem: int
    """Index of the problem."""
    depth: int
    """Steps in the parent prefix (0: the prompt alone)."""
    prefixes: list[list[int]]
    """Prompt + response ids of each candidate (the parent's ids, then the candidate step's)."""
    step_logprobs: list[list[float]]
    """Each candidate step's sampled log-probabilities."""
    finished: list[bool]
    """Whether each candidate ended the response."""
    labels: list[float]
    """The process oracle: 1 when every step so far (the candidate's included) is right."""


@dataclass
class ValueCases:
    """What `collect_cases` sampled: sibling sets, complete samples and the problems' prompts."""

    prompt_lengths: list[int]
    sets: list[SiblingSet] = field(default_factory=list)
    samples: list[list[list[int]]] = field(default_factory=list)
    """Per problem, complete responses as prompt + response ids."""
    sample_logprobs: list[list[list[float]]] = field(default_factory=list)
    """Per problem and sample, the response's log-probabilities (its last step's are what a scorer reads)."""
    sample_correct: list[list[float]] = field(default_factory=list)
    sample_answers: list[list[str | None]] = field(default_factory=list)


def _last_step(policy, token_ids: list[int], logprobs: list[float], delimiter: str) -> list[float]:
    """The log-probabilities of a response's last step: the tokens after the last token (but the final
    one) whose text holds the step delimiter."""
    for k in range(len(token_ids) - 2, -1, -1):
        if delimiter in policy.decode([token_ids[k]]):
            return logprobs[k + 1:]
    return logprobs


def collect_cases(policy, problems: Sequence, oracle: Callable[[object, str], float], reward: Callable,
                  extract: Callable[[str], str | None], *, candidates: int = 4, samples: int = 8,
                  step_delimiter: str = "\n", max_step_tokens: int = 16, max_steps: int = 8,
                  max_tokens: int = 64, temperature: float = 1.0, seed: int = 0) -> ValueCases:
    """Sample sibling sets and complete samples for `problems` (see the module docstring).
    oracle(problem, partial_response) -> 1/0; reward(text, problem) -> float; extract: answers for votes."""
    prompts = [policy.encode_prompt(p.question) for p in problems]
    cases = ValueCases(prompt_lengths=[len(p) for p in prompts])
    heads = [list(p) for p in prompts]  # the walk's current prefix per problem
    live = list(range(len(problems)))
    step = SamplingParams(n=candidates, temperature=temperature, max_tokens=max_step_tokens,
                          stop=(step_delimiter,))
    for depth in range(max_steps):
        if not live:
            break
        groups = policy.generate([heads[i] for i in live], step.replace(seed=seed * 1000 + depth))
        still = []
        for i, group in zip(live, groups):
            response = policy.decode(heads[i][len(prompts[i]):])
            prefixes = [heads[i] + s.token_ids for s in group]
            cases.sets.append(SiblingSet(
                problem=i, depth=depth, prefixes=prefixes, step_logprobs=[list(s.logprobs) for s in group],
                finished=[s.finish_reason != "step" for s in group],
                labels=[float(oracle(problems[i], response + s.text)) for s in group]))
            if group[0].finish_reason == "step":  # walk on below the first candidate
                heads[i] = prefixes[0]
                still.append(i)
        live = still
    full = policy.generate(prompts, SamplingParams(n=samples, temperature=temperature, max_tokens=max_tokens,
                                                   seed=seed * 1000 + 999))
    for i, group in enumerate(full):
        cases.samples.append([prompts[i] + s.token_ids for s in group])
        cases.sample_logprobs.append([_last_step(policy, s.token_ids, list(s.logprobs), step_delimiter) for s in group])
        cases.sample_correct.append([float(reward(s.text, problems[i]) >= 0.5) for s in group])
        cases.sample_answers.append([extract(s.text) for s in group])
    return cases


class _NoPolicy:
    """The policy of a scorer that runs none: it spends nothing."""

    num_parameters = 0

    def __init__(self) -> None:
        self.stats = ComputeStats()


def _interval(metric: Callable[[list[int]], float | None], problems: int, seed: int = 0) -> tuple[float, float] | None:
    """95% percentile-bootstrap interval of `metric(problem indices)` over resampled problems."""
    rng = np.random.default_rng(seed)
    draws = [metric(list(rng.integers(0, problems, size=problems))) for _ in range(BOOTSTRAP_RESAMPLES)]
    draws = [d for d in draws if d is not None]
    if not draws:
        return None
    low, high = np.percentile(draws, [2.5, 97.5])
    return float(low), float(high)


def grade(scorer, cases: ValueCases, equivalent: Callable[[str, str], bool] | None = None) -> dict:
    """The scorer's metrics on `cases` (a dict; intervals as [low, high])."""

    equivalent = equivalent or same_answer
    # a rollout scorer spends its policy's compute (FLOPs of the prompt tokens computed and the generated)
    meter = ComputeMeter(getattr(scorer, "policy", None) or _NoPolicy(), scorer)
    set_values = []
    for k, s in enumerate(cases.sets):  # one call per sibling set: the way search scores one expansion
        scorer.reset(k)
        set_values.append(scorer.score(s.prefixes, prompt_len=cases.prompt_lengths[s.problem], finished=s.finished,
                                       step_logprobs=s.step_logprobs))
    sample_values = []
    for i, (prefixes, logprobs) in enumerate(zip(cases.samples, cases.sample_logprobs)):
        scorer.reset(len(cases.sets) + i)
        sample_values.append(scorer.score(prefixes, prompt_len=cases.prompt_lengths[i], finished=[True] * len(prefixes),
                                          step_logprobs=logprobs))
    flops = meter.record().flops
    scored = sum(len(s.prefixes) for s in cases.sets) + sum(len(p) for p in cases.samples)
    problems = len(cases.samples)
    by_problem: dict[int, list[int]] = {}
    for k, s in enumerate(cases.sets):
        by_problem.setdefault(s.problem, []).append(k)

    def siblings(index: list[int]):
        return sibling_accuracy([(set_values[k], cases.sets[k].labels) for i in index for k in by_problem.get(i, [])])

    def depth_auc(index: list[int]):
        chosen = [k for i in index for k in by_problem.get(i, [])]
        values = [v for k in chosen for v in set_values[k]]
        labels = [y for k in chosen for y in cases.sets[k].labels]
        depths = [cases.sets[k].depth for k in chosen for _ in cases.sets[k].labels]
        per_depth = auc_within_depths(values, labels, depths)
        return float(np.mean(list(per_depth.values()))) if per_depth else None

    def rerank(index: list[int]):
        return rerank_accuracy([sample_values[i] for i in index], [cases.sample_correct[i] for i in index])

    def majority(index: list[int]):
        return float(np.mean([cases.sample_correct[i][vote("majority", cases.sample_answers[i], None, equivalent)]
                              for i in index]))

    def random_pick(index: list[int]):
        return float(np.mean([np.mean(cases.sample_correct[i]) for i in index]))

    everything = list(range(problems))
    all_values = [v for vs in set_values for v in vs]
    all_labels = [y for s in cases.sets for y in s.labels]
    report = {"problems": problems, "sibling_sets": len(cases.sets),
              "mixed_pairs": sum(1 for s in cases.sets for a in s.labels for b in s.labels if a > b),
              "ece": expected_calibration_error(all_values, all_labels),
              "flops_per_prefix": flops / max(scored, 1),
              "step_auc_by_depth": {str(d): a for d, a in auc_within_depths(
                  all_values, all_labels, [s.depth for s in cases.sets for _ in s.labels]).items()}}
    for name, metric in (("sibling_accuracy", siblings), ("step_auc", depth_auc), ("rerank_accuracy", rerank),
                         ("majority_accuracy", majority), ("random_pick_accuracy", random_pick)):
        report[name] = metric(everything)
        report[f"{name}_interval"] = _interval(metric, problems)
    return report


def grade_scorers(policy, problems: Sequence, scorers: dict, task, oracle: Callable[[object, str], float], *,
                  seeds: Sequence[int], first_seed_only: Sequence[str] = (), progress: bool = False,
                  **collect) -> list[dict]:
    """Every scorer graded on the same cases, drawn once per sampling seed (`collect_cases` with `collect`'s
    settings; `task` gives the reward, the answer extraction and equality); the scorers named in
    `first_seed_only` (rollouts cost most) on the first seed alone. One row per scorer and seed:
    {"scorer", "seed", **grade(...)}."""
    from tqdm.auto import tqdm

    rows = []
    for seed in tqdm(seeds, desc="seeds", disable=not progress):
        cases = collect_cases(policy, problems, oracle, task.reward, task.verifier.extract, seed=seed, **collect)
        for name, scorer in scorers.items():
            if name in first_seed_only and seed != seeds[0]:
                continue
            rows.append({"scorer": name, "seed": seed, **grade(scorer, cases, equivalent=task.verifier.equivalent)})
    return rows
