"""Pure TensorFlow functions: the math behind the losses, regularizers and metrics."""

from tf_svmax.ops.distances import angular_distance, pairwise_distance
from tf_svmax.ops.ole import ole_loss
from tf_svmax.ops.spectral import (
    METHODS,
    mean_singular_value,
    nuclear_norm,
    singular_values,
    svmax,
    svmax_bounds,
)

__all__ = [
    "METHODS",
    "angular_distance",
    "mean_singular_value",
    "nuclear_norm",
    "ole_loss",
    "pairwise_distance",
    "singular_values",
    "svmax",
    "svmax_bounds",
]
