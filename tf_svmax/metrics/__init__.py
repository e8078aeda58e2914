"""Keras 3 metrics, retrieval evaluation (Recall@K, MAP@R, NMI) and GAN mode coverage.

On Keras' JAX and PyTorch backends the package imports with its spectral metrics
(`MeanSingularValue`, `SingularValueBound`, `svmax_metrics`, on `keras.ops`); the retrieval,
classification, k-means and callback parts compute with TensorFlow: each such name refuses in
one sentence there (`tf_svmax._backend`).
"""

from tf_svmax import _backend
from tf_svmax.metrics.spectral import MeanSingularValue, SingularValueBound, svmax_metrics

if _backend.BACKEND == "tensorflow":
    _backend.require_tensorflow("tf_svmax.metrics")

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
else:
    __all__ = ["MeanSingularValue", "SingularValueBound", "svmax_metrics"]
    __getattr__ = _backend.refusing_getattr("tf_svmax.metrics")
