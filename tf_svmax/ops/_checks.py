"""Argument validation and dtype handling shared by the ops.

Errors follow one pattern, naming the argument, the expectation and the value:
``Invalid value for argument `x`. Expected ... Received: x=...``.
"""

import numbers
import warnings

import numpy as np
import tensorflow as tf

# Half-precision inputs are promoted to this dtype for the linear algebra: float16 has a
# 10-bit mantissa and a maximum of 65504, which is too coarse for an eigendecomposition.
_HALF_DTYPES = (tf.float16, tf.bfloat16)


def invalid(arg, expected, received):
    """Builds the library's standard error message for a bad argument."""
    return f"Invalid value for argument `{arg}`. Expected {expected}. Received: {arg}={received!r}"


def check_non_negative_number(value, arg):
    """Returns `value` as a Python float, raising ValueError unless it is a finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(invalid(arg, "a float >= 0", value))
    if not np.isfinite(value) or value < 0:
        raise ValueError(invalid(arg, "a finite float >= 0", value))
    return float(value)


def check_positive_number(value, arg, allow_inf=False):
    """Returns `value` as a Python float, raising ValueError unless it is a real number > 0
    (Python or NumPy, not a bool): finite, or also ``inf`` where `allow_inf` (a scale whose
    infinity means "no term", e.g. LORAC's ``beta``)."""
    expected = "a float > 0 (or inf)" if allow_inf else "a finite float > 0"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(invalid(arg, expected, value))
    if np.isnan(value) or value <= 0 or (np.isinf(value) and not allow_inf):
        raise ValueError(invalid(arg, expected, value))
    return float(value)


def check_rate(value, arg):
    """Returns `value` as a Python float, raising ValueError unless it is a real number in
    (0, 1] (an update rate: 0 would never move, above 1 overshoots the target)."""
    if check_non_negative_number(value, arg) == 0 or value > 1:
        raise ValueError(invalid(arg, "a float in (0, 1]", value))
    return float(value)


def check_positive_int(value, arg):
    """Returns `value` as an int, raising ValueError unless it is an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(invalid(arg, "an int >= 1", value))
    return int(value)


def check_non_negative_int(value, arg):
    """Returns `value` as an int, raising ValueError unless it is an integer >= 0 (a seed)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(invalid(arg, "an int >= 0", value))
    return int(value)


def check_bool(value, arg):
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(invalid(arg, "a bool", value))
    return bool(value)


def compute_dtype(dtype):
    """The dtype the spectral math runs in for inputs of `dtype` (half -> float32)."""
    dtype = tf.as_dtype(dtype)
    if dtype in _HALF_DTYPES:
        return tf.float32
    return dtype


def float_matrix(x, arg, min_rows=1, min_cols=1):
    """Converts `x` to a rank-2 floating tensor, validating what can be validated statically.

    Returns `(x_compute, input_dtype)` where `x_compute` is in the compute dtype (float32 for
    half-precision inputs, else the input's own float dtype).
    """
    x = tf.convert_to_tensor(x)
    if not x.dtype.is_floating:
        raise TypeError(
            invalid(arg, "a floating-point tensor", f"<tensor of dtype {x.dtype.name}>")
        )
    rank = x.shape.rank
    if rank is not None and rank != 2:
        raise ValueError(
            invalid(
                arg, "a rank-2 tensor of shape [batch_size, dim]", f"<tensor of shape {x.shape}>"
            )
        )
    if rank is None:
        # Unknown rank at trace time: check when the graph runs, and give the graph the static
        # rank the code below relies on (loop shapes, transposes).
        check = tf.debugging.assert_rank(
            x, 2, message=invalid(arg, "a rank-2 tensor", "<tensor of another rank>")
        )
        with tf.control_dependencies([check]):
            x = tf.identity(x)
        x.set_shape([None, None])  # static rank only; the assert above does the run-time check
    rows, cols = (x.shape[0], x.shape[1]) if rank == 2 else (None, None)
    if rows is not None and rows < min_rows:
        raise ValueError(
            invalid(arg, f"at least {min_rows} row(s)", f"<tensor of shape {x.shape}>")
        )
    if cols is not None and cols < min_cols:
        raise ValueError(
            invalid(arg, f"at least {min_cols} column(s)", f"<tensor of shape {x.shape}>")
        )
    return tf.cast(x, compute_dtype(x.dtype)), x.dtype


def in_xla_context():
    """True while tracing a function that XLA will compile (`jit_compile=True`).

    TensorFlow has no public API for this; the private helper is used when present, and its
    absence is reported as "not under XLA" (the library then takes its default path).
    """
    try:
        from tensorflow.python.ops import control_flow_util  # noqa: PLC0415 (private, optional)
    except ImportError:  # pragma: no cover - depends on the TensorFlow build
        return False
    graph = tf.compat.v1.get_default_graph()
    return bool(control_flow_util.GraphOrParentsInXlaContext(graph))


_WARNED = set()


def warn_once(key, message):
    """Emits `message` as a RuntimeWarning once per process for each `key`."""
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def same_rows(first, second, first_arg, second_arg):
    """`first`, checked to have as many rows (first dimension) as `second`: a ValueError naming
    `first_arg` when both are known statically, otherwise a run-time assertion with the same
    message (an InvalidArgumentError in a traced function). Rank-0 tensors are not checked."""
    first, second = tf.convert_to_tensor(first), tf.convert_to_tensor(second)
    if first.shape.rank == 0 or second.shape.rank == 0:
        return first
    message = (
        f"Invalid value for argument `{first_arg}`. Expected one row per row of `{second_arg}`"
    )
    # Rank None (unknown) leaves the row count to the run-time check.
    rows = first.shape[0] if first.shape.rank else None
    expected = second.shape[0] if second.shape.rank else None
    if rows is not None and expected is not None:
        if rows != expected:
            raise ValueError(f"{message} ({expected}). Received: {rows} rows.")
        return first
    with tf.control_dependencies(
        [tf.debugging.assert_equal(tf.shape(first)[0], tf.shape(second)[0], message=message)]
    ):
        return tf.identity(first)


def zero_unless_rows(x, fn):
    """``fn()`` when `x` has at least one row, else a zero scalar of `x`'s dtype.

    An empty batch (e.g. a replica's share of an uneven last batch with the per-replica
    opt-out) has nothing to penalize or measure. The zero is ``0 * sum(x)`` so the
    result stays connected to `x` (a zero gradient, not `None`). Decided in Python when the
    row count is static, else with `tf.cond` (only the taken branch runs: `fn` never sees the
    empty matrix).
    """
    rows = x.shape[0]

    def zero():
        return tf.reduce_sum(x) * tf.zeros([], x.dtype)

    if rows is not None:
        return fn() if rows > 0 else zero()
    return tf.cond(tf.shape(x)[0] > 0, fn, zero)
