"""Keras 3 metrics and retrieval evaluation (Recall@K, MAP@R, NMI)."""

from tf_svmax.metrics.retrieval import map_at_r, nearest_neighbors, nmi, recall_at_k
from tf_svmax.metrics.spectral import MeanSingularValue, SingularValueBound, svmax_metrics

__all__ = [
    "MeanSingularValue",
    "SingularValueBound",
    "map_at_r",
    "nearest_neighbors",
    "nmi",
    "recall_at_k",
    "svmax_metrics",
]
