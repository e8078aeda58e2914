"""Keras 3 metrics, retrieval evaluation (Recall@K, MAP@R, NMI) and GAN mode coverage.

Every name imports and runs on Keras' TensorFlow, JAX and PyTorch backends, with TensorFlow not
installed too: the spectral metrics compute on `keras.ops`; retrieval, k-means, the
classification probes and mode coverage in NumPy/scikit-learn; `RetrievalEvaluation` embeds
through the model on any backend and writes its summaries without TensorFlow.
"""

from tf_svmax.metrics.callbacks import RetrievalEvaluation
from tf_svmax.metrics.classification import (
    classification_accuracies,
    knn_accuracy,
    linear_probe_accuracy,
    neighbour_agreement_of_errors,
)
from tf_svmax.metrics.modes import mode_coverage
from tf_svmax.metrics.retrieval import (
    evaluate_retrieval,
    first_positive_ranks,
    map_at_r,
    nearest_neighbors,
    nmi,
    recall_at_k,
    split_retrieval_results,
)
from tf_svmax.metrics.spectral import MeanSingularValue, SingularValueBound, svmax_metrics

__all__ = [
    "MeanSingularValue",
    "RetrievalEvaluation",
    "classification_accuracies",
    "SingularValueBound",
    "evaluate_retrieval",
    "first_positive_ranks",
    "knn_accuracy",
    "linear_probe_accuracy",
    "map_at_r",
    "mode_coverage",
    "nearest_neighbors",
    "neighbour_agreement_of_errors",
    "nmi",
    "recall_at_k",
    "split_retrieval_results",
    "svmax_metrics",
]
