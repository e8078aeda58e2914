"""The library's validators, public so that the library and the trainers check arguments by the
same names and with the same messages.

Errors follow one pattern, naming the argument, the expectation and the value:
``Invalid value for argument `x`. Expected ... Received: x=...``.

Three kinds of check live here:

- Python arguments (numbers, ints, bools, choices, a progress verbosity), each returning the value
  in its canonical Python type (defined in `tf_svmax._args`, which imports no Keras,
  so that the trainers check their flags before Keras loads; the same objects here);
- NumPy arrays and class labels (`finite_matrix`, `class_labels`, `label_kind`), for the metrics
  that compute in NumPy;
- backend tensors (`float_matrix`, `label_vector`, `same_rows`, `integer_floats`, `to_tensor`),
  checked statically where the shape is known and at run time in a TensorFlow graph, with the
  dtype and shape helpers they rest on.

Backend-neutral: only Keras and NumPy are imported (TensorFlow only inside the functions that run
on its backend). Which backend runs, and whether XLA compiles, is asked of `tf_svmax._backend`.
"""

import numbers
import warnings

import keras
import numpy as np
from keras import ops

from tf_svmax import _backend
from tf_svmax._args import (  # re-exported (`__all__`)
    check_bool,
    check_choice,
    check_finite_number,
    check_fraction,
    check_non_negative_int,
    check_non_negative_number,
    check_positive_int,
    check_positive_number,
    check_rate,
    invalid,
    progress_verbosity,
)

__all__ = [
    "check_bool",
    "check_choice",
    "check_finite_number",
    "check_fraction",
    "check_non_negative_int",
    "check_non_negative_number",
    "check_positive_int",
    "check_positive_number",
    "check_rate",
    "checked_positive",
    "checked_when_run",
    "class_labels",
    "compute_dtype",
    "finite_matrix",
    "float_matrix",
    "integer_floats",
    "invalid",
    "label_kind",
    "label_vector",
    "mode_weights",
    "progress_verbosity",
    "same_rows",
    "static_shape",
    "to_tensor",
    "warn_once",
    "zero_unless_rows",
]


# Python arguments: defined in `tf_svmax._args` (importable without Keras, for the trainers'
# flags), re-exported here as the same objects.


# NumPy arrays and class labels.


def mode_weights(weights, num_modes):
    """A mixture's `[num_modes]` mode `weights` as a float64 array normalised to sum 1, or None
    (equal weights) for None; raises ValueError naming `weights` otherwise."""
    if weights is None:
        return None
    w = np.asarray(weights, dtype=np.float64)
    expected = f"{num_modes} non-negative finite numbers (one per mode) with a positive sum"
    if w.shape != (num_modes,) or not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
        shown = w.tolist() if w.size <= 16 else f"an array of shape {w.shape}"
        raise ValueError(invalid("weights", expected, shown))
    return w / w.sum()


def finite_matrix(x, arg, *, dtype=np.float64, min_rows=1):
    """`x` as a 2-D NumPy array of `dtype` (None: a float array keeps its dtype, an integer one
    becomes float64) with at least `min_rows` rows and one column, every entry a finite real
    number; otherwise a ValueError naming `arg` and showing the shape, dtype or first offending
    entry (never the whole array).

    Only real numbers are converted: strings are refused before NumPy could parse "1.5" into a
    number, and so are booleans, complex numbers and objects (None). Finiteness is checked after
    the conversion, where float64 values beyond float32's range would have become inf.
    """
    expected = "a 2-D array of finite real numbers"
    try:
        array = np.asarray(x)
    except (ValueError, TypeError):  # ragged nested lists
        raise ValueError(invalid(arg, expected, f"<{type(x).__name__} of ragged rows>")) from None
    if array.dtype.kind not in "iuf":
        raise ValueError(
            invalid(arg, expected, f"<array of shape {array.shape}, dtype {array.dtype}>")
        )
    if array.ndim != 2:
        raise ValueError(invalid(arg, "a 2-D [rows, columns] array", f"<shape {array.shape}>"))
    if len(array) < min_rows:
        rows = "row" if min_rows == 1 else "rows"
        raise ValueError(invalid(arg, f"at least {min_rows} {rows}", f"<shape {array.shape}>"))
    if array.shape[1] < 1:
        raise ValueError(invalid(arg, "at least 1 column", f"<shape {array.shape}>"))
    if dtype is None:
        dtype = array.dtype if array.dtype.kind == "f" else np.float64
    out = array.astype(dtype, copy=False)
    finite = np.isfinite(out)
    if not finite.all():
        index = tuple(int(i) for i in np.argwhere(~finite)[0])
        raise ValueError(
            invalid(
                arg,
                f"finite values (in {np.dtype(dtype).name})",
                f"<{array.dtype} array of shape {array.shape} with {array[index].item()!r} "
                f"at {index}>",
            )
        )
    return out


def _label_kind(value):
    """The kind of one class id: "number", "str" or "bytes"; None for anything else."""
    if isinstance(value, str):  # np.str_ too
        return "str"
    if isinstance(value, bytes):  # np.bytes_ too
        return "bytes"
    if isinstance(value, (numbers.Real, np.bool_)):
        return "number"
    return None


def class_labels(labels, arg):
    """`labels` flattened to a 1-D NumPy array of class ids, numbers or strings, one kind for
    all; otherwise a ValueError naming `arg`. Two ids are one class when they are equal: floats
    are exact values (0.2 and 0.7 are two classes, 1 and 1.0 one), "1" and 1 are never equal.

    Refused: NaN and inf (NaN equals nothing, not even itself, so it cannot name a class; inf
    as a class id is a bug upstream), None and other objects (np.unique cannot order them),
    complex numbers, and sequences mixing numbers and strings (NumPy would turn 1 into "1",
    merging the classes 1 and "1"). Object arrays that hold only numbers or only strings (a
    pandas column, a tf.string tensor's bytes) are converted. May be empty: callers check sizes.
    """
    expected = "class ids of one type (ints, floats or strings), no NaN/inf or None"
    if not isinstance(labels, np.ndarray) or labels.dtype == object:
        items = np.asarray(labels, dtype=object).reshape(-1)
        kinds = [_label_kind(v) for v in items]
        if None in kinds:
            i = kinds.index(None)
            raise ValueError(
                invalid(arg, expected, f"<{type(items[i]).__name__} {items[i]!r} at index {i}>")
            )
        if len(set(kinds)) > 1:
            names = sorted({type(v).__name__ for v in items})
            raise ValueError(invalid(arg, expected, f"<mixed list of {', '.join(names)}>"))
        labels = np.array(items.tolist()) if len(items) else np.asarray(labels)
    y = np.asarray(labels).reshape(-1)
    if y.dtype.kind not in "biufUS":
        raise ValueError(invalid(arg, expected, f"<{y.dtype} array>"))
    if y.dtype.kind == "f" and not np.isfinite(y).all():
        i = int(np.flatnonzero(~np.isfinite(y))[0])
        raise ValueError(invalid(arg, expected, f"<{y.dtype} array with {y[i].item()!r} at {i}>"))
    return y


def label_kind(labels):
    """The kind of a `class_labels` array: "number", "str" or "bytes" (ids of different kinds
    are never equal, so a comparison between them would silently count every pair unequal)."""
    return {"U": "str", "S": "bytes"}.get(labels.dtype.kind, "number")


# Backend tensors.

# Half-precision inputs are promoted to float32 for the linear algebra (DESIGN convention 7):
# float16 has a 10-bit mantissa and a maximum of 65504, which is too coarse for an
# eigendecomposition.
_HALF_DTYPES = ("float16", "bfloat16")


# What int64 labels must fit in on JAX without 64-bit types (`jax_enable_x64` off), where
# converting them to a tensor wraps larger values modulo 2^32 without a word.
_INT32_RANGE = (-(2**31), 2**31 - 1)


def compute_dtype(dtype):
    """The dtype the spectral math runs in for inputs of `dtype` (half -> float32), as Keras'
    dtype name (any backend's dtype object or name is accepted)."""
    dtype = keras.backend.standardize_dtype(dtype)
    if dtype in _HALF_DTYPES:
        return "float32"
    return dtype


def static_shape(x):
    """The shape of tensor `x` known before it runs: a tuple of ints (None for a dimension
    known only when a TensorFlow graph runs), or None when even the rank is unknown (a
    TensorFlow graph traced without it). JAX traces with concrete shapes and PyTorch runs
    eagerly, so there every dimension is an int."""
    shape = x.shape
    if getattr(shape, "rank", 0) is None:  # a tf.TensorShape of unknown rank
        return None
    return tuple(None if d is None else int(d) for d in shape)


def _dtype_name(x):
    return keras.backend.standardize_dtype(x.dtype)


def _narrowing_checked(x, arg, exact):
    """`x` unchanged, after refusing what JAX without 64-bit types would change silently when
    converting it: integers outside int32 (wrapped modulo 2^32, so the class 2^40 would become
    class 0) always, and float64 values that float32 cannot hold exactly where `exact` (class
    ids: 16777217.0 would merge with 16777216.0); other float64 input (embeddings) is computed
    in float32 with a one-time warning. JAX arrays are already narrowed, nothing is checked."""
    if ops.is_tensor(x):  # JAX arrays, tracers too: converted before this function saw them
        return x
    try:
        array = np.asarray(x)
    except (TypeError, ValueError):  # not array-like: convert_to_tensor reports it
        return x
    if array.dtype.kind in "iu" and array.dtype.itemsize == 8 and array.size:
        low, high = _INT32_RANGE
        outside = (array < low) | (array > high)
        if outside.any():
            index = tuple(int(i) for i in np.argwhere(outside)[0])
            raise ValueError(
                invalid(
                    arg,
                    "integers in int32's range [-2**31, 2**31 - 1] on the JAX backend, which "
                    "wraps larger int64 values unless 64-bit types are enabled "
                    "(jax.config.update('jax_enable_x64', True))",
                    f"<{array.dtype} array with {array[index].item()!r} at {index}>",
                )
            )
    if array.dtype == np.float64 and array.size:
        if exact and not np.array_equal(array.astype(np.float32), array, equal_nan=True):
            raise ValueError(
                invalid(
                    arg,
                    "values float32 holds exactly on the JAX backend, which computes float64 "
                    "in float32 unless 64-bit types are enabled "
                    "(jax.config.update('jax_enable_x64', True))",
                    f"<float64 array of shape {array.shape}>",
                )
            )
        if not exact:
            warn_once(
                "jax-float64",
                f"float64 input (`{arg}`) is computed in float32 on the JAX backend, which has "
                "no 64-bit types unless jax.config.update('jax_enable_x64', True) is set.",
            )
    return x


def to_tensor(x, arg, *, exact=False):
    """`x` as a tensor of the backend (`keras.ops.convert_to_tensor`); on JAX without 64-bit
    types, a ValueError naming `arg` instead of a silent narrowing (`_narrowing_checked`:
    integers outside int32 always, float64 values float32 cannot hold where `exact`)."""
    _refuse_text(x, arg)
    if _backend.jax_without_x64():
        x = _narrowing_checked(x, arg, exact)
    return ops.convert_to_tensor(x)


def _refuse_text(x, arg):
    """A TypeError naming `arg` for strings (a NumPy array, list or tuple of them): JAX and
    PyTorch would fail converting them with an error naming no argument."""
    if isinstance(x, (list, tuple, str, bytes)):
        x = np.asarray(x)
    if (
        isinstance(x, np.ndarray)
        and x.dtype.kind in "USO"
        and (x.dtype.kind != "O" or any(isinstance(v, (str, bytes)) for v in x.flat))
    ):
        raise TypeError(invalid(arg, "numbers", f"<array of dtype {x.dtype}>"))


def checked_when_run(x, assertion, shape=None):
    """`x` once `assertion(tf)` (a `tf.debugging` assertion built from the `tensorflow`
    module) has passed, with static `shape` set when given.

    The one place a check waits for run time: only TensorFlow traces functions whose shapes are
    unknown until they run (`tf.function` with None dimensions or an unknown rank). JAX traces
    with concrete shapes and PyTorch runs eagerly, so every check there happened in Python
    before this; a symbolic Keras tensor on those backends has no run time to check at and is
    returned as it is (`tf_svmax._backend.checked_when_run`: the JAX and PyTorch backends never
    import TensorFlow).
    """
    return _backend.checked_when_run(x, assertion, shape)


def checked_positive(x, message):
    """`x` once every entry is positive (> 0; NaN is not): where its values are known (eagerly,
    PyTorch always) a ValueError with `message` otherwise; in a TensorFlow graph a run-time
    assertion with it (`checked_when_run`: an InvalidArgumentError, also eagerly on TensorFlow,
    before the ValueError's check). Under XLA (`jax.jit`, `jit_compile`) nothing can be
    checked: XLA drops TensorFlow's assertions and JAX has none."""
    x = checked_when_run(x, lambda tf: tf.debugging.assert_positive(x, message=message))
    known = None if _backend.in_xla_context() else _backend.concrete_values(x)
    if known is not None and not bool(np.all(known > 0)):
        raise ValueError(message)
    return x


def label_vector(labels, arg):
    """`labels` as a tensor flattened to `[N]`; a ValueError naming `arg` unless its shape is
    `[N]` or `[N, 1]` (one label per row), or (JAX without 64-bit types) unless the values
    survive the conversion (`to_tensor`). The dtype is left to the caller."""
    labels = to_tensor(labels, arg, exact=True)
    shape = static_shape(labels)
    if shape is not None and (
        len(shape) > 2 or (len(shape) == 2 and shape[1] is not None and shape[1] != 1)
    ):
        raise ValueError(
            invalid(arg, "class labels of shape [N] or [N, 1]", f"<tensor of shape {shape}>")
        )
    return ops.reshape(labels, [-1])


def float_matrix(x, arg, min_rows=1):
    """Converts `x` to a rank-2 floating tensor, validating what can be validated statically.

    Returns `(x_compute, input_dtype)` where `x_compute` is in the compute dtype (float32 for
    half-precision inputs, else the input's own float dtype) and `input_dtype` is the input
    tensor's own dtype object.
    """
    x = to_tensor(x, arg)
    name = _dtype_name(x)
    if not keras.backend.is_float_dtype(name):
        raise TypeError(invalid(arg, "a floating-point tensor", f"<tensor of dtype {name}>"))
    shape = static_shape(x)
    if shape is not None and len(shape) != 2:
        raise ValueError(
            invalid(arg, "a rank-2 tensor of shape [batch_size, dim]", f"<tensor of shape {shape}>")
        )
    if shape is None:
        # Unknown rank at trace time (TensorFlow only): check when the graph runs, and give the
        # graph the static rank the code below relies on (loop shapes, transposes).
        x = checked_when_run(
            x,
            lambda tf: tf.debugging.assert_rank(
                x, 2, message=invalid(arg, "a rank-2 tensor", "<tensor of another rank>")
            ),
            shape=[None, None],  # static rank only; the assert does the run-time check
        )
        shape = (None, None)
    rows, cols = shape
    if rows is not None and rows < min_rows:
        raise ValueError(invalid(arg, f"at least {min_rows} row(s)", f"<tensor of shape {shape}>"))
    if cols is not None and cols < 1:
        raise ValueError(invalid(arg, "at least 1 column", f"<tensor of shape {shape}>"))
    return ops.cast(x, compute_dtype(name)), x.dtype


_WARNED = set()


def warn_once(key, message):
    """Emits `message` as a RuntimeWarning once per process for each `key`."""
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def same_width(x, width, arg, whose):
    """Raises a ValueError naming `arg` unless the last dimension of tensor `x`, where known
    statically, is `width` (`whose`: what fixed it, e.g. "embedding_dim"); the library's one
    check of an embedding width against a layer's state."""
    shape = static_shape(x)
    if shape and shape[-1] is not None and shape[-1] != width:
        raise ValueError(
            invalid(
                arg,
                f"[batch_size, {width}] rows (the width of {whose})",
                f"<tensor of shape {shape}>",
            )
        )


def same_rows(first, second, first_arg, second_arg, unit="row"):
    """`first`, checked to have one `unit` (row, label, weight) per row of `second`: a
    ValueError naming `first_arg` when both row counts are known statically (always on JAX and
    PyTorch), otherwise (a TensorFlow graph) a run-time assertion with the same message (an
    InvalidArgumentError). Rank-0 tensors are not checked. The library's one row-count check."""
    first, second = to_tensor(first, first_arg), ops.convert_to_tensor(second)
    first_shape, second_shape = static_shape(first), static_shape(second)
    if first_shape == () or second_shape == ():
        return first
    message = (
        f"Invalid value for argument `{first_arg}`. Expected one {unit} per row of `{second_arg}`"
    )
    # Rank None (unknown) leaves the row count to the run-time check.
    rows = first_shape[0] if first_shape else None
    expected = second_shape[0] if second_shape else None
    if rows is not None and expected is not None:
        if rows != expected:
            raise ValueError(f"{message} ({expected}). Received: {rows} {unit}s.")
        return first
    return checked_when_run(
        first,
        lambda tf: tf.debugging.assert_equal(
            tf.shape(first)[0], tf.shape(second)[0], message=message
        ),
    )


def row_weights(weights, rows_of, rows_arg):
    """`weights` (a loss' `sample_weight`), checked to be a scalar or one weight per row of
    `rows_of`, shaped `[B]` or `[B, 1]`: a ValueError naming `sample_weight` otherwise (a
    `[B, 2]` weight would broadcast against the per-row losses, another length fail inside a
    product naming no argument). The row count as `same_rows` checks it."""
    weights = to_tensor(weights, "sample_weight")
    shape = static_shape(weights)
    if shape is not None and (len(shape) > 2 or (len(shape) == 2 and shape[1] != 1)):
        raise ValueError(
            invalid(
                "sample_weight",
                f"a scalar or one weight per row of `{rows_arg}` ([B] or [B, 1])",
                f"<tensor of shape {shape}>",
            )
        )
    return same_rows(weights, rows_of, "sample_weight", rows_arg, "weight")


def integer_floats(values, arg, expected):
    """`values` unchanged when it is not a float tensor or every entry is a finite integer
    (0.0, -3.0); otherwise a ValueError naming `arg`, `expected` and the first offending
    entry with its index (eagerly), or a run-time assertion with the same message (an
    InvalidArgumentError in a traced TensorFlow function). For labels that are cast to
    integers, where 0.1 and 0.9 would silently become one class.

    Under `jax.jit` the values are not known while tracing and JAX has no run-time assertion,
    nor XLA on TensorFlow: there they are returned unchecked (check them before the step, or
    eagerly; a caller may make its value NaN for them, as `CrossBatchMemory` does)."""
    values = to_tensor(values, arg, exact=True)
    if not keras.backend.is_float_dtype(_dtype_name(values)):
        return values
    prefix = invalid(arg, expected, "")[: -len("''")]
    return _backend.checked_integer_floats(values, prefix, _dtype_name(values))


def zero_unless_rows(x, fn):
    """``fn()`` when `x` has at least one row, else a zero scalar of `x`'s dtype.

    An empty batch (e.g. a replica's share of an uneven last batch with the per-replica
    opt-out) has nothing to penalize or measure. The zero is ``0 * sum(x)`` so the
    result stays connected to `x` (a zero gradient, not `None`). Decided in Python when the
    row count is static (always on JAX and PyTorch), else (a TensorFlow graph) with
    `keras.ops.cond`, there `tf.cond`: only the taken branch runs, `fn` never sees the empty
    matrix. Under XLA (``jit_compile=True``) both are computed and one selected: XLA's dynamic
    padder rejects the `tf.cond` of a batch of one row (a partial last batch) in the gradient.
    """
    rows = static_shape(x)[0]

    def zero():
        return ops.sum(x) * ops.zeros([], x.dtype)

    if rows is not None:
        return fn() if rows > 0 else zero()
    if _backend.in_xla_context():
        return ops.where(ops.shape(x)[0] > 0, fn(), zero())
    return ops.cond(ops.shape(x)[0] > 0, fn, zero)
