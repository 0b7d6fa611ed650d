"""The demo's report: `report.md` with every number of `summary.json`, and one plot of both phases."""

from __future__ import annotations

from pathlib import Path

__all__ = ["write_report", "plot_before_after"]


def plot_before_after(out: Path) -> Path:
    """Accuracy against generated tokens per problem, before RL (dashed) and after (solid)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from planner.scaling import curve, read_csv

    fig, ax = plt.subplots(figsize=(7, 4.6))
    colors = {}
    for phase, style in (("before_rl", "--"), ("after_rl", "-")):
        rows = read_csv(out / f"scaling_{phase}" / "results.csv")
        for strategy in dict.fromkeys(r["strategy"] for r in rows):
            points = curve(rows, strategy)
            kwargs = {"color": colors[strategy]} if strategy in colors else {}
            (line,) = ax.plot([p["x_mean"] for p in points], [p["accuracy_mean"] for p in points], style,
                              marker="o", label=f"{strategy}, {phase.replace('_', ' ')}", **kwargs)
            colors.setdefault(strategy, line.get_color())
    ax.set_xscale("log")
    ax.set_xlabel("generated tokens per problem (log scale)")
    ax.set_ylabel("accuracy (held-out arithmetic)")
    ax.set_title("Search before RL (dashed, Monte-Carlo scorer) and after RL (solid, trained critic)", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    path = out / "accuracy_vs_tokens_before_after.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _fmt(value, digits: int = 3) -> str:
    if value is None:
        return "not reached"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def write_report(summary: dict, out: Path) -> Path:
    plot = plot_before_after(out)
    lines = [
        "# Demo report", "",
        f"Backend: {summary['backend']}; wall time {summary['seconds']:.0f} s "
        f"(stages: {', '.join(f'{k} {v:.0f} s' for k, v in summary['stage_seconds'].items())}).", "",
        "## Pass@1 (held-out, sampled at temperature 1)", "",
        "| | before RL (cold start) | after RL |", "|---|---:|---:|",
        f"| pass@1 | {summary['pass@1_before_rl']:.3f} | {summary['pass@1_after_rl']:.3f} |",
    ]
    k = summary["config"]["pass_samples"]
    lines += [f"| pass@{k} | {summary[f'pass@{k}_before_rl']:.3f} | {summary[f'pass@{k}_after_rl']:.3f} |", "",
              f"RL changed sampled pass@1 by {summary['rl_gain_points']:+.1f} points.", "",
              "## Accuracy per strategy and budget", "",
              "| strategy | budget | accuracy before RL | tokens/problem before | accuracy after RL | tokens/problem after |",
              "|---|---:|---:|---:|---:|---:|"]
    before, after = summary["scaling_before_rl"], summary["scaling_after_rl"]
    for strategy in before:
        for budget in before[strategy]:
            b, a = before[strategy][budget], after.get(strategy, {}).get(budget, {})
            lines.append(f"| {strategy} | {budget} | {b['accuracy']:.3f} | {b['tokens_per_problem']:.0f} | "
                         f"{_fmt(a.get('accuracy'))} | {_fmt(a.get('tokens_per_problem'), 0)} |")
    lines += ["", "Before RL, beam and MCTS are valued by Monte-Carlo rollouts (majority agreement, no reference);"
              " after RL by the trained critic.", ""]
    for phase in ("before_rl", "after_rl"):
        reach = summary[f"tokens_to_best_of_n_best_{phase}"]
        lines += [f"## Tokens to reach best-of-N-majority's best accuracy, {phase.replace('_', ' ')}", "",
                  f"Best-of-N majority's best accuracy: {reach['best_of_n_best_accuracy']:.3f}, at "
                  f"{reach['best_of_n_tokens_at_best']:.0f} generated tokens per problem.", "",
                  "| strategy | tokens per problem to reach it | best-of-N tokens / these |", "|---|---:|---:|"]
        for strategy, row in reach["strategies"].items():
            lines.append(f"| {strategy} | {_fmt(row['tokens_per_problem'], 0)} | "
                         f"{_fmt(row['fewer_tokens_than_best_of_n'], 2)} |")
        lines.append("")
    targets = summary["targets"]
    lines += ["## Targets", "",
              f"- RL raises sampled pass@1 by at least 20 points: **{'met' if targets['rl_gain_at_least_20_points'] else 'not met'}**"
              f" ({summary['rl_gain_points']:+.1f} points).",
              f"- Beam or MCTS with the trained critic reaches best-of-N-majority's best accuracy with at least 4x fewer"
              f" tokens: **{'met' if targets['critic_search_4x_fewer_tokens'] else 'not met'}** (best saving: "
              f"{_fmt(targets['critic_search_saving'], 2)}{'x' if targets['critic_search_saving'] else ''}).", "",
              f"![accuracy vs tokens]({plot.name})", "",
              "Per-phase plots and CSVs: `scaling_before_rl/`, `scaling_after_rl/`; RL metrics: `rl/metrics.csv`.", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path
