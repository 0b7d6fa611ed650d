"""The results of a compute-scaling run (`planner.scaling`): their files, curves, summary and plots.

A run gives one row per (strategy, size, seed) (`RESULT_COLUMNS`, written to `results.csv`), and in
each row, under "outcomes", one entry per problem (`PROBLEM_COLUMNS`, written to `problems.csv`):
the verifier's reward, whether it solved the problem (reward >= `SOLVED_AT`), and the compute that
problem's search spent (generated tokens and FLOPs, the scorer's included). A strategy's **size** is
its own knob (`SIZE_KNOBS`); **compute** is what was measured, in tokens and in FLOPs.

**Accuracy is a claim about noise.** `curve()` gives, for each size, the mean accuracy over seeds
and a 95% percentile-bootstrap interval over problems: with P problems (the same P under every
seed), `BOOTSTRAP_RESAMPLES` resamples of P problem indices are drawn with replacement by
`numpy.random.default_rng(BOOTSTRAP_SEED).integers(0, P, size=(BOOTSTRAP_RESAMPLES, P))`; each
resample's accuracy averages, over the resampled indices, each problem's solved rate over seeds;
the interval is the 2.5th and 97.5th percentiles of those accuracies (`numpy.percentile`, linear
interpolation). So the interval says how much the accuracy could move on another draw of problems
like these; the seeds' own spread (min, max, std) is kept beside it.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

import numpy as np

__all__ = ["SIZE_KNOBS", "SOLVED_AT", "RESULT_COLUMNS", "PROBLEM_COLUMNS", "BOOTSTRAP_RESAMPLES", "BOOTSTRAP_SEED",
           "bootstrap_interval", "curve", "compute_to_reach", "summarize", "write_csv", "read_csv", "read_results",
           "plot_curves", "write_outputs", "BANDS"]

SIZE_KNOBS: dict[str, str] = {
    "best_of_n": "n",
    "beam": "num_beams",
    "dvts": "num_beams",
    "mcts": "num_simulations",
    "budget_forcing": "max_thinking_tokens",
}
"""Strategy -> the config field its size sets (budget_forcing also derives min_thinking_tokens)."""

SOLVED_AT = 0.5
"""A problem is solved when the verifier's reward of the chosen response is >= this."""

RESULT_COLUMNS = ("strategy", "size", "seed", "problems", "accuracy", "mean_reward", "generated_tokens",
                  "generated_tokens_per_problem", "prompt_tokens", "cached_prompt_tokens", "flops",
                  "flops_per_problem", "policy_calls", "scorer_calls", "wall_seconds")
"""Columns of results.csv; token, FLOP, call and second columns are totals over the problems.
policy_calls counts each search's calls (with `batched`, a merged engine call counts once per search in it)."""

PROBLEM_COLUMNS = ("strategy", "size", "seed", "problem", "reward", "solved", "generated_tokens", "flops")
"""Columns of problems.csv: one row per problem of each results.csv row; `problem` is the problem's
index in the run's problem list, `solved` is 1 or 0, compute is that problem's search's."""

BOOTSTRAP_RESAMPLES = 2000
"""Resamples of the problems for each accuracy interval."""
BOOTSTRAP_SEED = 0
"""Seed of the resampling, so the same results give the same intervals."""
BANDS = ("interval", "minmax", "std")
"""Plot bands: the 95% bootstrap interval over problems, min-max over seeds, or mean +- std over seeds."""


def bootstrap_interval(solved: np.ndarray, resamples: int = BOOTSTRAP_RESAMPLES,
                       seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the seed-mean accuracy; `solved` is (seeds, problems) of 0/1."""
    solved = np.asarray(solved, dtype=float)
    if solved.ndim != 2 or solved.shape[1] == 0:
        raise ValueError(f"solved must be a (seeds, problems) array with at least one problem; got {solved.shape}")
    per_problem = solved.mean(axis=0)  # (P,): each problem's solved rate over seeds
    index = np.random.default_rng(seed).integers(0, len(per_problem), size=(resamples, len(per_problem)))
    accuracy = per_problem[index].mean(axis=1)  # (resamples,)
    low, high = np.percentile(accuracy, [2.5, 97.5])
    return float(low), float(high)


def _by_size(rows: Sequence[dict], strategy: str) -> dict[int, list[dict]]:
    groups: dict[int, list[dict]] = {}
    for row in rows:
        if row["strategy"] == strategy:
            groups.setdefault(int(row["size"]), []).append(row)
    return dict(sorted(groups.items()))


def _mean(values) -> float:
    values = [float(v) for v in values]
    return sum(values) / len(values)


def _means(rows: Sequence[dict], strategy: str, x: str) -> list[tuple[int, float, float]]:
    """(size, seed-mean accuracy, seed-mean x) per size."""
    return [(size, _mean(r["accuracy"] for r in group), _mean(r[x] for r in group))
            for size, group in _by_size(rows, strategy).items()]


def _solved(group: list[dict]) -> np.ndarray:
    """(seeds, problems) solved matrix of one size's rows, from their per-problem outcomes."""
    if any("outcomes" not in row for row in group):
        raise ValueError("rows without per-problem outcomes: run them with planner.scaling.run_scaling or read "
                         "them with planner.scaling_report.read_results(folder) (results.csv with problems.csv)")
    matrix = [[int(o["solved"]) for o in sorted(row["outcomes"], key=lambda o: int(o["problem"]))] for row in group]
    if len({len(m) for m in matrix}) != 1:
        raise ValueError(f"every seed must cover the same problems; got {[len(m) for m in matrix]} problems")
    return np.array(matrix)


def curve(rows: Sequence[dict], strategy: str, x: str = "generated_tokens_per_problem") -> list[dict]:
    """One point per size of `strategy` (sorted by size): accuracy as the seed mean with its 95% bootstrap
    interval over problems (`accuracy_low`, `accuracy_high`; see the module docstring), the seeds'
    std, min and max, and the seed mean of `x` and of the per-problem compute columns."""
    points = []
    for size, group in _by_size(rows, strategy).items():
        acc = [float(r["accuracy"]) for r in group]
        mean = sum(acc) / len(acc)
        low, high = bootstrap_interval(_solved(group))
        points.append({"size": size, "seeds": len(group), "problems": int(group[0]["problems"]),
                       "accuracy_mean": mean, "accuracy_low": low, "accuracy_high": high,
                       "accuracy_std": math.sqrt(sum((a - mean) ** 2 for a in acc) / len(acc)),
                       "accuracy_min": min(acc), "accuracy_max": max(acc), "x_mean": _mean(r[x] for r in group),
                       **{f"{c}_mean": _mean(r[c] for r in group)
                          for c in ("generated_tokens_per_problem", "flops_per_problem", "wall_seconds")}})
    return points


def compute_to_reach(rows: Sequence[dict], strategy: str, target_accuracy: float,
                     x: str = "generated_tokens_per_problem") -> float | None:
    """Mean compute per problem (`x`: generated tokens or FLOPs) `strategy` needs to reach
    `target_accuracy` on its seed-mean curve.

    Walking up the sizes: the first point at or above the target gives its compute when it is the
    smallest size; otherwise the compute is interpolated between it and the point before it,
    linearly in log(compute) (the plots' x axis). None when no size reaches the target.
    """
    points = _means(rows, strategy, x)
    for k, (_, accuracy, cost) in enumerate(points):
        if accuracy >= target_accuracy:
            if k == 0:
                return cost
            _, low_accuracy, low_cost = points[k - 1]
            if low_cost <= 0 or cost <= 0 or accuracy == low_accuracy:
                return cost
            t = (target_accuracy - low_accuracy) / (accuracy - low_accuracy)
            return math.exp(math.log(low_cost) + t * (math.log(cost) - math.log(low_cost)))
    return None


def summarize(rows: Sequence[dict], config: Any = None) -> dict:
    """Per strategy and size: mean accuracy with its 95% interval (and the seeds' spread) and mean compute
    per problem; plus the best best-of-N (majority) accuracy and the generated tokens and the FLOPs
    each strategy needed to reach it. `config`, when given, is recorded too."""
    strategies = list(dict.fromkeys(r["strategy"] for r in rows))
    out: dict = {"solved_at": SOLVED_AT, "interval": f"95% percentile bootstrap over problems, "
                                                     f"{BOOTSTRAP_RESAMPLES} resamples, seed {BOOTSTRAP_SEED}",
                 "curves": {s: [{k: v for k, v in p.items() if k != "x_mean"} for p in curve(rows, s)]
                            for s in strategies}}
    if config is not None:
        out["config"] = {k: v for k, v in asdict(config).items() if k != "progress"}
    if "best_of_n" in strategies:
        target = max(accuracy for _, accuracy, _ in _means(rows, "best_of_n", "generated_tokens_per_problem"))
        out["best_of_n_best_accuracy"] = target
        out["tokens_to_reach_best_of_n_best"] = {s: compute_to_reach(rows, s, target) for s in strategies}
        out["flops_to_reach_best_of_n_best"] = {s: compute_to_reach(rows, s, target, "flops_per_problem")
                                                for s in strategies}
    return out


# ---- files -------------------------------------------------------------------------------------------------
def write_csv(rows: Sequence[dict], path: str | os.PathLike, columns: Sequence[str] = RESULT_COLUMNS) -> Path:
    path = Path(path)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(columns))
        writer.writeheader()
        for row in rows:
            writer.writerow({c: row[c] for c in columns})
    return path


def read_csv(path: str | os.PathLike) -> list[dict]:
    """Rows of a results.csv or problems.csv with numbers parsed (ints stay ints)."""

    def number(text: str):
        try:
            return int(text)
        except ValueError:
            return float(text)

    with open(path, newline="") as f:
        return [{k: v if k == "strategy" else number(v) for k, v in row.items()} for row in csv.DictReader(f)]


def read_results(folder: str | os.PathLike) -> list[dict]:
    """The rows of `folder`/results.csv, each with its "outcomes" from `folder`/problems.csv."""
    folder = Path(folder)
    outcomes: dict[tuple, list[dict]] = {}
    for outcome in read_csv(folder / "problems.csv"):
        outcomes.setdefault((outcome["strategy"], outcome["size"], outcome["seed"]), []).append(outcome)
    rows = read_csv(folder / "results.csv")
    for row in rows:
        row["outcomes"] = outcomes.get((row["strategy"], row["size"], row["seed"]), [])
    return rows


def plot_curves(rows: Sequence[dict], path: str | os.PathLike, x: str = "generated_tokens_per_problem",
                band: Literal["interval", "minmax", "std"] = "interval", title: str | None = None) -> Path:
    """Accuracy against `x` (log axis): the seed mean per strategy, with a band: the 95% bootstrap interval
    over problems (default), min-max over seeds, or mean +- std over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if band not in BANDS:
        raise ValueError(f"band must be one of {list(BANDS)}; got {band!r}")
    labels = {"generated_tokens_per_problem": "generated tokens per problem", "flops_per_problem": "FLOPs per problem"}
    bands = {"interval": "95% bootstrap interval over problems", "minmax": "min-max over seeds",
             "std": "+-std over seeds"}
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    top = 0.0
    for strategy in dict.fromkeys(r["strategy"] for r in rows):
        points = curve(rows, strategy, x)
        xs, ys = [p["x_mean"] for p in points], [p["accuracy_mean"] for p in points]
        if band == "interval":
            low, high = [p["accuracy_low"] for p in points], [p["accuracy_high"] for p in points]
        elif band == "minmax":
            low, high = [p["accuracy_min"] for p in points], [p["accuracy_max"] for p in points]
        else:
            low = [p["accuracy_mean"] - p["accuracy_std"] for p in points]
            high = [p["accuracy_mean"] + p["accuracy_std"] for p in points]
        top = max([top, *high])
        (line,) = ax.plot(xs, ys, marker="o", label=f"{strategy} (point labels: {SIZE_KNOBS.get(strategy, 'size')})")
        ax.fill_between(xs, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
        for p, xv, yv in zip(points, xs, ys):
            ax.annotate(str(p["size"]), (xv, yv), textcoords="offset points", xytext=(3, 4), fontsize=7)
    ax.set_xscale("log")
    ax.set_ylim(-0.02, min(1.02, max(0.1, top + 0.05)))
    ax.set_xlabel(labels.get(x, x) + " (log scale)")
    ax.set_ylabel(f"accuracy (reward >= {SOLVED_AT})")
    ax.set_title(title or f"accuracy vs {labels.get(x, x)}: seed mean, band = {bands[band]}", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_outputs(rows: Sequence[dict], out_dir: str | os.PathLike, config: Any = None,
                  band: Literal["interval", "minmax", "std"] = "interval") -> dict[str, Path]:
    """results.csv, problems.csv, summary.json, accuracy_vs_tokens.png and accuracy_vs_flops.png in `out_dir`."""
    summary = summarize(rows, config)  # first: it refuses rows without their per-problem outcomes
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    outcomes = [o for row in rows for o in row["outcomes"]]
    paths = {"csv": write_csv(rows, out / "results.csv"),
             "problems_csv": write_csv(outcomes, out / "problems.csv", PROBLEM_COLUMNS),
             "summary": out / "summary.json"}
    paths["summary"].write_text(json.dumps(summary, indent=1, default=str) + "\n")
    paths["tokens_png"] = plot_curves(rows, out / "accuracy_vs_tokens.png", "generated_tokens_per_problem", band)
    paths["flops_png"] = plot_curves(rows, out / "accuracy_vs_flops.png", "flops_per_problem", band)
    return paths
