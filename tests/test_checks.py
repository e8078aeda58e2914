"""`tf_svmax.checks`' tensor helpers on every Keras backend: the same messages wherever a
shape is known before the run (always on JAX and PyTorch), TensorFlow's run-time assertion
where it is not, and no silent narrowing of 64-bit labels on JAX."""

import ast
import fractions
import math
from pathlib import Path

import keras
import numpy as np
import pytest
from keras import ops

from tests import backends
from tf_svmax import _backend, checks

pytestmark = pytest.mark.all_backends

PACKAGE = Path(checks.__file__).resolve().parent


@pytest.mark.parametrize(
    "module",
    [
        "checks.py",
        "_backend/__init__.py",
        "_backend/common.py",
        "_backend/jax.py",
        "_backend/torch.py",
        "ops/distances.py",
        "ops/prototypes.py",
        "ops/replicas.py",
    ],
)
def test_no_module_level_tensorflow_import(module):
    """TensorFlow is imported only inside the TensorFlow-only helpers."""
    tree = ast.parse((PACKAGE / module).read_text())
    for node in tree.body:
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        assert not any(name.split(".")[0] == "tensorflow" for name in names), module


@pytest.mark.parametrize(
    "dtype, expected",
    [
        ("float16", "float32"),
        ("bfloat16", "float32"),
        ("float32", "float32"),
        ("float64", "float64"),
        (np.float16, "float32"),
        (np.dtype("float64"), "float64"),
    ],
)
def test_compute_dtype_promotes_half_precision_only(dtype, expected):
    assert checks.compute_dtype(dtype) == expected


def test_compute_dtype_reads_this_backends_dtype_objects():
    for name in ("float16", "float32"):
        native = ops.zeros([1], name).dtype  # tf.DType, jnp dtype or torch.dtype
        assert checks.compute_dtype(native) == "float32"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_float_matrix_computes_half_in_float32_and_returns_the_input_dtype(dtype):
    x, input_dtype = checks.float_matrix(ops.ones([3, 2], dtype), "x")
    assert keras.backend.standardize_dtype(x.dtype) == checks.compute_dtype(dtype)
    assert keras.backend.standardize_dtype(input_dtype) == dtype
    np.testing.assert_array_equal(backends.to_numpy(x), np.ones((3, 2)))


def test_float_matrix_refuses_with_the_argument_named():
    with pytest.raises(TypeError, match=r"argument `emb`.*floating-point.*dtype int32"):
        checks.float_matrix(np.ones((2, 3), np.int32), "emb")
    with pytest.raises(ValueError, match=r"argument `emb`.*rank-2.*shape \(2, 3, 4\)"):
        checks.float_matrix(np.ones((2, 3, 4), np.float32), "emb")
    with pytest.raises(ValueError, match=r"argument `emb`.*at least 2 row\(s\).*\(1, 3\)"):
        checks.float_matrix(np.ones((1, 3), np.float32), "emb", min_rows=2)
    with pytest.raises(ValueError, match=r"argument `emb`.*at least 1 column.*\(2, 0\)"):
        checks.float_matrix(np.ones((2, 0), np.float32), "emb")
    x, _ = checks.float_matrix(np.ones((0, 3), np.float32), "emb", min_rows=0)
    assert tuple(x.shape) == (0, 3)


def test_label_vector_flattens_one_label_per_row():
    labels = checks.label_vector(np.arange(4).reshape(4, 1), "y_true")
    np.testing.assert_array_equal(backends.to_numpy(labels), np.arange(4))
    with pytest.raises(ValueError, match=r"argument `y_true`.*\[N\] or \[N, 1\].*\(4, 2\)"):
        checks.label_vector(np.zeros((4, 2), np.int32), "y_true")


def test_same_rows_message_names_the_argument():
    x = np.ones((3, 2), np.float32)
    np.testing.assert_array_equal(
        backends.to_numpy(checks.same_rows(np.arange(3), x, "labels", "embeddings")), [0, 1, 2]
    )
    message = (
        r"^Invalid value for argument `labels`. Expected one label per row of `embeddings` "
        r"\(3\). Received: 2 labels.$"
    )
    with pytest.raises(ValueError, match=message):
        checks.same_rows(np.arange(2), x, "labels", "embeddings", unit="label")
    # A scalar is not checked (a per-batch weight).
    assert backends.to_numpy(checks.same_rows(np.float32(2.0), x, "w", "embeddings")) == 2.0


def test_same_rows_under_the_compiler_raises_when_traced():
    """Under jax.jit and TensorFlow's XLA function the shapes are those of the inputs: the
    Python check runs at trace time; PyTorch runs eagerly."""
    fn = backends.compiled(lambda a, b: checks.same_rows(a, b, "labels", "embeddings"))
    with pytest.raises(ValueError, match="argument `labels`"):
        fn(np.arange(2), np.ones((3, 2), np.float32))


def test_zero_unless_rows_is_a_connected_zero_for_an_empty_batch():
    def penalty(x):
        x, _ = checks.float_matrix(x, "x", min_rows=0)
        return checks.zero_unless_rows(x, lambda: ops.sum(ops.square(x)))

    value, (grad,) = backends.value_and_grad(penalty, np.zeros((0, 3), np.float32))
    assert value == 0.0 and grad.shape == (0, 3)
    value, (grad,) = backends.value_and_grad(penalty, np.full((2, 3), 2.0, np.float32))
    assert value == 24.0
    np.testing.assert_array_equal(grad, np.full((2, 3), 4.0))


BIG = 2**40  # CrossBatchMemory's int64 labels are tested at 2^40


@pytest.mark.parametrize("value", [BIG, 2**31, -(2**31) - 1])
def test_int64_labels_beyond_int32_are_never_truncated(value):
    labels = np.array([3, value, 5], np.int64)
    if backends.BACKEND == "jax" and not _backend.jax_without_x64():
        pytest.skip("JAX with x64 keeps int64")
    if backends.BACKEND == "jax":
        # Without x64 JAX would wrap 2^40 to 0 (class 0): refused, the argument named.
        with pytest.raises(ValueError, match=r"argument `y_true`.*int32's range.*jax_enable_x64"):
            checks.label_vector(labels, "y_true")
        with pytest.raises(ValueError, match=r"argument `y_true`.*int32's range"):
            checks.same_rows(labels, np.ones((3, 2), np.float32), "y_true", "y_pred")
        return
    got = backends.to_numpy(checks.label_vector(labels, "y_true"))
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, labels)


def test_int64_labels_within_int32_pass_on_every_backend():
    labels = np.array([0, 2**31 - 1, -(2**31)], np.int64)
    np.testing.assert_array_equal(
        backends.to_numpy(checks.label_vector(labels, "y_true")).astype(np.int64), labels
    )


def test_float64_labels_that_float32_cannot_hold_are_refused_on_jax():
    labels = np.array([16777216.0, 16777217.0])  # one class each; equal in float32
    if backends.BACKEND != "jax" or not _backend.jax_without_x64():
        got = backends.to_numpy(checks.label_vector(labels, "labels"))
        assert got[0] != got[1]
        return
    with pytest.raises(ValueError, match=r"argument `labels`.*float32 holds exactly"):
        checks.label_vector(labels, "labels")
    exact = np.array([0.5, 3.0])  # exact in float32: passes
    np.testing.assert_array_equal(backends.to_numpy(checks.label_vector(exact, "labels")), exact)


@pytest.mark.skipif(
    backends.BACKEND != "tensorflow", reason="only TensorFlow traces with unknown shapes"
)
def test_tensorflow_graphs_of_unknown_shape_check_when_run():
    import tensorflow as tf  # noqa: PLC0415

    rows = tf.function(
        lambda a, b: checks.same_rows(a, b, "labels", "embeddings")
    ).get_concrete_function(tf.TensorSpec([None], tf.int32), tf.TensorSpec([None, 2]))
    np.testing.assert_array_equal(rows(np.arange(3), np.ones((3, 2), np.float32)), [0, 1, 2])
    with pytest.raises(tf.errors.InvalidArgumentError, match="argument `labels`"):
        rows(np.arange(2), np.ones((3, 2), np.float32))

    rank = tf.function(lambda x: checks.float_matrix(x, "x")[0]).get_concrete_function(
        tf.TensorSpec(None, tf.float32)
    )
    np.testing.assert_array_equal(rank(np.ones((2, 3), np.float32)), np.ones((2, 3)))
    with pytest.raises(tf.errors.InvalidArgumentError, match="argument `x`.*rank-2"):
        rank(np.ones((2, 3, 1), np.float32))

    empty = tf.function(
        lambda x: checks.zero_unless_rows(x, lambda: tf.reduce_sum(x) + 1.0)
    ).get_concrete_function(tf.TensorSpec([None, 2]))
    assert empty(np.zeros((0, 2), np.float32)) == 0.0
    assert empty(np.ones((2, 2), np.float32)) == 5.0


def test_integer_floats_refuses_fractions_and_non_finite_entries_eagerly():
    expected = "floats holding integers"
    pattern = r"argument `y_true`.*floats holding integers.*<float32 tensor with 0\.1 at index 1>"
    with pytest.raises(ValueError, match=pattern):
        checks.integer_floats(np.arange(16, dtype=np.float32) / 10, "y_true", expected)
    for value in (np.nan, np.inf):
        with pytest.raises(ValueError, match=r"argument `y_true`.*at index 1"):
            checks.integer_floats(np.array([0.0, value], np.float32), "y_true", expected)
    whole = np.array([0.0, -3.0, 7.0], np.float32)
    np.testing.assert_array_equal(
        backends.to_numpy(checks.integer_floats(whole, "y_true", expected)), whole
    )
    ints = np.array([1, 2], np.int32)  # not floats: returned as they are
    np.testing.assert_array_equal(
        backends.to_numpy(checks.integer_floats(ints, "y_true", expected)), ints
    )


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (10**400, "1000000"),  # a Python int past float's range: inf
        (np.longdouble("1e400"), r"1e\+400"),  # a long double past float's range: inf
        (float("nan"), "nan"),
    ],
)
def test_numbers_past_float_range_are_refused_naming_the_argument(value, shown):
    """A number the library would compute with as inf (or NaN) is refused with the argument's
    name, never NumPy's raw ``isfinite`` TypeError nor passed as finite (issue 59 item 10)."""
    for check in (checks.check_non_negative_number, checks.check_finite_number):
        with pytest.raises(ValueError, match=rf"`lambda_`. Expected a finite float.*{shown}"):
            check(value, "lambda_")
    with pytest.raises(ValueError, match=r"`beta`. Expected a finite float > 0"):
        checks.check_positive_number(value, "beta")


def test_large_ints_and_fractions_are_numbers():
    """Python ints past 2**64 within float's range and `fractions.Fraction` are real numbers,
    read as the float the library computes with (`float(value)`, the reference)."""
    assert checks.check_non_negative_number(10**20, "lambda_") == float(10**20)
    assert checks.check_finite_number(-(10**30), "margin") == -1e30
    assert checks.check_fraction(fractions.Fraction(1, 3), "lambda_") == 1 / 3
    assert checks.check_rate(fractions.Fraction(1, 2), "alpha") == 0.5
    assert checks.check_positive_number(10**400, "beta", allow_inf=True) == math.inf
    with pytest.raises(ValueError, match=r"`lambda_`. Expected a float in \[0, 1\]"):
        checks.check_fraction(fractions.Fraction(3, 2), "lambda_")


@pytest.mark.parametrize(
    "labels", [np.array(list("aabbcc")), list("aabbcc"), np.array(list("aabbcc"), dtype=object)]
)
def test_string_labels_are_refused_naming_the_argument(labels):
    """Strings are refused naming `y_true` on every backend (JAX and PyTorch failed converting
    them with an error naming no argument, issue 59 item 10)."""
    from tf_svmax.losses import TripletSemiHardLoss

    x = np.random.default_rng(0).standard_normal((6, 3)).astype("float32")
    with pytest.raises(TypeError, match=r"argument `y_true`. Expected numbers"):
        TripletSemiHardLoss()(labels, x)
