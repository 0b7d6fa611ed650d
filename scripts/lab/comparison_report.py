"""The comparison's outputs: curves.csv / curves.png (pass@1 against cumulative generated tokens),
reranking.csv / reranking.png, summary.json and the markdown tables of docs/results.md.

Intervals. Pass@1 of an arm at a point is the mean over its training seeds and held-out problems of each
problem's solved rate. Two 95% percentile-bootstrap intervals are given: over problems of the seed mean
(`planner.scaling_report.bootstrap_interval`, the project's usual one: the noise of the held-out set), and
over seeds and problems resampled together (`seed_problem_interval`: also the run-to-run noise of
training, which with 3 seeds is coarse and usually the larger). Differences between arms resample the
problems jointly (both arms answer the same problems) and each arm's seeds on their own (independent runs);
the reranking's differences resample the sampling seeds jointly too (every method reranks the same samples).
"""

from __future__ import annotations

import csv
import json
from dataclasses import asdict
from pathlib import Path

import numpy as np

from planner.scaling_report import bootstrap_interval

__all__ = ["seed_problem_interval", "difference_interval", "write_report", "markdown"]
RESAMPLES = 4000


def seed_problem_interval(solved: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """95% interval of the mean of `solved` (seeds, problems), resampling seeds and problems."""
    return difference_interval(solved, None, seed)


def difference_interval(a: np.ndarray, b: np.ndarray | None, seed: int = 0,
                        paired_seeds: bool = False) -> tuple[float, float]:
    """95% interval of mean(a) - mean(b) (each (seeds, problems); b None: of mean(a)): the problems resampled
    jointly; the seeds too when `paired_seeds` (row s of a and of b come from the same draw: the reranking's
    sampling seeds), else each array's seeds on their own (independent training runs)."""
    rng = np.random.default_rng(seed)
    problems = rng.integers(0, a.shape[1], size=(RESAMPLES, a.shape[1]))  # (R, P)
    shared = rng.integers(0, a.shape[0], size=(RESAMPLES, a.shape[0])) if paired_seeds else None  # (R, S)

    def means(x):
        seeds = shared if shared is not None else rng.integers(0, x.shape[0], size=(RESAMPLES, x.shape[0]))
        return x[seeds[:, :, None], problems[:, None, :]].mean(axis=(1, 2))  # (R,)

    values = means(a) - (means(b) if b is not None else 0.0)
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high)


def _final_points(runs: list[dict], arm: str) -> list[dict]:
    seeds = sorted({r["seed"] for r in runs if r["arm"] == arm})
    return [max((r for r in runs if r["arm"] == arm and r["seed"] == s), key=lambda r: r["generated_tokens"])
            for s in seeds]


def _matrix(points: list[dict]) -> np.ndarray:
    return np.array([p["solved_per_problem"] for p in points])  # (seeds, P)


def summarize_runs(runs: list[dict], arms: list[str]) -> dict:
    """Per arm: pass@1 at the start and at the end (mean, both intervals, per seed), the gain, the
    difference from each other arm, and the compute of the runs (means over seeds)."""
    out = {}
    for arm in arms:
        final = _final_points(runs, arm)
        start = [min((r for r in runs if r["arm"] == arm and r["seed"] == p["seed"]), key=lambda r: r["iteration"])
                 for p in final]
        end, begin = _matrix(final), _matrix(start)
        out[arm] = {"pass@1_start": float(begin.mean()), "pass@1_end": float(end.mean()),
                    "pass@1_end_problems_interval": list(bootstrap_interval(end)),
                    "pass@1_end_seeds_problems_interval": list(seed_problem_interval(end)),
                    "pass@1_end_per_seed": [float(p["pass@1"]) for p in final],
                    "gain": float(end.mean() - begin.mean()),
                    "gain_interval": list(difference_interval(end, begin)),
                    **{k: float(np.mean([p[k] for p in final])) for k in
                       ("generated_tokens", "computed_prompt_tokens", "trained_tokens", "flops", "seconds")},
                    "iterations": float(np.mean([p["iteration"] for p in final]))}
    for arm in arms:
        out[arm]["difference"] = {other: {"value": out[arm]["pass@1_end"] - out[other]["pass@1_end"],
                                          "interval": list(difference_interval(_matrix(_final_points(runs, arm)),
                                                                               _matrix(_final_points(runs, other))))}
                                  for other in arms if other != arm}
    return out


def _plot_curves(runs: list[dict], arms: list[str], path: Path) -> None:
    """Left: pass@1 against cumulative generated tokens. Right: the gain over the cold start, whose interval
    pairs the problems (the same held-out problems at every point), so it shows what separates the arms."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, gain_ax) = plt.subplots(1, 2, figsize=(11, 4.4))
    for arm in arms:
        seeds = sorted({r["seed"] for r in runs if r["arm"] == arm})
        per_seed = [sorted((r for r in runs if r["arm"] == arm and r["seed"] == s), key=lambda r: r["iteration"])
                    for s in seeds]
        points = min(len(p) for p in per_seed)
        xs = [np.mean([p[k]["generated_tokens"] for p in per_seed]) for k in range(points)]
        matrices = [_matrix([p[k] for p in per_seed]) for k in range(points)]
        bands = [seed_problem_interval(m) for m in matrices]
        gains = [difference_interval(m, matrices[0]) for m in matrices]
        (line,) = ax.plot(xs, [m.mean() for m in matrices], marker="o", label=arm)
        color = line.get_color()
        ax.fill_between(xs, [b[0] for b in bands], [b[1] for b in bands], color=color, alpha=0.15, linewidth=0)
        for run in per_seed:
            ax.plot([r["generated_tokens"] for r in run], [r["pass@1"] for r in run], color=color, alpha=0.35,
                    linewidth=0.8)
        gain_ax.plot(xs, [m.mean() - matrices[0].mean() for m in matrices], marker="o", color=color, label=arm)
        gain_ax.fill_between(xs, [g[0] for g in gains], [g[1] for g in gains], color=color, alpha=0.15, linewidth=0)
    ax.set_ylabel("sampled pass@1 on held-out problems")
    ax.set_title("seed mean (thick), each seed (thin); band: 95% interval over seeds and problems", fontsize=8)
    gain_ax.axhline(0.0, color="black", linewidth=0.8)
    gain_ax.set_ylabel("pass@1 minus the cold start's")
    gain_ax.set_title("gain; band: 95% interval, problems paired, seeds resampled", fontsize=8)
    for axis in (ax, gain_ax):
        axis.set_xlabel("cumulative generated tokens (search included)")
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_reranking(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for method in dict.fromkeys(r["method"] for r in rows):
        mine = [r for r in rows if r["method"] == method]
        (line,) = ax.plot([r["size"] for r in mine], [r["accuracy"] for r in mine], marker="o", label=method)
        ax.fill_between([r["size"] for r in mine], [r["interval"][0] for r in mine], [r["interval"][1] for r in mine],
                        color=line.get_color(), alpha=0.15, linewidth=0)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("N samples per problem")
    ax.set_ylabel("share of held-out problems solved")
    ax.set_title("best-of-N: reward-model reranking vs majority vote; band = 95% interval over problems", fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _write_csv(rows: list[dict], path: Path) -> None:
    columns = list(dict.fromkeys(k for r in rows for k in r))
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def write_report(config, runs: list[dict], reranking: dict | None, seconds: float) -> dict:
    out = Path(config.output_dir)
    _write_csv([{k: v for k, v in r.items() if k != "solved_per_problem"} for r in runs], out / "curves.csv")
    _plot_curves(runs, config.arms, out / "curves.png")
    summary = {"config": asdict(config), "seconds": round(seconds, 1), "arms": summarize_runs(runs, config.arms)}
    if reranking is not None:
        rows = [{"method": r["method"], "size": r["size"], "accuracy": float(r["solved"].mean()),
                 "interval": list(bootstrap_interval(r["solved"])),
                 "generated_tokens_per_problem": r["generated_tokens_per_problem"],
                 "flops_per_problem": r["flops_per_problem"]} for r in reranking["rows"]]
        majority = {r["size"]: r["solved"] for r in reranking["rows"] if r["method"] == "majority"}
        for row, raw in zip(rows, reranking["rows"]):
            row["minus_majority_interval"] = list(difference_interval(raw["solved"], majority[raw["size"]],
                                                                      paired_seeds=True))
        _write_csv([{**r, "interval": f"{r['interval'][0]:.3f}-{r['interval'][1]:.3f}"} for r in rows],
                   out / "reranking.csv")
        _plot_reranking(rows, out / "reranking.png")
        summary["reranking"] = {"rows": rows, "reward_model": reranking["reward_model"]}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def markdown(summary: dict) -> str:
    """The tables of docs/results.md from a summary."""
    arms = summary["arms"]
    lines = ["| arm | pass@1 start | pass@1 end | 95% interval (problems) | 95% interval (seeds x problems) | per seed | "
             "gain (interval) | generated tokens | trained tokens | FLOPs | wall s |",
             "|---|---:|---:|---|---|---|---|---:|---:|---:|---:|"]
    for arm, s in arms.items():
        p, q, g = s["pass@1_end_problems_interval"], s["pass@1_end_seeds_problems_interval"], s["gain_interval"]
        lines.append(f"| {arm} | {_pct(s['pass@1_start'])} | **{_pct(s['pass@1_end'])}** | {_pct(p[0])}-{_pct(p[1])} | "
                     f"{_pct(q[0])}-{_pct(q[1])} | {' / '.join(_pct(x) for x in s['pass@1_end_per_seed'])} | "
                     f"{_pct(s['gain'])} ({_pct(g[0])} to {_pct(g[1])}) | {s['generated_tokens']:,.0f} | "
                     f"{s['trained_tokens']:,.0f} | {s['flops']:.2e} | {s['seconds']:.0f} |")
    lines += ["", "Differences of pass@1 at the end (row minus column, points; 95% interval over seeds and problems):",
              "", "| | " + " | ".join(arms) + " |", "|---|" + "---|" * len(arms)]
    for arm, s in arms.items():
        cells = [("-" if other == arm else f"{_pct(s['difference'][other]['value'])} "
                  f"({_pct(s['difference'][other]['interval'][0])} to {_pct(s['difference'][other]['interval'][1])})")
                 for other in arms]
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    if "reranking" in summary:
        rows = summary["reranking"]["rows"]
        sizes = sorted({r["size"] for r in rows})
        lines += ["", "| method | " + " | ".join(f"N={n}" for n in sizes) + " |", "|---|" + "---:|" * len(sizes)]
        for method in dict.fromkeys(r["method"] for r in rows):
            cells = {r["size"]: r for r in rows if r["method"] == method}
            lines.append(f"| {method} | " + " | ".join(
                f"{_pct(cells[n]['accuracy'])} ({_pct(cells[n]['interval'][0])}-{_pct(cells[n]['interval'][1])})"
                for n in sizes) + " |")
        lines += ["", "Reward model minus majority vote (points, 95% interval over sampling seeds and problems):", "",
                  "| method | " + " | ".join(f"N={n}" for n in sizes) + " |", "|---|" + "---:|" * len(sizes)]
        for method in ("reward_model_best", "reward_model_weighted"):
            cells = {r["size"]: r for r in rows if r["method"] == method}
            majority = {r["size"]: r for r in rows if r["method"] == "majority"}
            lines.append(f"| {method} | " + " | ".join(
                f"{_pct(cells[n]['accuracy'] - majority[n]['accuracy'])} ({_pct(cells[n]['minus_majority_interval'][0])}"
                f" to {_pct(cells[n]['minus_majority_interval'][1])})" for n in sizes) + " |")
    return "\n".join(lines)


SECTIONS: dict[str, tuple[str, str]] = {
    "trainers": ("DPO, rejection-sampling SFT and GRPO from the same trees", "results"),
    "rl_variants": ("RL variants at equal generated tokens", "rl_variants"),
}
"""--doc name -> (the docs/results.md section it writes, its folder under docs/img/)."""
SECTION = SECTIONS["trainers"][0]

ARM_TEXT = {
    "grpo": "grpo: GRPO advantages over each MCTS tree's leaves",
    "grpo_flat": "grpo_flat: GRPO over best-of-N groups of whole responses, no tree",
    "tree": "tree: V(node) - V(parent) at every token of a step",
    "treerl": "treerl: TreeRL's (V(s) - V(root) + V(s) - V(parent)) / sqrt(leaves below s)",
    "ppo": "ppo: GAE with the value critic trained on its returns",
    "reinforce_pp_baseline": "reinforce_pp_baseline: REINFORCE++ with the group mean as baseline",
    "dpo": "dpo: online DPO on sibling-step and response pairs",
    "rs_sft": "rs_sft: SFT on verified responses",
}
"""Arm name -> one line for the section's description."""


def _verdict(arms: dict) -> str:
    """Which arm ends highest, and whether the intervals of its differences separate it from the others."""
    best = max(arms, key=lambda a: arms[a]["pass@1_end"])
    parts = []
    for other, d in arms[best]["difference"].items():
        low, high = d["interval"]
        parts.append(f"{other}: {_pct(d['value'])} points ({_pct(low)} to {_pct(high)}), "
                     + ("separated" if low > 0 else "not separated: the interval includes 0"))
    return f"Highest pass@1 at the end: **{best}**; its lead over " + "; over ".join(parts) + "."


def section_body(summary: dict, command: str, machine: str, artifacts: str, images: str = "results") -> str:
    """The docs/results.md section: what ran, the tables, the plots (under docs/img/`images`) and an automatic
    verdict."""
    c = summary["config"]
    arms = list(summary["arms"])
    rm = summary.get("reranking", {}).get("reward_model")
    settings = [f"policy-gradient arms lr {c['grpo_lr']} ({c['grpo_minibatches']} minibatches)"]
    if "grpo_flat" in arms:
        settings.append(f"grpo_flat samples {c['flat_samples']} responses per prompt at the trees' temperature, "
                        "each as long as the trees' deepest path")
    if "dpo" in arms:
        settings.append(f"DPO lr {c['dpo_lr']}, beta {c['dpo_beta']}, {c['dpo_epochs']} epochs per round, step pairs "
                        f"on '{c['dpo_continuation']}' continuations plus up to 4 response pairs per prompt, the trees' "
                        "own log-probabilities as reference (iterative DPO)")
    if "rs_sft" in arms:
        settings.append(f"RS-SFT lr {c['rs_lr']}, at most {c['rs_max_per_prompt']} verified responses per prompt, "
                        f"{c['rs_epochs']} epochs per round")
    critic = " (+ 8 N per trained token for ppo's critic: a forward for the old values, a forward and backward " \
             "for its update)" if "ppo" in arms else ""
    text = [
        f"Command (from the repository root): `{command}` ({summary['seconds'] / 60:.1f} min; runs finished "
        "earlier with the same settings are reused from their evaluations.json, and their training seconds are in "
        "the table)",
        "", machine, "",
        "Arms: " + "; ".join(ARM_TEXT[a] for a in arms) + ".",
        "",
        f"From one cold start (`lab.cold_start.cold_start`, ~1M-parameter Llama, reused by every arm), each arm grows "
        f"its trees (MCTS: {c['simulations']} simulations, 2 candidates per expansion; {c['prompts_per_iteration']} "
        "prompts per iteration; valued by the verifier on finished responses: no critic guides any search) with its "
        f"current policy and learns from them until it has generated {c['token_budget']:,} tokens; seeds {c['seeds']}. "
        f"Pass@1: {c['eval_samples']} samples at temperature 1 on each of {c['eval_problems']} held-out problems "
        "(none in the SFT or RL training sets). " + "; ".join(settings) + ". "
        f"FLOPs = 2 N (generated + computed prompt tokens) + 6 N (trained tokens){critic}.",
        "", markdown(summary), "", _verdict(summary["arms"]), "",
        f"![pass@1 against generated tokens](img/{images}/curves.png)",
    ]
    if rm is not None:
        last = rm["history"][-1]
        text += ["", f"The outcome reward model (`rl.reward_model`, {rm['parameters']:,} parameters, the cold start's "
                 f"trunk; lr {c['reward_model_lr']}, {c['reward_model_epochs']} epochs) was trained on {rm['train_pairs']:,} "
                 f"correct-vs-incorrect response pairs from {rm['trees']} "
                 f"stored trees (every run's); held-out pair accuracy "
                 f"{last.get('heldout_accuracy', float('nan')):.3f} on {rm['heldout_pairs']} pairs. It reranks "
                 f"samples of the cold start on the same held-out problems (sampling seeds {c['rerank_seeds']}).",
                 "", f"![reranking](img/{images}/reranking.png)"]
    text += ["", f"Artifacts: {artifacts}."]
    return "\n".join(text)
