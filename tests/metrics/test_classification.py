"""Classification metrics against scikit-learn and a brute-force nearest neighbour."""

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, balanced_accuracy_score

from tf_svmax import metrics

pytestmark = pytest.mark.all_backends


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


def test_class_ids_are_exact_values_of_any_type():
    """Labels are class ids compared as they are: 0.2 and 0.7 are two classes (they were both
    int(.) = 0), strings are ids, and an int label equals the same float prediction."""
    out = metrics.classification_accuracies([0.2, 0.7], [0.2, 0.2])
    assert out["per_class_accuracy"] == {0.2: 1.0, 0.7: 0.0}
    assert out["macro_accuracy"] == 0.5 and out["accuracy"] == 0.5
    out = metrics.classification_accuracies(["cat", "dog", "dog"], ["cat", "cat", "dog"])
    assert out["per_class_accuracy"] == {"cat": 1.0, "dog": 0.5}
    assert all(type(k) is str for k in out["per_class_accuracy"])
    out = metrics.classification_accuracies(np.array([1, 2]), np.array([1.0, 3.0]))
    assert out["per_class_accuracy"] == {1: 1.0, 2: 0.0}
    assert all(type(k) is int for k in out["per_class_accuracy"])


@pytest.mark.parametrize(
    "labels, predictions, match",
    [
        ([0.0, np.nan], [0.0, 0.0], r"argument `labels`.*no NaN.*nan at 1"),
        ([0.0, 1.0], [0.0, np.inf], r"argument `predictions`.*no NaN/inf.*inf at 1"),
        ([0, None], [0, 0], r"argument `labels`.*None at index 1"),
        ([1, "1"], [1, 1], r"argument `labels`.*one type.*mixed list of int, str"),
        (["a", "b"], [0, 1], r"argument `predictions`.*the labels' kind \(str\)"),
        ([], [], r"argument `labels`.*at least one"),
    ],
)
def test_accuracies_refuse_labels_that_are_not_class_ids(labels, predictions, match):
    with pytest.raises(ValueError, match=match):
        metrics.classification_accuracies(labels, predictions)


def _agreement_case(**changes):
    rng = np.random.default_rng(2)
    case = {
        "train_embeddings": rng.normal(size=(10, 3)),
        "train_labels": np.arange(10) % 3,
        "test_embeddings": rng.normal(size=(8, 3)),
        "test_labels": np.arange(8) % 3,
        "predictions": (np.arange(8) + 1) % 3,
    }
    case.update(changes)
    return case


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"train_labels": np.arange(5)}, r"`train_labels`.*one label per row.*\(10\).*5"),
        ({"test_embeddings": np.zeros((5, 3))}, r"`test_embeddings`.*one row per.*\(8\).*5"),
        ({"train_embeddings": np.zeros(10)}, r"`train_embeddings`.*2-D.*\(10,\)"),
        ({"test_embeddings": np.zeros((8, 2))}, r"`test_embeddings`.*3 columns.*\(8, 2\)"),
        (
            {"train_embeddings": np.zeros((0, 3)), "train_labels": []},
            r"`train_embeddings`.*at least 1 row",
        ),
        ({"train_embeddings": np.full((10, 3), np.nan)}, r"`train_embeddings`.*finite"),
        ({"train_labels": (np.arange(10) % 3).astype(str)}, r"`train_labels`.*kind \(number\)"),
        ({"predictions": [0, 1]}, r"`predictions`"),
    ],
)
def test_error_neighbour_agreement_checks_its_inputs(changes, match):
    with pytest.raises(ValueError, match=match):
        metrics.neighbour_agreement_of_errors(**_agreement_case(**changes))


def test_knn_accuracy_matches_a_brute_force_vote():
    rng = np.random.default_rng(1)
    train, test = rng.normal(size=(60, 5)), rng.normal(size=(25, 5))
    train_y, test_y = rng.integers(0, 3, 60), rng.integers(0, 3, 25)
    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)  # noqa: E731
    nearest = np.argsort(-unit(test) @ unit(train).T, axis=1)[:, :7]
    votes = np.array([np.bincount(train_y[row], minlength=3).argmax() for row in nearest])
    expected = float((votes == test_y).mean())
    assert metrics.knn_accuracy(train, train_y, test, test_y, k=7) == pytest.approx(expected)


def test_linear_probe_separates_separable_classes():
    rng = np.random.default_rng(2)
    centres = rng.normal(size=(4, 6)) * 10
    labels = np.repeat(np.arange(4), 30)
    x = centres[labels] + rng.normal(size=(120, 6))
    acc = metrics.linear_probe_accuracy(x[::2], labels[::2], x[1::2], labels[1::2])
    assert acc == 1.0
    shuffled = rng.permutation(labels)  # labels unrelated to the features: near chance
    chance = metrics.linear_probe_accuracy(x[::2], shuffled[::2], x[1::2], shuffled[1::2])
    assert chance < 0.6


def test_probes_refuse_mismatched_inputs_naming_the_argument():
    x, y = np.eye(4), np.array([0, 1, 0, 1])
    with pytest.raises(ValueError, match="`train_labels`.*one label per row"):
        metrics.knn_accuracy(x, y[:3], x, y, k=1)
    with pytest.raises(ValueError, match="`test_features`.*4 columns"):
        metrics.knn_accuracy(x, y, x[:, :3], y, k=1)
    with pytest.raises(ValueError, match="`test_labels`.*kind"):
        metrics.knn_accuracy(x, y, x, np.array(["a", "b", "a", "b"]), k=1)
    with pytest.raises(ValueError, match="`k`.*at most the 4 training rows"):
        metrics.knn_accuracy(x, y, x, y, k=5)
    with pytest.raises(ValueError, match="`train_features`"):
        metrics.linear_probe_accuracy(np.full((4, 4), np.nan), y, x, y)
    with pytest.raises(ValueError, match="`train_labels`.*at least two classes"):
        metrics.linear_probe_accuracy(x, np.zeros(4), x, y)
