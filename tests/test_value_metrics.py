"""The value metrics against numbers computed by hand."""

import math

import pytest

from planner.value_metrics import (auc, auc_within_depths, expected_calibration_error, rerank_accuracy,
                                   sibling_accuracy, sibling_pairs)


def test_sibling_pairs_by_hand():
    # labels 1, 0, 0, 1 and values .9, .5, .95, .5: mixed pairs (correct, wrong) = (0,1) (0,2) (3,1) (3,2)
    # (0,1): .9 > .5 right; (0,2): .9 < .95 wrong; (3,1): .5 = .5 tie -> 1/2; (3,2): .5 < .95 wrong
    assert sibling_pairs([.9, .5, .95, .5], [1, 0, 0, 1]) == (1.5, 4)
    assert sibling_pairs([.1, .2], [0, 0]) == (0.0, 0)  # no mixed pair
    assert sibling_accuracy([([.9, .5, .95, .5], [1, 0, 0, 1]), ([.3, .2], [1, 0]), ([.1], [1])]) == 2.5 / 5
    assert sibling_accuracy([([.1, .2], [0, 0])]) is None


def test_auc_by_hand():
    # positives .8 .4; negatives .5 .4 .1: .8 beats all three; .4 beats .1, ties .4, loses to .5 -> (3 + 1.5) / 6
    assert auc([.8, .5, .4, .4, .1], [1, 0, 1, 0, 0]) == pytest.approx(4.5 / 6)
    assert auc([.3, .2], [1, 1]) is None
    by_depth = auc_within_depths([.8, .2, .6, .6, .9], [1, 0, 1, 0, 1], depths=[0, 0, 1, 1, 2])
    assert by_depth == {0: 1.0, 1: 0.5}  # depth 2 has only one class


def test_expected_calibration_error_by_hand():
    # bin [0.1, 0.2): values .15 .15, labels 0 1 -> |.15 - .5| = .35, weight 2/5
    # bin [0.9, 1.0]: values .95 1.0 .9, labels 1 1 0 -> mean value .95, accuracy 2/3 -> |.95 - .6667|, weight 3/5
    ece = expected_calibration_error([.15, .15, .95, 1.0, .9], [0, 1, 1, 1, 0])
    assert ece == pytest.approx(0.4 * 0.35 + 0.6 * abs(0.95 - 2 / 3))
    assert math.isclose(expected_calibration_error([0.0, 1.0], [0, 1]), 0.0)


def test_rerank_accuracy_by_hand():
    # problem 1 picks sample 2 (correct); problem 2 picks sample 0 (wrong, first of the tied .7s)
    assert rerank_accuracy([[.1, .2, .9], [.7, .7, .1]], [[0, 0, 1], [0, 1, 1]]) == 0.5
