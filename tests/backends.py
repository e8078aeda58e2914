"""The Keras backend of this test process, and backend-neutral autodiff and compilation for the
tests of the core (`tests/ops`, ...), which run once per backend (the backend is fixed when Keras
is first imported: ``KERAS_BACKEND=jax python -m pytest ...``).

Every helper takes and returns NumPy arrays, so a test's reference side (NumPy/SciPy) never
touches a backend tensor.
"""

import keras
import numpy as np

BACKEND = keras.backend.backend()


def to_numpy(x):
    """A backend tensor (or nested list of them) as NumPy."""
    return np.asarray(keras.ops.convert_to_numpy(x))


def value_and_grad(fn, *args):
    """``(value, [d value / d arg, ...])`` of the scalar ``fn(*tensors)`` at the NumPy `args`,
    by the process' backend's own autodiff (tf.GradientTape, jax.grad, torch.autograd)."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        xs = [tf.convert_to_tensor(a) for a in args]
        with tf.GradientTape() as tape:
            tape.watch(xs)
            value = fn(*xs)
        return to_numpy(value), [to_numpy(g) for g in tape.gradient(value, xs)]
    if BACKEND == "jax":
        import jax

        value, grads = jax.value_and_grad(fn, argnums=tuple(range(len(args))))(
            *[jax.numpy.asarray(a) for a in args]
        )
        return to_numpy(value), [to_numpy(g) for g in grads]
    if BACKEND == "torch":
        import torch

        xs = [torch.tensor(np.asarray(a), requires_grad=True) for a in args]
        value = fn(*xs)
        grads = torch.autograd.grad(value, xs)
        return to_numpy(value.detach()), [to_numpy(g) for g in grads]
    raise NotImplementedError(f"no autodiff helper for the {BACKEND!r} backend")


def compiled(fn):
    """`fn` under the backend's compiler: XLA on TensorFlow (``jit_compile=True``) and JAX
    (``jax.jit``); PyTorch runs eagerly (Keras' ``jit_compile="auto"`` does the same there)."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        return tf.function(fn, jit_compile=True)
    if BACKEND == "jax":
        import jax

        return jax.jit(fn)
    return fn


def graph(fn):
    """`fn` traced without XLA where the backend has such a mode (``tf.function`` on
    TensorFlow); on JAX every trace is XLA (``jax.jit``), on PyTorch `fn` runs eagerly."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        return tf.function(fn)
    return compiled(fn)
