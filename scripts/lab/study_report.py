"""The value study's outputs (scripts/lab/study.py): the graded values as files, and the "Values that guide search"
section of docs/results.md with each of issue 13's targets stated as met or not."""

from __future__ import annotations

from pathlib import Path

from lab.value_report import value_means, write_value_rows

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


def _value_targets(name: str, label: str, values: dict, search: dict, mc_rollouts: int) -> list[str]:
    """Issue 13's value and search targets for one learned value (`name`: its scorer and its beam_<name> curve)."""
    value, conf, mc = values.get(name, {}), values.get("confidence", {}), values.get(f"mc{mc_rollouts}", {})
    sibling = value.get("sibling_accuracy")
    per_flop = (sibling is not None and mc.get("sibling_accuracy") is not None
                and sibling >= mc["sibling_accuracy"] and value["flops_per_prefix"] <= mc["flops_per_prefix"])
    flops = search.get("flops_to_reach_best_of_n_best", {})
    saving = (flops["best_of_n"] / flops[f"beam_{name}"]
              if flops.get("best_of_n") and flops.get(f"beam_{name}") else None)
    points = sorted(_points(search, f"beam_{name}"), key=lambda p: p["size"])
    monotone = all(b["accuracy_mean"] >= a["accuracy_mean"] for a, b in zip(points, points[1:])) if points else None
    return [f"- {label[0].upper() + label[1:]}: sibling-ranking accuracy >= 0.95 and above the step confidence: "
            f"{_met(sibling is not None and sibling >= 0.95 and bool(_above(sibling, conf.get('sibling_accuracy'))))} "
            f"({_num(sibling)}, confidence {_num(conf.get('sibling_accuracy'))}); beats Monte-Carlo-{mc_rollouts} per "
            f"FLOP (at least as accurate, no more FLOPs per prefix): {_met(per_flop)}.",
            f"- Beam guided by {label} above best-of-N majority at equal FLOPs at every budget: "
            f"{_met(_beats_at_equal_flops(search, f'beam_{name}'))}; above confidence-guided beam at equal FLOPs: "
            f"{_met(_beats_at_equal_flops(search, f'beam_{name}', 'beam_confidence'))}; reaches majority's best "
            f"accuracy with >= 4x fewer FLOPs: {_met(bool(saving and saving >= 4) if points else None)} "
            f"({'not reached' if saving is None else f'{saving:.1f}x'}); more beams never lower its accuracy: "
            f"{_met(monotone)}.",
            f"- As a reranker of 8 samples {label} beats majority vote: "
            f"{_met(_above(value.get('rerank_accuracy'), value.get('majority_accuracy')))} "
            f"({_num(value.get('rerank_accuracy'))} against {_num(value.get('majority_accuracy'))})."]


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
             + f" (label mean {prm['label_mean']:.2f}), {c['prm_epochs']} epochs in {prm['seconds']:.0f} s. The "
             f"generative verifier (`scripts/lab/verifier_lm.py`, `{summary['verifier']['folder']}`): a separate LM of "
             f"{summary['verifier']['parameters']:,} parameters trained to convergence on gold traces of training "
             "problems, scoring a prefix by its probability of the least likely response token.", "",
             "### Sibling ranking and the other value metrics", "",
             "Mean over seeds; in brackets the widest of the seeds' 95% intervals (bootstrap over problems). A "
             "Monte-Carlo scorer's FLOPs per prefix are its rollouts' policy FLOPs.", "",
             "| value | sibling-ranking accuracy | step AUC within depths | reranking 8 samples | majority of 8 "
             "| ECE | FLOPs per scored prefix |", "|---|---|---|---|---|---:|---:|"]
    for name, v in values.items():
        lines.append(f"| {name} | {_with_interval(v['sibling_accuracy'], v['sibling_accuracy_interval'])} | "
                     f"{_with_interval(v['step_auc'], v['step_auc_interval'])} | "
                     f"{_with_interval(v['rerank_accuracy'], v['rerank_accuracy_interval'])} | "
                     f"{_num(v['majority_accuracy'])} | {_num(v['ece'])} | {v['flops_per_prefix']:.2e} |")
    lines += ["", "![sibling-ranking accuracy](img/study/sibling_accuracy.png)", "",
              "### Search against best-of-N at equal compute", "",
              "Best-of-N with a majority vote against beam search guided by the policy's step confidence, by "
              "the PRM and by the generative verifier (FLOPs include the PRM's and the verifier's forward passes; "
              "the confidence costs none).", "", *_curve_rows(summary["search"]),
              "", "![accuracy against FLOPs](img/study/search_accuracy_vs_flops.png)", "",
              "### Budget forcing", "",
              "Thinking budgets b (at most b thinking tokens, an end of thinking before b/2 replaced by \"Wait\") on "
              f"the studied policy (\"plain\": {c['policy'] or 'the cold start trained here'}) "
              "and on a cold start trained with self-correction traces "
              f"({c['self_correction']:.0%} of its data).", "", *_curve_rows(summary["forcing"]), "",
              "![budget forcing](img/study/forcing_accuracy_vs_tokens.png)", ""]
    forcing = {s: _rising(points) for s, points in summary["forcing"]["curves"].items()}
    lines += ["### Issue 13's targets on these numbers", ""]
    for name, label in (("verifier", "the generative verifier"), ("prm", "the PRM")):
        lines += _value_targets(name, label, values, summary["search"], c["mc_rollouts"])
    lines += [f"- Confidence-guided beam above best-of-N majority at equal FLOPs at every budget: "
              f"{_met(_beats_at_equal_flops(summary['search'], 'beam_confidence'))}.",
              *(f"- Budget forcing's accuracy rises with the budget over {len(c['forcing'])} budgets ({s}): "
                f"{_met(flag)}." for s, flag in forcing.items()), "",
              f"Artifacts: {artifacts}."]
    return "\n".join(lines)
