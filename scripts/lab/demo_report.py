"""The demo's report: `report.md` with every number of `summary.json`, and the before/after plots.

Every accuracy is printed with its 95% interval (a percentile bootstrap over the held-out problems,
`planner.scaling_report`), and every cost both as generated tokens and as total FLOPs (policy plus
scorer: the verifier's forward passes count).
"""

from __future__ import annotations

from pathlib import Path

from planner.scaling_report import curve, read_results

__all__ = ["write_report", "plot_before_after"]

AXES = {"generated_tokens_per_problem": "generated tokens per problem",
        "flops_per_problem": "FLOPs per problem (policy + scorer)"}


def plot_before_after(out: Path) -> Path:
    """Accuracy against generated tokens (left) and total FLOPs (right) per problem, before RL (dashed)
    and after (solid), with each point's 95% interval as a band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6), sharey=True)
    for ax, x in zip(axes, AXES):
        colors = {}
        for phase, style in (("before_rl", "--"), ("after_rl", "-")):
            rows = read_results(out / f"scaling_{phase}")
            for strategy in dict.fromkeys(r["strategy"] for r in rows):
                points = curve(rows, strategy, x)
                xs = [p["x_mean"] for p in points]
                kwargs = {"color": colors[strategy]} if strategy in colors else {}
                (line,) = ax.plot(xs, [p["accuracy_mean"] for p in points], style, marker="o",
                                  label=f"{strategy}, {phase.replace('_', ' ')}", **kwargs)
                colors.setdefault(strategy, line.get_color())
                ax.fill_between(xs, [p["accuracy_low"] for p in points], [p["accuracy_high"] for p in points],
                                color=line.get_color(), alpha=0.12, linewidth=0)
        ax.set_xscale("log")
        ax.set_xlabel(AXES[x] + " (log scale)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("accuracy (held-out arithmetic), band: 95% interval")
    axes[0].legend(fontsize=7, ncol=2)
    fig.suptitle("Search before RL (dashed) and after RL (solid); beam and MCTS valued by the generative verifier",
                 fontsize=9)
    fig.tight_layout()
    path = out / "accuracy_vs_compute_before_after.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _fmt(value, digits: int = 3) -> str:
    if value is None:
        return "not reached"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _with_interval(value, interval) -> str:
    """A value with its [low, high] (either may be None: too few pairs to measure)."""
    if value is None:
        return "no pairs"
    return f"{value:.3f}" + (f" [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else "")


def _flops(value) -> str:
    return "not reached" if value is None else f"{value:.2e}"


def _accuracy(cell: dict | None) -> str:
    if not cell:
        return ""
    low, high = cell["accuracy_interval"]
    return f"{cell['accuracy']:.3f} [{low:.3f}, {high:.3f}]"


def write_report(summary: dict, out: Path) -> Path:
    plot = plot_before_after(out)
    k = summary["config"]["pass_samples"]
    interval = lambda phase: "[{:.3f}, {:.3f}]".format(*summary[f"pass@1_interval_{phase}"])  # noqa: E731
    lines = [
        "# Demo report", "",
        f"Backend: {summary['backend']}; wall time {summary['seconds']:.0f} s "
        f"(stages: {', '.join(f'{k} {v:.0f} s' for k, v in summary['stage_seconds'].items())}).", "",
        "Accuracies carry their 95% interval in brackets (percentile bootstrap over the held-out problems).", "",
        "## Pass@1 (held-out, sampled at temperature 1)", "",
        "| | before RL (cold start) | after RL |", "|---|---:|---:|",
        f"| pass@1 | {summary['pass@1_before_rl']:.3f} {interval('before_rl')} | "
        f"{summary['pass@1_after_rl']:.3f} {interval('after_rl')} |",
        f"| pass@{k} | {summary[f'pass@{k}_before_rl']:.3f} | {summary[f'pass@{k}_after_rl']:.3f} |", "",
        f"RL changed sampled pass@1 by {summary['rl_gain_points']:+.1f} points.", "",
        "## The values after RL, graded against the process oracle", "",
        "Sibling steps sampled below the same parent on held-out problems (planner/value_eval.py); sibling "
        "accuracy is the fraction of oracle-different sibling pairs a value orders right (random: 0.5).", "",
        "| value | sibling-ranking accuracy | step AUC within depths |", "|---|---:|---:|",
        *(f"| {name} | {_with_interval(summary[f'{key}_sibling_accuracy'], summary[f'{key}_sibling_accuracy_interval'])}"
          f" | {_fmt(summary[f'{key}_step_auc'], 3)} |"
          for name, key in (("the generative verifier (guides the searches)", "verifier"),
                            (f"the critic trained in the loop (on the {summary['config']['rl_critic']}'s trunk)",
                             "critic"),
                            ("the policy's step confidence", "confidence"))),
        "",
        "## Accuracy per strategy and size", "",
        "| strategy | size | accuracy before RL | tokens/problem | FLOPs/problem | accuracy after RL | tokens/problem "
        "| FLOPs/problem |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    before, after = summary["scaling_before_rl"], summary["scaling_after_rl"]
    for strategy in before:
        for size in before[strategy]:
            b, a = before[strategy][size], after.get(strategy, {}).get(size, {})
            lines.append(f"| {strategy} | {size} | {_accuracy(b)} | {b['tokens_per_problem']:.0f} | "
                         f"{_flops(b['flops_per_problem'])} | {_accuracy(a)} | {_fmt(a.get('tokens_per_problem'), 0)} "
                         f"| {_flops(a.get('flops_per_problem'))} |")
    verifier = summary["verifier"]
    lines += ["", f"Beam and MCTS are valued by the generative verifier (scripts/lab/verifier_lm.py: {verifier['parameters']:,} "
              f"parameters, {verifier['steps']} SFT steps in {verifier['seconds']:.0f} s), before RL, during RL's "
              "searches and after; its forward passes count in the FLOPs.", ""]
    for phase in ("before_rl", "after_rl"):
        reach = summary[f"compute_to_best_of_n_best_{phase}"]
        lines += [f"## Compute to reach best-of-N-majority's best accuracy, {phase.replace('_', ' ')}", "",
                  f"Best-of-N majority's best accuracy: {reach['best_of_n_best_accuracy']:.3f}, at "
                  f"{reach['best_of_n_tokens_at_best']:.0f} generated tokens and "
                  f"{_flops(reach['best_of_n_flops_at_best'])} FLOPs per problem.", "",
                  "| strategy | tokens per problem to reach it | best-of-N tokens / these | FLOPs per problem "
                  "| best-of-N FLOPs / these |", "|---|---:|---:|---:|---:|"]
        for strategy, row in reach["strategies"].items():
            lines.append(f"| {strategy} | {_fmt(row['tokens_per_problem'], 0)} | "
                         f"{_fmt(row['fewer_tokens_than_best_of_n'], 2)} | {_flops(row['flops_per_problem'])} | "
                         f"{_fmt(row['fewer_flops_than_best_of_n'], 2)} |")
        lines.append("")
    targets = summary["targets"]
    saving = targets["critic_search_flops_saving"]
    lines += ["## Targets", "",
              f"- RL raises sampled pass@1 by at least 20 points: "
              f"**{'met' if targets['rl_gain_at_least_20_points'] else 'not met'}** ({summary['rl_gain_points']:+.1f}"
              " points).",
              f"- Beam or MCTS with the learned value (the verifier) reaches best-of-N-majority's best accuracy with "
              f"at least 4x "
              f"fewer total FLOPs: **{'met' if targets['critic_search_4x_fewer_flops'] else 'not met'}** (best "
              f"saving: {_fmt(saving, 2)}{'x' if saving else ''} in FLOPs, "
              f"{_fmt(targets['critic_search_saving'], 2)}{'x' if targets['critic_search_saving'] else ''} in tokens).",
              "", f"![accuracy vs compute]({plot.name})", "",
              "Per-phase plots and CSVs: `scaling_before_rl/`, `scaling_after_rl/`; RL metrics: `rl/metrics.csv`.", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path
