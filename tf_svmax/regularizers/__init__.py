"""Keras 3 regularizers (label-oblivious penalties on a layer's output), on Keras' TensorFlow, JAX
and PyTorch backends."""

from tf_svmax.regularizers.spectral import SVMaxRegularizer

__all__ = ["SVMaxRegularizer"]
