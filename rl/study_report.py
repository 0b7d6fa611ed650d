"""The value study's outputs (rl/study.py): the graded values as files, and the "Values that guide search"
section of docs/results.md with each of issue 13's targets stated as met or not."""

from __future__ import annotations

from pathlib import Path

from planner.value_report import value_means, write_value_rows

__all__ = ["SECTION", "write_values", "section_body"]

SECTION = "Values that guide search"


def write_values(rows: list[dict], out: Path) -> dict:
    """values.csv, values.json and sibling_accuracy.png under out/values; returns {"values": per-scorer means}."""
    write_value_rows(rows, out / "values")
    return {"values": value_means(rows)}


def _num(value, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _with_interval(value, interval) -> str:
    return _num(value) + (f" ({interval[0]:.3f}-{interval[1]:.3f})" if interval else "")


def _points(summary: dict, strategy: str) -> list[dict]:
    return summary["curves"].get(strategy, [])


def _curve_rows(summary: dict) -> list[str]:
    lines = ["| curve | size | accuracy (95% interval) | generated tokens / problem | FLOPs / problem |",
             "|---|---:|---|---:|---:|"]
    for strategy, points in summary["curves"].items():
        for p in points:
            lines.append(f"| {strategy} | {p['size']} | {_with_interval(p['accuracy_mean'], [p['accuracy_low'], p['accuracy_high']])}"
                         f" | {p['generated_tokens_per_problem_mean']:,.0f} | {p['flops_per_problem_mean']:.2e} |")
    return lines


def _beats_at_equal_flops(summary: dict, strategy: str, baseline: str = "best_of_n") -> bool | None:
    """Whether every point of `strategy` is above the baseline's accuracy interpolated at its FLOPs (None
    where no baseline point lies at or beyond it to compare with)."""
    base = sorted((p["flops_per_problem_mean"], p["accuracy_mean"]) for p in _points(summary, baseline))
    verdicts = []
    for p in _points(summary, strategy):
        x = p["flops_per_problem_mean"]
        if not base or x > base[-1][0]:
            continue
        below = [b for b in base if b[0] <= x]
        above = [b for b in base if b[0] >= x]
        if not below:
            reference = above[0][1]
        else:
            (x0, y0), (x1, y1) = below[-1], above[0]
            reference = y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
        verdicts.append(p["accuracy_mean"] > reference)
    return all(verdicts) if verdicts else None


def _rising(points: list[dict]) -> bool:
    accuracies = [p["accuracy_mean"] for p in sorted(points, key=lambda p: p["size"])]
    return len(accuracies) >= 3 and all(b > a for a, b in zip(accuracies, accuracies[1:]))


def _above(value, reference) -> bool | None:
    return None if value is None or reference is None else value > reference


def _met(flag) -> str:
    return "**met**" if flag else ("**not measured**" if flag is None else "**not met**")


def section_body(summary: dict, command: str, machine: str, artifacts: str) -> str:
    """The docs/results.md section from the study's summary."""
    c, values, prm = summary["config"], summary["values"], summary["prm"]
    lines = [f"Command (from the repository root; {summary['seconds'] / 60:.1f} min in all): `{command}`", "",
             machine, "",
             f"The embedded arithmetic task; {c['problems']} held-out problems; sampling seeds {c['seeds']} "
             f"(Monte-Carlo-{c['mc_rollouts']} graded on the first seed only: its rollouts cost most). The process "
             "oracle (`verifiers.arithmetic.step_value`) grades and labels training data; no search reads it. "
             f"Stage seconds: {summary['stage_seconds']}.", "",
             f"The PRM (`rl/prm.py`: the policy's trunk, a per-token head pooled over the last step, the step's "
             f"confidence as an input, BCE + sibling pairwise loss) trained on {prm['examples']:,} sibling steps of "
             f"{c['train_problems']} training problems, labelled by "
             + ("Monte-Carlo rollouts against the reference" if c["prm_labels"] == "mc" else "the process oracle")
             + f" (label mean {prm['label_mean']:.2f}), {c['prm_epochs']} epochs in {prm['seconds']:.0f} s.", "",
             "### Sibling ranking and the other value metrics", "",
             "Mean over seeds; in brackets the widest of the seeds' 95% intervals (bootstrap over problems). A "
             "Monte-Carlo scorer runs no model of its own: its cost is its rollouts' generated tokens, policy FLOPs "
             "that the FLOPs column does not show (about k x 30 tokens per scored prefix here).", "",
             "| value | sibling-ranking accuracy | step AUC within depths | reranking 8 samples | majority of 8 "
             "| ECE | FLOPs per scored prefix |", "|---|---|---|---|---|---:|---:|"]
    for name, v in values.items():
        lines.append(f"| {name} | {_with_interval(v['sibling_accuracy'], v['sibling_accuracy_interval'])} | "
                     f"{_with_interval(v['step_auc'], v['step_auc_interval'])} | "
                     f"{_with_interval(v['rerank_accuracy'], v['rerank_accuracy_interval'])} | "
                     f"{_num(v['majority_accuracy'])} | {_num(v['ece'])} | {v['flops_per_prefix']:.2e} |")
    lines += ["", "![sibling-ranking accuracy](img/study/sibling_accuracy.png)", "",
              "### Search against best-of-N at equal compute", "",
              "Best-of-N with a majority vote against beam search guided by the policy's step confidence and by "
              "the PRM (FLOPs include the PRM's forward passes; the confidence costs none).", "", *_curve_rows(summary["search"]),
              "", "![accuracy against FLOPs](img/study/search_accuracy_vs_flops.png)", "",
              "### Budget forcing", "",
              "Thinking budgets b (at most b thinking tokens, an end of thinking before b/2 replaced by \"Wait\") on "
              "the plain cold start and on one trained with self-correction traces "
              f"({c['self_correction']:.0%} of its data).", "", *_curve_rows(summary["forcing"]), "",
              "![budget forcing](img/study/forcing_accuracy_vs_tokens.png)", ""]
    prm_v, conf_v = values.get("prm", {}), values.get("confidence", {})
    mc_v = values.get(f"mc{c['mc_rollouts']}", {})
    prm_sib, conf_sib = prm_v.get("sibling_accuracy"), conf_v.get("sibling_accuracy")
    per_flop = (prm_sib is not None and mc_v.get("sibling_accuracy") is not None
                and prm_sib >= mc_v["sibling_accuracy"] and prm_v["flops_per_prefix"] <= mc_v["flops_per_prefix"])
    forcing = {s: _rising(points) for s, points in summary["forcing"]["curves"].items()}
    lines += ["### Issue 13's targets on these numbers", "",
              f"- The learned value's sibling-ranking accuracy >= 0.95 and above the step confidence: "
              f"{_met(prm_sib is not None and prm_sib >= 0.95 and bool(_above(prm_sib, conf_sib)))} (PRM {_num(prm_sib)}, "
              f"confidence {_num(conf_sib)}).",
              f"- It beats Monte-Carlo-{c['mc_rollouts']} per FLOP (at least as accurate, no more FLOPs per prefix): "
              f"{_met(per_flop)}.",
              f"- PRM-guided beam above best-of-N majority at equal FLOPs at every budget: "
              f"{_met(_beats_at_equal_flops(summary['search'], 'beam_prm'))}; confidence-guided beam: "
              f"{_met(_beats_at_equal_flops(summary['search'], 'beam_confidence'))}.",
              f"- As a reranker of 8 samples the PRM beats majority vote: "
              f"{_met(_above(prm_v.get('rerank_accuracy'), prm_v.get('majority_accuracy')))} "
              f"({_num(prm_v.get('rerank_accuracy'))} against {_num(prm_v.get('majority_accuracy'))}).",
              *(f"- Budget forcing's accuracy rises with the budget over {len(c['forcing'])} budgets ({s}): "
                f"{_met(flag)}." for s, flag in forcing.items()), "",
              f"Artifacts: {artifacts}."]
    return "\n".join(lines)
