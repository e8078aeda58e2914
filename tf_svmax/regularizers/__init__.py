"""Keras 3 regularizers (label-oblivious penalties on a layer's output)."""

# Not backend-neutral yet: on JAX/PyTorch a one-sentence refusal instead of a failure in fit.
from tf_svmax import _backend

_backend.require_tensorflow_backend("tf_svmax.regularizers")

from tf_svmax.regularizers.spectral import SVMaxRegularizer

__all__ = ["SVMaxRegularizer"]
