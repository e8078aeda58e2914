"""What the backends share: the one-sentence refusals of the parts of the library that need
TensorFlow (installed, or as the backend), Keras' stateless scope, the single replica of JAX
and PyTorch, and the `keras.ops` forms of primitives that TensorFlow computes natively.

Nothing here imports TensorFlow, JAX or PyTorch at module level; `tf_svmax._backend` picks the
module of the running backend (`tensorflow`, `jax`, `torch`), which builds on these.
"""

import keras
import numpy as np
from keras import ops

# What runs on every backend today, as the refusal names it; docs/guide/backends.md has the table.
NEUTRAL = (
    "tf_svmax.ops, tf_svmax.checks, tf_svmax.losses, tf_svmax.regularizers, tf_svmax.metrics, "
    "tf_svmax.models and the schedules of tf_svmax.training"
)
# tf_svmax is installed from its repository's clone, not from PyPI.
INSTALL = (
    "pip install -e '.[cpu]' in the clone of the repository (or '.[gpu]', or your own "
    "tensorflow>=2.16)"
)


def require_tensorflow(module):
    """Imports and returns TensorFlow (>= 2.16), or raises ImportError naming `module` and the
    install command."""
    try:
        import tensorflow as tf  # noqa: PLC0415 (only where TensorFlow is asked for)
    except ImportError as error:
        raise ImportError(
            f"{module} needs TensorFlow, which is not installed in this environment: {INSTALL}."
        ) from error
    version = tuple(int(part) for part in tf.__version__.split(".")[:2])
    if version < (2, 16):
        raise ImportError(
            f"{module} needs TensorFlow >= 2.16 (Keras 3); found TensorFlow {tf.__version__}."
        )
    return tf


def tensorflow_backend_only(module, why=None):
    """The ImportError for `module` (or one of its names) that runs on Keras' TensorFlow
    backend only, with the reason `why` where one is given."""
    backend = keras.backend.backend()
    because = f" ({why})" if why else ""
    return ImportError(
        f"{module} runs on Keras' TensorFlow backend only{because}; this process uses "
        f"KERAS_BACKEND={backend!r}. On {backend} use the backend-neutral "
        f"{NEUTRAL}, or set KERAS_BACKEND=tensorflow before Keras is imported "
        "(see the Backends page of the docs)."
    )


def refusing_getattr(package, reasons):
    """A module ``__getattr__`` for a package that imports on every backend but some of whose
    public names are TensorFlow by nature: each name of `reasons` (name -> why) raises
    `tensorflow_backend_only`'s ImportError with its reason (so ``from package import Name``
    shows it too); any other name stays an AttributeError."""

    def __getattr__(name):
        if name not in reasons:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        raise tensorflow_backend_only(f"{package}.{name}", reasons[name])

    return __getattr__


def in_stateless_scope():
    """True inside a Keras `StatelessScope` (a JAX train or evaluation step, Keras' symbolic
    build of a loss), where a `Variable.assign` reaches the step's outputs only for variables
    the model tracks. Keras has no public probe for it; the private one is read here."""
    from keras.src.backend.common.stateless_scope import (  # noqa: PLC0415 (private, see above)
        in_stateless_scope as keras_in_stateless_scope,
    )

    return keras_in_stateless_scope()


def concrete_numpy(x):
    """`x` as NumPy (its values known in Python): the eager branch of each backend's
    `concrete_values`."""
    return np.asarray(ops.convert_to_numpy(x))


# ---- A single replica (JAX and PyTorch) ----------------------------------------------------------
# Off TensorFlow there is no replica context: a loss, regularizer or metric sees the batch it is
# given (under JAX's `keras.distribution.DataParallel` that is already the global batch, sharded by
# XLA), and Keras scales by 1/replicas only under `tf.distribute`. The context is always None.


def num_replicas_in_sync():
    """1: JAX's `keras.distribution.DataParallel` computes on the global batch, sharded by XLA,
    so a layer's batch statistics are the global batch's already; PyTorch: one device in Keras
    3.15."""
    return 1


def gather_global_batch(enabled, *values):
    """``(None, values)``: nothing to gather from a single replica."""
    return None, values


def scale_loss_for_distribution(value):
    """`value` unchanged: Keras sums no replicas' gradients off `tf.distribute`."""
    return value


def row_blocks(b, rows, block_elements):
    """The ``(first, count)`` blocks of about `block_elements` distances that cover the rows
    `rows` (``(start, count)``, all `b` rows when None) of a static batch of `b` rows."""
    b = int(b)
    start, count = (0, b) if rows is None else (int(r) for r in rows)
    per_block = max(1, block_elements // max(b, 1))
    firsts = range(start, start + count, per_block)
    return [(first, min(per_block, start + count - first)) for first in firsts]


# ---- keras.ops forms of primitives TensorFlow computes natively ----------------------------------

# The floor of a row's squared norm in `l2_normalize_rows`, tf.math.l2_normalize's: a zero row
# is scaled by 1/sqrt(1e-12) = 1e6 (staying zero) instead of being divided by zero.
NORMALIZE_EPSILON = 1e-12


def l2_normalize_rows(x):
    """``x / sqrt(max(|x|^2, 1e-12))`` row by row: tf.math.l2_normalize's formula and order of
    operations (TFA's angular distance uses it), with finite gradients at zero rows on every
    backend. (`keras.ops.normalize` clips ``rsqrt(|x|^2)`` after taking it: an infinite rsqrt
    at a zero row, hence NaN gradients on PyTorch, keras-team/keras#23075.)"""
    squared_norms = ops.sum(ops.square(x), axis=1, keepdims=True)
    return x * ops.rsqrt(at_least(squared_norms, NORMALIZE_EPSILON))


def at_least(x, floor):
    """``max(x, floor)`` in the dtype of `x`, NaN kept, the gradient passed to `x` where
    ``x >= floor`` (`tf.maximum`'s values and gradient).

    Not `keras.ops.maximum`: on JAX and PyTorch Keras' type promotion (`result_type`) turns a
    float64 result into float32 (as JAX does without 64-bit types), so a float64 input would
    lose its precision at the clamp (the same holds for `keras.ops.matmul`: `matmul`).
    """
    return ops.where(x < floor, floor, x)


def scale_exponent_cap(dtype):
    """The largest exponent of `finite_scaled`'s scale for a matrix of `dtype`: 2^-e must stay a
    normal number (float32: 2^-125), because XLA (JAX, TensorFlow's `jit_compile`) divides by
    multiplying with the reciprocal and flushes a subnormal one to zero (1e38 / 2^127 gave 0).
    Only the top two octaves of the dtype are affected: their largest entry is scaled into
    [2, 8) instead of [1, 2)."""
    return float(np.finfo(keras.backend.standardize_dtype(dtype)).maxexp - 3)


def finite_scaled(x, wide="float64"):
    """``(all_finite, x_scaled, scale)`` (`tf_svmax.ops._guards.finite_scaled`) as `keras.ops`,
    the exponent taken in the float dtype `wide` (float64; float32 on JAX without 64-bit types,
    where every input is float32 or narrower and log2 of any positive float32 is finite)."""
    all_finite = ops.all(ops.isfinite(x))
    x_safe = ops.where(all_finite, x, 0.0)
    max_abs = ops.cast(ops.max(ops.abs(x_safe)), wide)
    # floor() is exact for any float; cast back because Keras' floor may return float32.
    exponent = ops.cast(ops.floor(ops.log2(max_abs)), wide)
    top = scale_exponent_cap(x.dtype)
    exponent = ops.where(exponent > top, top, exponent)
    # Within 2^+-30 (and for an all-zero x, whose log is -inf) the scale stays 1 = 2^0.
    rescale = ops.logical_and(max_abs > 0, ops.abs(exponent) > 30.0)
    scale = ops.cast(ops.power(2.0, ops.where(rescale, exponent, 0.0)), x.dtype)
    return all_finite, x_safe / scale, scale


def hinge(x):
    """``max(x, 0)`` in `x`'s dtype, NaN kept, the gradient passing to `x` at 0 (`tf.maximum`'s
    values and gradient), with a `where`: Keras 3.15's `ops.maximum` returns float32 for float64
    on JAX and PyTorch. Written ``x < 0 ? 0 : x``: NaN compares False and passes
    (``x >= 0 ? x : 0`` turned it into 0)."""
    return ops.where(x < 0.0, ops.zeros_like(x), x)


def maximum(a, b):
    """Elementwise max in the operands' dtype, NaN kept (from either operand), the gradient
    going to `a` at ties (as `tf.maximum`'s), with a `where` (``a < b ? b : a`` keeps a NaN `a`;
    a NaN `b` is selected explicitly): Keras 3.15's `ops.maximum` returns float32 for float64 on
    JAX and PyTorch."""
    return ops.where(ops.logical_or(a < b, ops.isnan(b)), b, a)


def set_diagonal(x, diagonal):
    """The square `[n, n]` `x` with its diagonal replaced by the `[n]` `diagonal`
    (`tf.linalg.set_diag`'s values and gradients), as a select on the identity."""
    return ops.where(ops.eye(ops.shape(x)[0], dtype="bool"), diagonal[:, None], x)


def checked_when_run(x, assertion, shape=None):
    """`x`: JAX traces with concrete shapes and PyTorch runs eagerly, so every check happened in
    Python before this (see the TensorFlow backend's `checked_when_run`)."""
    return x


def after(value, fn):
    """``fn()`` in program order (no graph to order it in)."""
    fn()


def write_tensorboard_scalars(writer, log_dir, step, scalars):
    """None: TensorBoard's summaries are TensorFlow's (the JSON lines are written on every
    backend)."""
    return None


def refuse_non_integers(values, known, prefix, dtype_name):
    """`values` (a float tensor of dtype `dtype_name`) unchanged when every entry of `known`
    (its values in NumPy, or None where a trace hides them: unchecked) is a finite integer, else
    a ValueError: `prefix` (the message up to the received value) and the first offending entry
    with its index."""
    if known is None:
        return values
    flat = known.reshape(-1)
    bad = ~(np.isfinite(flat) & (flat == np.round(flat)))
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{prefix}<{dtype_name} tensor with {flat[first]!s} at index {first}>")
    return values


# ---- Labels and rows (eager, concrete labels) ----------------------------------------------------


def class_layout(labels):
    """``(coords, num_classes, k_max)`` of `[N]` concrete class labels (JAX and PyTorch compute
    eagerly here): each row's class index (classes numbered in order of first appearance, as
    `tf.unique` numbers them) and position inside its class as `[N, 2]` int32, the number of
    classes and the largest class, from NumPy."""
    _, first, inverse, counts = np.unique(
        labels, return_index=True, return_inverse=True, return_counts=True
    )
    by_appearance = np.argsort(first, kind="stable")
    class_index = np.argsort(by_appearance)[inverse.reshape(-1)]
    counts = counts[by_appearance]
    # Stable sort by class; a row's position is its rank among the rows of its class.
    order = np.argsort(class_index, kind="stable")
    starts = np.cumsum(counts) - counts
    position = np.empty_like(class_index)
    position[order] = np.arange(len(labels)) - starts[class_index[order]]
    coords = np.stack([class_index, position], axis=1).astype(np.int32)
    return ops.convert_to_tensor(coords), int(len(counts)), int(counts.max())


def boolean_mask_rows(x, mask):
    """The rows of `x` where the NumPy bool `[N]` `mask` (concrete labels' mask) holds."""
    return ops.take(x, np.flatnonzero(mask), axis=0)


def mean_in_dtype(x, axis):
    """The mean over `axis` in `x`'s dtype: the sum over it divided by its length (Keras'
    PyTorch `mean` computes float64 in float32, its type promotion)."""
    return ops.sum(x, axis=axis) / ops.shape(x)[axis]


def float64_squared(a, b, unclamped):
    """``max(unclamped(a, b), 0)`` computed in float64 (``unclamped``: the Gram expansion of
    squared distances, `tf_svmax.ops.distances`), returned in `a`'s dtype."""
    # float64: exact products of float32 coordinates (`tf_svmax.ops.distances` says why).
    squared = unclamped(ops.cast(a, "float64"), ops.cast(b, "float64"))
    # The expansion can round below zero; a squared distance is never negative.
    return ops.cast(at_least(squared, 0.0), a.dtype)
