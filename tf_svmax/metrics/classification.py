"""Classification metrics of the two-head experiments (dissertation Sec. 5.4): micro and macro
accuracy (Table 5.3), per-class accuracy (Table 5.4), and the share of misclassified test images
whose nearest training neighbour in the embedding carries the same wrong label (Sec. 5.4.3's
"79.34 % of misclassified predictions match the label of their nearest training neighbor")."""

import numpy as np
from sklearn.neighbors import NearestNeighbors

from tf_svmax.ops import _checks


def _labels_and_predictions(labels, predictions):
    labels, predictions = np.asarray(labels).reshape(-1), np.asarray(predictions).reshape(-1)
    if labels.shape != predictions.shape or not len(labels):
        raise ValueError(
            _checks.invalid(
                "predictions", f"{len(labels)} predictions, one per label", predictions.shape
            )
        )
    return labels, predictions


def classification_accuracies(labels, predictions):
    """``{"accuracy", "macro_accuracy", "per_class_accuracy"}``.

    ``accuracy`` is the micro average (correct / all), ``macro_accuracy`` the mean of the
    per-class accuracies (each class counts once, however many test images it has), and
    ``per_class_accuracy`` maps each class present in `labels` to its accuracy.
    """
    labels, predictions = _labels_and_predictions(labels, predictions)
    correct = labels == predictions
    classes = np.unique(labels)
    per_class = {int(c): float(correct[labels == c].mean()) for c in classes}
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

    Returns ``(share, number_of_errors)``.
    """
    test_labels, predictions = _labels_and_predictions(test_labels, predictions)
    wrong = test_labels != predictions
    if not wrong.any():
        return float("nan"), 0
    train_labels = np.asarray(train_labels).reshape(-1)
    index = NearestNeighbors(n_neighbors=1).fit(np.asarray(train_embeddings))
    nearest = index.kneighbors(np.asarray(test_embeddings)[wrong], return_distance=False)[:, 0]
    return float(np.mean(train_labels[nearest] == predictions[wrong])), int(wrong.sum())
