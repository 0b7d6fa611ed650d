"""How well a value ranks what search ranks: the metrics of `planner.value_eval`, as plain functions.

A scorer guides beam search and MCTS by comparing the candidate steps expanded from one parent, so
the first metric is the **sibling-ranking accuracy**: over every pair of siblings whose process-oracle
labels differ, the fraction in which the correct one gets the higher value (a tie counts one half;
random values score 0.5, the oracle 1.0). Pooled AUCs are flattered by depth and difficulty (late,
easy prefixes are both high-valued and correct), so the **step AUC** is taken within each depth and
averaged. **Reranking** picks the highest-valued of N complete samples; **ECE** (expected calibration
error, Naeini et al. 2015) is the bin-weighted gap between mean value and accuracy over 10 equal-width
bins.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["sibling_pairs", "sibling_accuracy", "auc", "auc_within_depths", "expected_calibration_error",
           "rerank_accuracy"]


def sibling_pairs(values: Sequence[float], labels: Sequence[float]) -> tuple[float, int]:
    """(ranked-right credit, pairs) over the pairs of one sibling set whose labels differ: a pair counts
    1 when the higher-labelled sibling has the higher value, 1/2 on a tie, 0 otherwise."""
    credit, pairs = 0.0, 0
    for i in range(len(values)):
        for j in range(len(values)):
            if labels[i] > labels[j]:
                pairs += 1
                credit += 1.0 if values[i] > values[j] else 0.5 if values[i] == values[j] else 0.0
    return credit, pairs


def sibling_accuracy(sets: Sequence[tuple[Sequence[float], Sequence[float]]]) -> float | None:
    """Pairwise ranking accuracy pooled over sibling sets [(values, labels), ...]; None without any
    mixed pair."""
    credit, pairs = 0.0, 0
    for values, labels in sets:
        c, p = sibling_pairs(values, labels)
        credit, pairs = credit + c, pairs + p
    return credit / pairs if pairs else None


def auc(values: Sequence[float], labels: Sequence[float]) -> float | None:
    """Area under the ROC curve (the Mann-Whitney probability that a positive outranks a negative, ties
    one half); None when only one class is present."""
    values, labels = np.asarray(values, dtype=float), np.asarray(labels, dtype=float) > 0.5
    positives, negatives = values[labels], values[~labels]
    if not len(positives) or not len(negatives):
        return None
    greater = (positives[:, None] > negatives[None, :]).sum()
    ties = (positives[:, None] == negatives[None, :]).sum()
    return float((greater + 0.5 * ties) / (len(positives) * len(negatives)))


def auc_within_depths(values: Sequence[float], labels: Sequence[float], depths: Sequence[int]) -> dict[int, float]:
    """AUC per depth (depths where both labels occur)."""
    out = {}
    for depth in sorted(set(depths)):
        index = [k for k, d in enumerate(depths) if d == depth]
        value = auc([values[k] for k in index], [labels[k] for k in index])
        if value is not None:
            out[depth] = value
    return out


def expected_calibration_error(values: Sequence[float], labels: Sequence[float], bins: int = 10) -> float:
    """sum_b (n_b / n) |mean value_b - mean label_b| over `bins` equal-width bins of [0, 1] (a value of
    exactly 1 falls in the last bin)."""
    values, labels = np.asarray(values, dtype=float), np.asarray(labels, dtype=float)
    if not len(values):
        raise ValueError("expected_calibration_error needs at least one value")
    which = np.minimum((values * bins).astype(int), bins - 1)
    error = 0.0
    for b in range(bins):
        inside = which == b
        if inside.any():
            error += inside.mean() * abs(values[inside].mean() - labels[inside].mean())
    return float(error)


def rerank_accuracy(values: Sequence[Sequence[float]], correct: Sequence[Sequence[float]]) -> float:
    """Per problem, the correctness of the highest-valued sample (first on ties), averaged over problems."""
    if not values:
        raise ValueError("rerank_accuracy needs at least one problem")
    return float(np.mean([c[int(np.argmax(v))] for v, c in zip(values, correct)]))
