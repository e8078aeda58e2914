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


def check_finite_number(value, arg):
    """Returns `value` as a Python float, raising ValueError unless it is a finite real number
    (Python or NumPy, not a bool; negative allowed, e.g. a triplet margin)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not np.isfinite(value):
        raise ValueError(invalid(arg, "a finite float", value))
    return float(value)


def check_choice(value, arg, choices):
    """Returns `value`, raising ValueError unless it is one of `choices`."""
    if isinstance(value, str) and value in choices:
        return value
    raise ValueError(invalid(arg, f"one of {list(choices)}", value))


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


def check_fraction(value, arg):
    """Returns `value` as a Python float, raising ValueError unless it is a real number in
    [0, 1] (a share, a mixing weight, an EMA momentum)."""
    if check_non_negative_number(value, arg) > 1:
        raise ValueError(invalid(arg, "a float in [0, 1]", value))
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


def label_vector(labels, arg):
    """`labels` as a tensor flattened to `[N]`; a ValueError naming `arg` unless its shape is
    `[N]` or `[N, 1]` (one label per row). The dtype is left to the caller."""
    labels = tf.convert_to_tensor(labels)
    shape = labels.shape
    if shape.rank is not None and (
        shape.rank > 2 or (shape.rank == 2 and shape[1] is not None and shape[1] != 1)
    ):
        raise ValueError(
            invalid(arg, "class labels of shape [N] or [N, 1]", f"<tensor of shape {shape}>")
        )
    return tf.reshape(labels, [-1])


def float_matrix(x, arg, min_rows=1):
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
    if cols is not None and cols < 1:
        raise ValueError(invalid(arg, "at least 1 column", f"<tensor of shape {x.shape}>"))
    return tf.cast(x, compute_dtype(x.dtype)), x.dtype


def in_xla_context():
    """True while tracing a function that XLA will compile, per Keras backend.

    TensorFlow: inside a `tf.function(jit_compile=True)` (TensorFlow has no public API for this;
    the private helper is used when present, and its absence is reported as "not under XLA", so
    the library takes its default path). JAX: inside any `jax.jit` trace, since all JAX
    compilation is XLA (Keras compiles JAX train steps by default); eager `jax.grad` is not.
    PyTorch: never (Keras does not compile PyTorch with XLA).
    """
    import keras  # noqa: PLC0415 (kept inside so this function is the whole change here)

    backend = keras.backend.backend()
    if backend == "jax":
        import jax  # noqa: PLC0415 (the JAX backend only)

        # A new array is an abstract tracer exactly when a jit trace is being staged (also
        # under grad or vmap inside it); eagerly, jax.grad included, it is a concrete array.
        return isinstance(jax.numpy.zeros(()), jax.core.Tracer)
    if backend != "tensorflow":
        return False
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


def same_rows(first, second, first_arg, second_arg, unit="row"):
    """`first`, checked to have one `unit` (row, label, weight) per row of `second`: a
    ValueError naming `first_arg` when both row counts are known statically, otherwise a
    run-time assertion with the same message (an InvalidArgumentError in a traced function).
    Rank-0 tensors are not checked. The library's one row-count check."""
    first, second = tf.convert_to_tensor(first), tf.convert_to_tensor(second)
    if first.shape.rank == 0 or second.shape.rank == 0:
        return first
    message = (
        f"Invalid value for argument `{first_arg}`. Expected one {unit} per row of `{second_arg}`"
    )
    # Rank None (unknown) leaves the row count to the run-time check.
    rows = first.shape[0] if first.shape.rank else None
    expected = second.shape[0] if second.shape.rank else None
    if rows is not None and expected is not None:
        if rows != expected:
            raise ValueError(f"{message} ({expected}). Received: {rows} {unit}s.")
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


def progress_verbosity(verbose, arg="verbose", stream=None):
    """`verbose` (0: silent, 1: a progress bar, 2: one plain line per stage or interval) checked,
    with 1 turned into 2 when `stream` (default: sys.stdout) is not a terminal: the bar redraws
    itself with carriage returns and ANSI colour codes, which pile up in a log file or a CI log
    as one endless line. (The trainers' `fit_verbosity` uses it for `fit`.)"""
    import sys  # noqa: PLC0415 (appended below the module's imports, which stay as they are)

    if (
        isinstance(verbose, (bool, np.bool_))
        or not isinstance(verbose, (int, np.integer))
        or verbose not in (0, 1, 2)
    ):
        raise ValueError(invalid(arg, "0, 1 or 2", verbose))
    stream = sys.stdout if stream is None else stream
    if verbose == 1 and not (hasattr(stream, "isatty") and stream.isatty()):
        return 2
    return int(verbose)
