"""What `planner.value_eval.grade` measured, as files: values.csv, values.json, sibling_accuracy.png, and
the per-scorer means over sampling seeds."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

__all__ = ["METRICS", "write_value_rows", "value_means", "plot_sibling_accuracy"]

METRICS = ("sibling_accuracy", "step_auc", "rerank_accuracy", "majority_accuracy", "random_pick_accuracy")
"""The graded metrics that carry a 95% interval."""


def write_value_rows(rows: list[dict], out: Path) -> None:
    """values.json (every field), values.csv (one row per scorer and seed, intervals as _low/_high) and
    sibling_accuracy.png in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "values.json").write_text(json.dumps(rows, indent=1) + "\n")
    columns = ["scorer", "seed", "problems", "sibling_sets", "mixed_pairs", *METRICS, "ece", "flops_per_prefix"]
    with open(out / "values.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns + [f"{m}_low" for m in METRICS] + [f"{m}_high" for m in METRICS])
        writer.writeheader()
        for row in rows:
            intervals = {f"{m}_{side}": (row[f"{m}_interval"] or [None, None])[k]
                         for m in METRICS for k, side in enumerate(("low", "high"))}
            writer.writerow({**{c: row[c] for c in columns}, **intervals})
    plot_sibling_accuracy(rows, out / "sibling_accuracy.png")


def value_means(rows: list[dict]) -> dict:
    """Per scorer: each metric's mean over its seeds, with the widest of the seeds' 95% intervals
    (lowest low, highest high), the seeds graded, ECE and FLOPs per scored prefix."""
    means = {}
    for name in dict.fromkeys(r["scorer"] for r in rows):
        mine = [r for r in rows if r["scorer"] == name]
        entry = {"seeds": [r["seed"] for r in mine], "ece": float(np.mean([r["ece"] for r in mine])),
                 "flops_per_prefix": float(np.mean([r["flops_per_prefix"] for r in mine]))}
        for metric in METRICS:
            values = [r[metric] for r in mine if r[metric] is not None]
            intervals = [r[f"{metric}_interval"] for r in mine if r[f"{metric}_interval"]]
            entry[metric] = float(np.mean(values)) if values else None
            entry[f"{metric}_interval"] = ([min(i[0] for i in intervals), max(i[1] for i in intervals)]
                                           if intervals else None)
        means[name] = entry
    return means


def plot_sibling_accuracy(rows: list[dict], path: Path) -> None:
    """Sibling-ranking accuracy per scorer, one point per seed with its 95% interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["scorer"] for r in rows))
    fig, ax = plt.subplots(figsize=(max(6.4, 1.3 * len(names)), 3.6))
    for k, name in enumerate(names):
        mine = [r for r in rows if r["scorer"] == name and r["sibling_accuracy"] is not None]
        for j, r in enumerate(mine):
            low, high = r["sibling_accuracy_interval"] or (r["sibling_accuracy"], r["sibling_accuracy"])
            x = k + (j - (len(mine) - 1) / 2) * 0.12
            ax.errorbar(x, r["sibling_accuracy"], yerr=[[r["sibling_accuracy"] - low], [high - r["sibling_accuracy"]]],
                        fmt="o", color=f"C{k}", capsize=3)
    ax.axhline(0.5, color="grey", linestyle=":", linewidth=1)
    ax.set_xticks(range(len(names)), names, fontsize=8)
    ax.set_ylabel("sibling-ranking accuracy (95% interval)")
    ax.set_ylim(0.3, 1.02)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
