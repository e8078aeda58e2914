"""Shape, dtype and non-finite guards shared by the SVD-based ops (`spectral`, `ole`; the input
matrix is validated by `checks.float_matrix`): orientation to a tall matrix, a NaN result for a
non-finite input, and an exact power-of-two rescale for extreme magnitudes. `keras.ops` only, so
they run on every Keras backend."""

import keras
import numpy as np
from keras import ops

from tf_svmax import _backend


def dtype_name(x):
    """The Keras name of `x`'s dtype ("float32", ...) on every backend."""
    return keras.backend.standardize_dtype(x.dtype)


def float64_available():
    """Whether float64 arithmetic exists on this backend: not on JAX unless `jax_enable_x64` is
    set (JAX would silently compute a requested float64 in float32). The one backend-specific
    question of the spectral ops."""
    return not _backend.jax_without_x64()


# Keras 3.15's `ops.matmul`, `ops.norm`, `ops.maximum`, `ops.minimum` and `ops.floor` promote
# through `keras.backend.result_type`, which maps float64 to float32 on every backend but
# TensorFlow: float64 input on PyTorch (or JAX with x64) would silently be computed in float32.
# The helpers below stay in the input's dtype on every backend, with the same operations (the
# product is `tf_svmax._backend.matmul`).


def norm(x, axis=None):
    """Euclidean norm over `axis` (None: all entries, the Frobenius norm) in `x`'s dtype;
    ``sqrt(sum(x * x))``, the sequence `tf.norm` runs."""
    return ops.sqrt(ops.sum(x * x, axis=axis))


def at_least(x, lower):
    """``max(x, lower)`` for a Python float `lower`, in `x`'s dtype."""
    return ops.where(x > lower, x, ops.full_like(x, lower))


def select(pred, true_fn, false_fn):
    """`ops.cond` that short-circuits when `pred` is known at trace time (always on JAX and
    PyTorch, whose shapes are static)."""
    if isinstance(pred, (bool, np.bool_)):
        return true_fn() if pred else false_fn()
    return ops.cond(pred, true_fn, false_fn)


def static_or_dynamic_shape(x):
    """`x`'s shape with Python ints where known, scalar tensors where not (TensorFlow traces)."""
    if all(dim is not None for dim in x.shape):
        return tuple(x.shape)
    return ops.shape(x)


def is_tall(x):
    """Whether `x` (`[..., M, N]`) has ``M >= N``: a Python bool where the shape is static, a
    bool tensor in a TensorFlow graph, and None (undecided: `orient` keeps `x` as it is) in a
    TensorFlow graph that XLA compiles, whose conditional needs branches of one shape (`x` and
    its transpose are not, unless square): there the factor paths take either orientation."""
    rows, cols = static_or_dynamic_shape(x)[-2:]
    if isinstance(rows, int) and isinstance(cols, int):
        return rows >= cols
    return None if _backend.in_xla_context() else rows >= cols


def orient(x, tall):
    """Returns `x` if `tall` (or None: undecided, see `is_tall`), else its transpose (an
    involution, used both ways)."""
    if tall is None:
        return x
    return select(tall, lambda: x, lambda: ops.swapaxes(x, -1, -2))


def finite_scaled(x):
    """``(all_finite, x_scaled, scale)`` of a floating matrix `x`: whether every entry is finite
    (a bool scalar); `x` with every entry zeroed when one is not (the decompositions stay
    well-defined; the outputs are set to NaN afterwards), divided by `scale`; and `scale` (of
    `x`'s dtype), ``2^floor(log2(max|x|))`` when the largest entry of the zeroed `x` is outside
    [2^-30, 2^31), else 1.

    Squares and Gram products of entries beyond that range overflow (above ~1e19 in float32) or
    underflow (below ~1e-19); dividing by a power of two is exact and puts the largest entry in
    [1, 2), so every path is scale-equivariant. Inside the range nothing is rescaled: results
    stay bit-identical to the unscaled computation, and the eigensolver was measured ~1.7x
    slower on typical unit-row batches multiplied by 4. The power of two is formed in float64
    where the backend has it (``2^-149``, float32's smallest, is a float64 normal number).

    `tf_svmax._backend.finite_scaled`: `keras.ops` on TensorFlow and JAX (which compile it),
    PyTorch's own operations on PyTorch (which runs each operation eagerly, and Keras' dispatch
    of each `keras.ops` call cost more than the operation on small batches).
    """
    return _backend.finite_scaled(x)


def nan_unless(all_finite, value):
    return ops.where(all_finite, value, ops.full_like(value, np.nan))


def nan_unless_factor(all_finite, dtype):
    """1 where `all_finite`, else NaN, a scalar of `dtype`: ``value * factor`` is
    ``nan_unless(all_finite, value)`` as one product (``v * 1 = v`` exactly for every float,
    infinities and NaN included), the cheaper form where several values need it."""
    finite = ops.cast(all_finite, dtype)
    return finite / finite  # 1 / 1 = 1; 0 / 0 = NaN
