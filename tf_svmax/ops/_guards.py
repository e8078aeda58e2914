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


def finite_guard(x):
    """Returns `(all_finite, x_safe)`: `x` with non-finite entries zeroed when any exist."""
    all_finite = ops.all(ops.isfinite(x))
    # Zeroing keeps the decompositions well-defined; outputs are set to NaN afterwards.
    return all_finite, ops.where(all_finite, x, ops.zeros_like(x))


def power_of_two_scale(x):
    """``2^floor(log2(max|x|))`` when the largest entry of `x` is outside [2^-30, 2^30], else 1.

    Squares and Gram products of entries beyond that range overflow (above ~1e19 in float32) or
    underflow (below ~1e-19); dividing by a power of two is exact and puts the largest entry in
    [1, 2), so every path is scale-equivariant. Inside the range nothing is rescaled: results
    stay bit-identical to the unscaled computation, and the eigensolver was measured ~1.7x
    slower on typical unit-row batches multiplied by 4. The exponent is taken in float64, where
    log2 of any float32 or float64 value is finite; on JAX without x64 (where every input is
    float32 or narrower) in float32, where log2 of any positive float32 is finite too.
    """
    wide = "float64" if float64_available() else "float32"
    max_abs = ops.cast(ops.max(ops.abs(x)), wide)
    # floor() is exact for any float; cast back because Keras' floor may return float32.
    exponent = ops.cast(ops.floor(ops.log(max_abs) / np.log(2.0)), wide)
    # Within 2^+-30 (and for an all-zero x, whose log is -inf) the scale stays 1.
    rescale = ops.logical_and(max_abs > 0, ops.abs(exponent) > 30.0)
    two = ops.full((), 2.0, wide)
    scale = ops.where(rescale, ops.power(two, exponent), ops.ones((), wide))
    return ops.cast(scale, dtype_name(x))


def nan_unless(all_finite, value):
    return ops.where(all_finite, value, ops.full_like(value, np.nan))
