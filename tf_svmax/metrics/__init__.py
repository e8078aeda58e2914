"""Keras 3 metrics (and, later, retrieval evaluation)."""

from tf_svmax.metrics.spectral import MeanSingularValue, SingularValueBound, svmax_metrics

__all__ = ["MeanSingularValue", "SingularValueBound", "svmax_metrics"]
