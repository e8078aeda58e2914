"""Classification metrics of the two-head experiments (dissertation Sec. 5.4): micro and macro
accuracy (Table 5.3), per-class accuracy (Table 5.4), and the share of misclassified test images
whose nearest training neighbour in the embedding carries the same wrong label (Sec. 5.4.3's
"79.34 % of misclassified predictions match the label of their nearest training neighbor"),
and the frozen-feature probes of self-supervised pre-training (a linear probe and a k-NN vote,
LORAC seed 003 Sec. 5)."""

import numpy as np
from sklearn.neighbors import NearestNeighbors

from tf_svmax import checks


def _labels_and_predictions(labels, predictions, labels_arg="labels"):
    """Both as `checks.class_labels` arrays: as many predictions as labels (at least one), of
    the labels' kind (a string id never equals a number: every prediction would count wrong)."""
    labels = checks.class_labels(labels, labels_arg)
    predictions = checks.class_labels(predictions, "predictions")
    if not len(labels):
        raise ValueError(checks.invalid(labels_arg, "at least one label", "<empty array>"))
    if labels.shape != predictions.shape:
        raise ValueError(
            checks.invalid(
                "predictions", f"{len(labels)} predictions, one per label", predictions.shape
            )
        )
    _same_kind(labels, labels_arg, predictions, "predictions")
    return labels, predictions


def _same_kind(reference, reference_arg, other, other_arg):
    kind = checks.label_kind(reference)
    if checks.label_kind(other) != kind:
        raise ValueError(
            checks.invalid(
                other_arg,
                f"class ids of the {reference_arg}' kind ({kind})",
                f"<{checks.label_kind(other)} ids>",
            )
        )


def classification_accuracies(labels, predictions):
    """``{"accuracy", "macro_accuracy", "per_class_accuracy"}``.

    ``accuracy`` is the micro average (correct / all), ``macro_accuracy`` the mean of the
    per-class accuracies (each class counts once, however many test images it has), and
    ``per_class_accuracy`` maps each class present in `labels` to its accuracy.

    Labels and predictions are class ids of one kind: numbers, compared as exact values (0.2
    and 0.7 are two classes, 1 and 1.0 one), or strings; NaN, inf and None are refused.
    """
    labels, predictions = _labels_and_predictions(labels, predictions)
    correct = labels == predictions
    classes = np.unique(labels)
    # Keyed by the class id itself, as a Python value (int, float, str or bytes): int(c) made
    # the classes 0.2 and 0.7 one class 0.
    per_class = {c.item(): float(correct[labels == c].mean()) for c in classes}
    return {
        "accuracy": float(correct.mean()),
        "macro_accuracy": float(np.mean(list(per_class.values()))),
        "per_class_accuracy": per_class,
    }


def neighbour_agreement_of_errors(
    train_embeddings, train_labels, test_embeddings, test_labels, predictions
):
    """Among misclassified test images, the share whose nearest training image (Euclidean
    distance in the embedding) has the label the classifier predicted; NaN without errors.

    Args:
      train_embeddings: `[n, d]` finite training embeddings (n >= 1).
      train_labels: `[n]` class ids of the training images, of the predictions' kind.
      test_embeddings: `[m, d]` finite test embeddings.
      test_labels, predictions: `[m]` true and predicted class ids (see
        `classification_accuracies`).

    Returns ``(share, number_of_errors)``.
    """
    test_labels, predictions = _labels_and_predictions(test_labels, predictions, "test_labels")
    train = checks.finite_matrix(train_embeddings, "train_embeddings")
    train_labels = checks.class_labels(train_labels, "train_labels")
    _one_label_per_row(train, train_labels, "train_embeddings", "train_labels")
    # The nearest training label is compared with the prediction: of one kind, or never equal.
    _same_kind(predictions, "predictions", train_labels, "train_labels")
    test = checks.finite_matrix(test_embeddings, "test_embeddings")
    if len(test) != len(test_labels):
        raise ValueError(
            checks.invalid(
                "test_embeddings",
                f"one row per test label ({len(test_labels)})",
                f"<shape {test.shape}>",
            )
        )
    _same_columns(test, train, "test_embeddings", "train_embeddings")
    wrong = test_labels != predictions
    if not wrong.any():
        return float("nan"), 0
    index = NearestNeighbors(n_neighbors=1).fit(train)
    nearest = index.kneighbors(test[wrong], return_distance=False)[:, 0]
    return float(np.mean(train_labels[nearest] == predictions[wrong])), int(wrong.sum())


def _one_label_per_row(features, labels, features_arg, labels_arg):
    if len(labels) != len(features):
        raise ValueError(
            checks.invalid(
                labels_arg,
                f"one label per row of `{features_arg}` ({len(features)})",
                f"<{len(labels)} labels>",
            )
        )


def _same_columns(test, train, test_arg, train_arg):
    if test.shape[1] != train.shape[1]:
        raise ValueError(
            checks.invalid(
                test_arg, f"{train.shape[1]} columns, as `{train_arg}`", f"<shape {test.shape}>"
            )
        )


def _probe_inputs(train_features, train_labels, test_features, test_labels):
    """The four checked: finite feature matrices with one label per row, the same columns, and
    labels of one kind (a string id never equals a number)."""
    train = checks.finite_matrix(train_features, "train_features")
    test = checks.finite_matrix(test_features, "test_features")
    train_labels = checks.class_labels(train_labels, "train_labels")
    test_labels = checks.class_labels(test_labels, "test_labels")
    _one_label_per_row(train, train_labels, "train_features", "train_labels")
    _one_label_per_row(test, test_labels, "test_features", "test_labels")
    _same_columns(test, train, "test_features", "train_features")
    _same_kind(train_labels, "train_labels", test_labels, "test_labels")
    return train, train_labels, test, test_labels


def linear_probe_accuracy(train_features, train_labels, test_features, test_labels, *, seed=0):
    """Top-1 test accuracy of a logistic regression trained on frozen features (scikit-learn:
    standardised features, L-BFGS, C = 1, at most 2,000 iterations).

    Args:
      train_features: `[n, d]` finite features the probe is fitted on.
      train_labels: `[n]` class ids (at least two classes).
      test_features: `[m, d]` finite features it is scored on.
      test_labels: `[m]` class ids of the training labels' kind.
      seed: The solver's `random_state`.

    Example:
      >>> linear_probe_accuracy(train_f, train_y, test_f, test_y)
    """
    from sklearn.linear_model import LogisticRegression  # noqa: PLC0415
    from sklearn.pipeline import make_pipeline  # noqa: PLC0415
    from sklearn.preprocessing import StandardScaler  # noqa: PLC0415

    train, train_labels, test, test_labels = _probe_inputs(
        train_features, train_labels, test_features, test_labels
    )
    seed = checks.check_non_negative_int(seed, "seed")
    if len(np.unique(train_labels)) < 2:
        raise ValueError(checks.invalid("train_labels", "at least two classes", "<one class>"))
    probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000, random_state=seed))
    probe.fit(train, train_labels)
    return float(probe.score(test, test_labels))


def knn_accuracy(train_features, train_labels, test_features, test_labels, *, k):
    """Top-1 test accuracy of a majority vote among the `k` nearest training rows under the
    cosine distance (scikit-learn's `KNeighborsClassifier`; a tied vote goes to the smallest
    class id).

    Args:
      train_features: `[n, d]` finite features (the voters).
      train_labels: `[n]` their class ids.
      test_features: `[m, d]` finite features to classify.
      test_labels: `[m]` class ids of the training labels' kind.
      k: Voters per test row, 1 <= k <= n.

    Example:
      >>> knn_accuracy(train_f, train_y, test_f, test_y, k=10)
    """
    from sklearn.neighbors import KNeighborsClassifier  # noqa: PLC0415

    train, train_labels, test, test_labels = _probe_inputs(
        train_features, train_labels, test_features, test_labels
    )
    k = checks.check_positive_int(k, "k")
    if k > len(train):
        raise ValueError(checks.invalid("k", f"at most the {len(train)} training rows", k))
    knn = KNeighborsClassifier(n_neighbors=k, metric="cosine")
    knn.fit(train, train_labels)
    return float(knn.score(test, test_labels))
