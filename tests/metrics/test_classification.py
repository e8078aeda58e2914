"""Classification metrics against scikit-learn and a brute-force nearest neighbour."""

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, balanced_accuracy_score

from tf_svmax import metrics


def test_micro_macro_and_per_class_accuracy_match_sklearn():
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(4), [50, 20, 5, 2])
    predictions = np.where(rng.random(len(labels)) < 0.7, labels, rng.integers(0, 4, len(labels)))
    out = metrics.classification_accuracies(labels, predictions)
    assert out["accuracy"] == pytest.approx(accuracy_score(labels, predictions))
    # Macro accuracy is the mean per-class recall: sklearn's balanced accuracy.
    assert out["macro_accuracy"] == pytest.approx(balanced_accuracy_score(labels, predictions))
    for c in range(4):
        assert out["per_class_accuracy"][c] == pytest.approx(np.mean(predictions[labels == c] == c))


def test_accuracies_refuse_mismatched_lengths():
    with pytest.raises(ValueError, match="predictions"):
        metrics.classification_accuracies([0, 1, 2], [0, 1])


def test_error_neighbour_agreement_against_brute_force():
    rng = np.random.default_rng(1)
    train, train_labels = rng.normal(size=(60, 5)), rng.integers(0, 6, 60)
    test, test_labels = rng.normal(size=(40, 5)), rng.integers(0, 6, 40)
    predictions = rng.integers(0, 6, 40)
    share, errors = metrics.neighbour_agreement_of_errors(
        train, train_labels, test, test_labels, predictions
    )
    wrong = np.flatnonzero(test_labels != predictions)
    distances = ((test[wrong, None, :] - train[None]) ** 2).sum(-1)
    nearest = train_labels[distances.argmin(axis=1)]
    assert errors == len(wrong)
    assert share == pytest.approx(np.mean(nearest == predictions[wrong]))


def test_error_neighbour_agreement_without_errors_is_nan():
    x = np.eye(3)
    share, errors = metrics.neighbour_agreement_of_errors(x, [0, 1, 2], x, [0, 1, 2], [0, 1, 2])
    assert errors == 0 and np.isnan(share)
