"""The demo's report: `report.md` with every number of `summary.json`, and the before/after plots.

Every accuracy is printed with its 95% interval (a percentile bootstrap over the held-out problems,
`planner.scaling_report`), and every cost both as generated tokens and as total FLOPs (policy plus
scorer: the verifier's forward passes count).
"""

from __future__ import annotations

from pathlib import Path

from planner.scaling_report import curve, read_results

__all__ = ["write_report", "plot_before_after", "plot_value_history", "finish_value_axes", "save_figure"]

AXES = {"generated_tokens_per_problem": "generated tokens per problem",
        "flops_per_problem": "FLOPs per problem (policy + scorer)"}


def plot_before_after(out: Path, value: str = "the loop's own value") -> Path:
    """Accuracy against generated tokens (left) and total FLOPs (right) per problem, before RL (dashed)
    and after (solid), with each point's 95% interval as a band; `value` names what valued the searches."""
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
    fig.suptitle(f"Search before RL (dashed) and after RL (solid); beam and MCTS valued by {value}", fontsize=9)
    fig.tight_layout()
    path = out / "accuracy_vs_compute_before_after.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_value_history(summary: dict, out: Path) -> Path:
    """The searching value's held-out sibling accuracy per RL iteration (band: 95% interval), with the
    policy's step confidence after RL as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    key = "loop_value_history" if summary["value_source"] == "loop" else "teacher_history"
    rows = [r for r in summary.get(key) or [] if r["sibling_accuracy"] is not None]
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [r["iteration"] for r in rows]
    ax.plot(xs, [r["sibling_accuracy"] for r in rows], marker="o", label=key.replace("_history", "").replace("_", " "))
    ax.fill_between(xs, [(r["sibling_accuracy_interval"] or [r["sibling_accuracy"]] * 2)[0] for r in rows],
                    [(r["sibling_accuracy_interval"] or [r["sibling_accuracy"]] * 2)[1] for r in rows], alpha=0.15)
    if summary.get("confidence_sibling_accuracy") is not None:
        ax.axhline(summary["confidence_sibling_accuracy"], color="gray", linestyle="--",
                   label="policy's step confidence (after RL)")
    return finish_value_axes(fig, ax, out / "value_during_rl.png")


def finish_value_axes(fig, ax, path: Path, legend_size: int = 8) -> Path:
    """Label a sibling-accuracy-per-RL-iteration plot (axes, range, the random line), then save it."""
    ax.axhline(0.5, color="black", linewidth=0.5, label="random")
    ax.set_xlabel("RL iteration")
    ax.set_ylabel("held-out sibling-ranking accuracy")
    ax.set_ylim(0.4, 1.02)
    return save_figure(fig, ax, path, legend_size)


def save_figure(fig, ax, path: Path, legend_size: int = 8) -> Path:
    """Legend, grid, tight layout; write the PNG and free the figure."""
    import matplotlib.pyplot as plt

    ax.legend(fontsize=legend_size)
    ax.grid(alpha=0.3)
    fig.tight_layout()
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


def _value_words(summary: dict) -> str:
    if summary["value_source"] == "teacher":
        return ("the TEACHER: a verifier trained to convergence on 20,000 problems' gold traces, far beyond the "
                "run's gold budget (a model the other arms do not get)")
    return (f"the loop's own value (rl/loop_verifier.py: a small LM trained on the {summary['gold_traces']} "
            "gold-budget problems' traces, then every RL iteration on the trees' verified-correct leaves)")


def _graded_values(summary: dict) -> list[tuple[str, str]]:
    """(row label, summary key prefix) of the values graded after RL."""
    if summary["value_source"] == "teacher":
        rows = [("the teacher verifier (guides the searches; trained beyond the gold budget)", "teacher")]
    else:
        rows = [("the loop value after RL (guides the searches)", "loop_value"),
                ("its start, frozen (the gold budget only)", "value_start")]
    return rows + [("the policy's step confidence", "confidence")]


def _history_table(summary: dict) -> list[str]:
    """The searching value's sibling accuracy at each grading during RL."""
    key = "loop_value_history" if summary["value_source"] == "loop" else "teacher_history"
    rows = summary.get(key) or []
    lines = ["### During RL", "", f"`{key}`: held-out sibling accuracy of the value the searches used, by iteration.",
             "", "| iteration | sibling accuracy | step AUC |", "|---:|---:|---:|"]
    lines += [f"| {r['iteration']} | {_with_interval(r['sibling_accuracy'], r['sibling_accuracy_interval'])} | "
              f"{_fmt(r['step_auc'], 3)} |" for r in rows]
    return lines + [""]


def write_report(summary: dict, out: Path) -> Path:
    plot = plot_before_after(out, "the TEACHER verifier" if summary["value_source"] == "teacher"
                             else "the loop's own value")
    history = plot_value_history(summary, out)
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
        *(f"| {label} | {_with_interval(summary[f'{key}_sibling_accuracy'], summary[f'{key}_sibling_accuracy_interval'])}"
          f" | {_fmt(summary[f'{key}_step_auc'], 3)} |"
          for label, key in _graded_values(summary)),
        "", *_history_table(summary),
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
    value = summary["value_start"]
    lines += ["", f"Beam and MCTS are valued by {_value_words(summary)} ({value['parameters']:,} parameters; its start "
              f"trained {value['steps']} SFT steps in {value['seconds']:.0f} s); its forward passes count in the "
              "FLOPs.", ""]
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
    saving = targets["value_search_flops_saving"]
    met = lambda key: "met" if targets[key] else "not met"  # noqa: E731
    lines += ["## Targets one run measures", "",
              f"- RL raises sampled pass@1 by at least 10 points: **{met('rl_gain_at_least_10_points')}** "
              f"({summary['rl_gain_points']:+.1f} points; the target is a mean over 5 seeds).",
              f"- Beam or MCTS with the value reaches best-of-N-majority's best accuracy with at least 3x fewer "
              f"total FLOPs: **{met('value_search_3x_fewer_flops')}** (best saving: {_fmt(saving, 2)}"
              f"{'x' if saving else ''} in FLOPs, {_fmt(targets['value_search_saving'], 2)}"
              f"{'x' if targets['value_search_saving'] else ''} in tokens).",
              f"- The value's sibling accuracy is at least 0.90: **{met('value_sibling_accuracy_at_least_0.90')}**; "
              f"at least the step confidence's + 0.05 with separated intervals: "
              f"**{met('value_beats_confidence_by_0.05_separated')}**.",
              "", f"![accuracy vs compute]({plot.name})", "", f"![value during RL]({history.name})", "",
              "Per-phase plots and CSVs: `scaling_before_rl/`, `scaling_after_rl/`; RL metrics: `rl/metrics.csv`.", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path
