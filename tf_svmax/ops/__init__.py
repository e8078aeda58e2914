"""Pure `keras.ops` functions: the math behind the losses, regularizers and metrics, on Keras'
TensorFlow, JAX and PyTorch backends."""

from tf_svmax.ops.distances import angular_distance, pairwise_distance
from tf_svmax.ops.ole import ole_loss
from tf_svmax.ops.prototypes import cross_batch_embeddings, fit_prototypes, prototype_histograms
from tf_svmax.ops.spectral import (
    METHODS,
    batched_nuclear_norm,
    mean_singular_value,
    nuclear_norm,
    singular_values,
    svmax,
    svmax_bounds,
)

__all__ = [
    "METHODS",
    "batched_nuclear_norm",
    "angular_distance",
    "cross_batch_embeddings",
    "fit_prototypes",
    "mean_singular_value",
    "nuclear_norm",
    "ole_loss",
    "pairwise_distance",
    "prototype_histograms",
    "singular_values",
    "svmax",
    "svmax_bounds",
]
