"""Several demo runs (one per seed) side by side: the mean RL gain with its 95% t-interval over the runs, and
the loop value's held-out sibling accuracy per RL iteration against the policy's step confidence.

    python scripts/demo.py --seed 0 --output_dir runs/demo_s0     # ... one run per seed
    python scripts/demo_seeds.py --runs runs/demo_s* --out runs/demo_seeds

Writes <out>/seeds.csv (one row per run), <out>/seeds.md (the table and the means) and two plots:
pass_at_1_per_seed.png (before and after RL, with each run's 95% interval) and value_during_rl.png (the
value's sibling accuracy per iteration, one line per run, the step confidence after RL dashed).
"""

from __future__ import annotations

import csv
import json
import math
import statistics
import sys
from pathlib import Path

from lab.demo_report import finish_value_axes, save_figure
from rl.cli import ArgumentParser, output_dir

T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086}
"""Student's t 97.5% quantiles by degrees of freedom (a two-sided 95% interval); beyond 20, 2.086 (slightly wide)."""


def t_interval(values: list[float]) -> tuple[float, float | None, float | None]:
    """(mean, low, high): the 95% Student-t interval of the mean over independent runs (None with one run)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None, None
    half = T_975.get(len(values) - 1, T_975[20]) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def read_runs(folders: list[str]) -> list[dict]:
    """Each run's summary.json, in seed order; one clear error for a folder without one."""
    runs = []
    for folder in folders:
        path = Path(folder) / "summary.json"
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist: pass the --output_dir folders of finished demo runs")
        runs.append(json.loads(path.read_text()))
    return sorted(runs, key=lambda s: s["config"]["seed"])


def _value_key(summary: dict) -> str:
    return "loop_value" if summary["value_source"] == "loop" else "teacher"


def rows_of(runs: list[dict]) -> list[dict]:
    rows = []
    for s in runs:
        key = _value_key(s)
        rows.append({"seed": s["config"]["seed"], "value_source": s["value_source"], "gold_traces": s["gold_traces"],
                     "pass@1_before_rl": s["pass@1_before_rl"], "pass@1_after_rl": s["pass@1_after_rl"],
                     "rl_gain_points": s["rl_gain_points"],
                     "value_sibling_accuracy": s.get(f"{key}_sibling_accuracy"),
                     "value_start_sibling_accuracy": s.get("value_start_sibling_accuracy"),
                     "confidence_sibling_accuracy": s.get("confidence_sibling_accuracy"),
                     "seconds": s["seconds"]})
    return rows


def plot(runs: list[dict], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for k, s in enumerate(runs):
        for phase, dx, marker in (("before_rl", -0.1, "o"), ("after_rl", 0.1, "s")):
            low, high = s[f"pass@1_interval_{phase}"]
            ax.errorbar(k + dx, s[f"pass@1_{phase}"], yerr=[[s[f"pass@1_{phase}"] - low], [high - s[f"pass@1_{phase}"]]],
                        fmt=marker, color="C0" if phase == "before_rl" else "C1",
                        label=phase.replace("_", " ") if k == 0 else None)
    ax.set_xticks(range(len(runs)), [f"seed {s['config']['seed']}" for s in runs])
    ax.set_ylabel("held-out pass@1 (95% interval)")
    ax.set_title(f"RL in the RLVR setting ({runs[0]['value_source']} value, gold budget {runs[0]['gold_traces']})",
                 fontsize=9)
    first = save_figure(fig, ax, out / "pass_at_1_per_seed.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    for k, s in enumerate(runs):
        history = [r for r in s.get(f"{_value_key(s)}_history", []) if r["sibling_accuracy"] is not None]
        ax.plot([r["iteration"] for r in history], [r["sibling_accuracy"] for r in history], marker="o",
                color=f"C{k}", label=f"seed {s['config']['seed']}: the searching value")
        if s.get("confidence_sibling_accuracy") is not None:
            ax.axhline(s["confidence_sibling_accuracy"], color=f"C{k}", linestyle="--", linewidth=1)
    ax.set_title("Solid: the value the searches used; dashed: the policy's step confidence after RL", fontsize=9)
    return [first, finish_value_axes(fig, ax, out / "value_during_rl.png", legend_size=7)]


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--runs", nargs="+", required=True, help="the --output_dir folders of finished demo runs")
    parser.add_argument("--out", type=output_dir, required=True, help="folder for seeds.csv, seeds.md and the plots")
    args = parser.parse_args(argv)
    try:
        runs = read_runs(args.runs)
    except (FileNotFoundError, json.JSONDecodeError) as error:
        parser.error(str(error))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = rows_of(runs)
    with open(out / "seeds.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    fmt = lambda x: "" if x is None else f"{x:.3f}"  # noqa: E731
    lines = ["| seed | pass@1 before RL | after RL | gain (points) | value sibling acc. | its start | confidence "
             "| seconds |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['seed']} | {r['pass@1_before_rl']:.3f} | {r['pass@1_after_rl']:.3f} | {r['rl_gain_points']:+.1f} "
              f"| {fmt(r['value_sibling_accuracy'])} | {fmt(r['value_start_sibling_accuracy'])} "
              f"| {fmt(r['confidence_sibling_accuracy'])} | {r['seconds']:.0f} |" for r in rows]
    mean, low, high = t_interval([r["rl_gain_points"] for r in rows])
    interval = f" [{low:.1f}, {high:.1f}]" if low is not None else ""
    lines += ["", f"Mean RL gain over {len(rows)} runs: {mean:+.1f} points{interval} (95% t-interval over runs)."]
    for name in ("value_sibling_accuracy", "confidence_sibling_accuracy"):
        values = [r[name] for r in rows if r[name] is not None]
        if values:
            m, lo, hi = t_interval(values)
            lines.append(f"Mean {name.replace('_', ' ')}: {m:.3f}" + (f" [{lo:.3f}, {hi:.3f}]." if lo is not None else "."))
    (out / "seeds.md").write_text("\n".join(lines) + "\n")
    plot(runs, out)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
