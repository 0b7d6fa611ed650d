"""The outcome reward model as a best-of-N reranker, against majority vote, on the same samples.

Per held-out problem, N samples (temperature 1) from one policy, drawn once at the largest N and
sub-sampled (the first N) for the smaller ones. From the same samples: majority vote over the extracted
answers (self-consistency, Wang et al. 2022), the reward model's best-scored sample (best-of-N, Cobbe et
al. 2021), the reward-weighted vote (the answer whose samples' scores sum highest), the mean over the
samples (pass@1) and whether any is right (pass@N, an oracle's ceiling). Each is the share of problems
solved, with a 95% bootstrap interval over problems of the mean over sampling seeds. Compute: generated
tokens per problem, and FLOPs per problem = 2 N_policy (generated + prompt tokens) + 2 N_rm (tokens the
reward model scored).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from planner.answers import vote
from planner.policy.types import SamplingParams
from rl.tree_store import TreeStore

__all__ = ["RERANKERS", "solved_matrix", "rerank_samples", "rerank_comparison"]

RERANKERS = ("pass@1", "majority", "reward_model_best", "reward_model_weighted", "pass@N")


def solved_matrix(engine, problems, reward_fn, n: int, seed: int, max_tokens: int = 64):
    """(n, P) 0/1 array: whether sample k of problem p is rewarded > 0.5 (temperature 1), and the samples."""

    prompts = [engine.encode_prompt(p.question) for p in problems]
    groups = engine.generate(prompts, SamplingParams(n=n, temperature=1.0, max_tokens=max_tokens, seed=seed))
    solved = np.array([[reward_fn(s.text, p) > 0.5 for s in group] for p, group in zip(problems, groups)], float)
    return solved.T, groups


def rerank_samples(groups, problems, scorer, reward_fn, extract, equivalent, prompts, sizes) -> dict:
    """{(method, N): (P,) solved} for the samples `groups` (one list of `Sample`s per problem) of `prompts`."""
    out: dict[tuple[str, int], list[float]] = {}
    for prompt, group, problem in zip(prompts, groups, problems):
        solved = [float(reward_fn(s.text, problem) > 0.5) for s in group]
        answers = [extract(s.text) for s in group]
        scores = scorer.score([prompt + list(s.token_ids) for s in group], prompt_len=len(prompt),
                              finished=[True] * len(group))
        for n in sizes:
            picks = {"majority": vote("majority", answers[:n], equivalent=equivalent),
                     "reward_model_best": vote("best", answers[:n], scores[:n], equivalent),
                     "reward_model_weighted": vote("weighted", answers[:n], scores[:n], equivalent)}
            row = {"pass@1": float(np.mean(solved[:n])), "pass@N": max(solved[:n]),
                   **{name: solved[i] for name, i in picks.items()}}
            for method, value in row.items():
                out.setdefault((method, n), []).append(value)
    return {key: np.array(values) for key, values in out.items()}


def rerank_comparison(config, model_dir: Path, held_out, task, engine) -> dict:
    """Train the outcome reward model on the stored trees of every run, then rerank samples of
    the cold-start policy (`engine`, holding its weights) on the held-out problems; returns rows and the
    reward model's training record. A reranking already done with the same settings (reranking.json) is
    reused."""
    from planner.prm_scorers import load_scorer
    from rl.reward_model import RewardModelConfig, train_reward_model

    out = Path(config.output_dir)
    record = out / "reranking.json"
    settings = {k: v for k, v in dataclasses.asdict(config).items() if k not in ("output_dir", "progress", "backend")}
    if record.is_file() and json.loads(record.read_text())["settings"] == settings:  # done with these settings
        saved = json.loads(record.read_text())
        return {"rows": [{**r, "solved": np.array(r["solved"])} for r in saved["rows"]],
                "reward_model": saved["reward_model"]}
    stores = [out / "runs" / f"{arm}_seed{seed}" / "trees.jsonl" for arm in config.arms for seed in config.seeds]
    trees = [stored.tree for store in stores for stored in TreeStore(store).load()]
    settings = RewardModelConfig(pairs_per_prompt=4, epochs=config.reward_model_epochs, lr=config.reward_model_lr,
                                 progress=config.progress)
    trained = train_reward_model(model_dir, trees, settings, out / "reward_model")
    scorer = load_scorer(trained.folder)
    params = engine.num_parameters
    prompts = [engine.encode_prompt(p.question) for p in held_out]
    largest = max(config.rerank_sizes)
    per_seed = []
    for seed in config.rerank_seeds:
        _, groups = solved_matrix(engine, held_out, task.reward, largest, seed=10_000 + seed)
        solved = rerank_samples(groups, held_out, scorer, task.reward, task.verifier.extract,
                                task.verifier.equivalent, prompts, config.rerank_sizes)
        lengths = np.array([[len(s.token_ids) for s in g] for g in groups])  # (P, largest)
        per_seed.append((solved, lengths))
    rows = []
    for method in RERANKERS:
        for n in config.rerank_sizes:
            matrix = np.stack([s[(method, n)] for s, _ in per_seed])  # (seeds, P)
            generated = float(np.mean([lengths[:, :n].sum() for _, lengths in per_seed])) / len(held_out)
            prompt_tokens = n * float(np.mean([len(p) for p in prompts]))
            scored = (generated + prompt_tokens) if method.startswith("reward_model") else 0.0
            rows.append({"method": method, "size": n, "solved": matrix,
                         "generated_tokens_per_problem": generated,
                         "flops_per_problem": 2 * params * (generated + prompt_tokens) + 2 * scorer.num_parameters * scored})
    result = {"rows": rows, "reward_model": {"history": trained.history, "train_pairs": trained.train_pairs,
                                             "heldout_pairs": trained.heldout_pairs, "trees": len(trees),
                                             "parameters": scorer.num_parameters}}
    record.write_text(json.dumps({"settings": settings, **result, "rows": [{**r, "solved": r["solved"].tolist()}
                                                                         for r in rows]}) + "\n")
    return result
