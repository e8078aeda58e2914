import numpy as np
import pytest
import tensorflow as tf

from benchmarks.reference_ole import ole_reference
from tf_svmax import ops
from tf_svmax.ops.ole import nuclear_norms_and_subgradients


def _value_and_grad(labels, x, graph=False, **kwargs):
    x = tf.constant(x)

    def fn(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            value = ops.ole_loss(labels, x, **kwargs)
        return value, tape.gradient(value, x)

    if graph:
        fn = tf.function(fn)
    value, grad = fn(x)
    return value.numpy(), grad.numpy()


def _cases(rng):
    """(name, labels, features) covering the situations the spec names."""
    pk = np.repeat(np.arange(36), 4)
    cases = [("pk_36x4", pk, rng.standard_normal((144, 128)))]
    # A class whose nuclear norm is <= delta (tiny rows) next to normal classes.
    x = rng.standard_normal((12, 6))
    x[:3] *= 0.01
    cases.append(("class_below_delta", np.repeat([0, 1, 2, 3], 3), x))
    # Singleton classes.
    cases.append(("singletons", np.array([0, 1, 2, 3, 4, 4, 4]), rng.standard_normal((7, 5))))
    # A rank-deficient class (duplicated rows) and a class with more rows than columns.
    x = rng.standard_normal((16, 5))
    x[1] = x[0]
    x[2] = x[0]
    cases.append(("duplicated_rows", np.array([0] * 3 + [1] * 10 + [2] * 3), x))
    # Non-contiguous, unsorted, negative and huge labels.
    labels = np.array([1000, 7, 7, -3, 2**40, 1000, -3, 2**40, 7, 1000])
    cases.append(("noncontiguous", labels, rng.standard_normal((10, 8))))
    # More rows than the embedding dimension overall, few per class.
    cases.append(("wide_classes", np.repeat(np.arange(4), 2), rng.standard_normal((8, 3))))
    # Globally rank-deficient batch: features in a 3-dim subspace.
    x = rng.standard_normal((20, 3)) @ rng.standard_normal((3, 10))
    cases.append(("rank_deficient_batch", np.repeat(np.arange(5), 4), x))
    return cases


@pytest.mark.parametrize("graph", [False, True])
def test_value_and_gradient_match_float64_reference(rng, graph):
    for name, labels, x in _cases(rng):
        value, grad = _value_and_grad(labels, x, graph=graph)
        ref_value, ref_grad = ole_reference(labels, x)
        np.testing.assert_allclose(value, ref_value, rtol=1e-10, atol=1e-12, err_msg=name)
        np.testing.assert_allclose(grad, ref_grad, atol=1e-10, err_msg=name)


def test_float32_inputs_match_reference_at_float32_precision(rng):
    labels = np.repeat(np.arange(36), 4)
    x = rng.standard_normal((144, 128)).astype(np.float32)
    value, grad = _value_and_grad(labels, x)
    ref_value, ref_grad = ole_reference(labels, x.astype(np.float64))
    assert value.dtype == np.float32 and grad.dtype == np.float32
    np.testing.assert_allclose(value, ref_value, rtol=1e-5)
    np.testing.assert_allclose(grad, ref_grad, atol=1e-6)


def test_float32_inputs_in_every_case_match_reference(rng):
    # Well-conditioned batches take the float32-eigenvector shortcut for the batch term;
    # (nearly) rank-deficient ones must fall back to float64 and keep the threshold semantics.
    for name, labels, x in _cases(rng):
        x32 = x.astype(np.float32)
        value, grad = _value_and_grad(labels, x32)
        ref_value, ref_grad = ole_reference(labels, x32.astype(np.float64))
        np.testing.assert_allclose(value, ref_value, rtol=1e-5, atol=1e-6, err_msg=name)
        scale = np.abs(ref_grad).max()
        np.testing.assert_allclose(grad, ref_grad, atol=1e-5 * scale, err_msg=name)


def test_float32_rank_deficient_batch_keeps_the_threshold_exactly(rng):
    # Features in a 3-dim subspace: the batch has 7 zero singular values. A float32
    # decomposition would see them as ~1e-7 * s_1 and could keep noise directions.
    labels = np.repeat(np.arange(5), 4)
    x = (rng.standard_normal((20, 3)) @ rng.standard_normal((3, 10)) * 30).astype(np.float32)
    value, grad = _value_and_grad(labels, x)
    ref_value, ref_grad = ole_reference(labels, x.astype(np.float64))
    np.testing.assert_allclose(grad, ref_grad, atol=1e-7)
    np.testing.assert_allclose(value, ref_value, rtol=1e-6)


def test_delta_and_threshold_are_applied(rng):
    labels = np.repeat(np.arange(3), 4)
    x = rng.standard_normal((12, 6))
    for delta, threshold in [(0.0, 0.0), (3.0, 1e-6), (100.0, 1e-6), (1.0, 0.5)]:
        value, grad = _value_and_grad(labels, x, delta=delta, threshold=threshold)
        ref_value, ref_grad = ole_reference(labels, x, delta=delta, threshold=threshold)
        np.testing.assert_allclose(value, ref_value, rtol=1e-10)
        np.testing.assert_allclose(grad, ref_grad, atol=1e-10)


def test_gradient_matches_finite_differences_where_differentiable(rng):
    labels = tf.constant(np.repeat(np.arange(3), 3))
    x = tf.constant(rng.standard_normal((9, 5)))
    theoretical, numerical = tf.test.compute_gradient(lambda x: ops.ole_loss(labels, x), [x])
    np.testing.assert_allclose(theoretical[0], numerical[0], atol=1e-6)


def test_dynamic_shapes_and_class_sets_inside_tf_function(rng):
    fn = tf.function(
        lambda y, x: ops.ole_loss(y, x),
        input_signature=[tf.TensorSpec([None], tf.int64), tf.TensorSpec([None, 6], tf.float64)],
    )
    for labels in (np.repeat([5, 9, 1], 4), np.array([3, 3, 8, 0, 0, 0, 8])):
        x = rng.standard_normal((len(labels), 6))
        np.testing.assert_allclose(fn(labels, x).numpy(), ole_reference(labels, x)[0], rtol=1e-10)


def test_labels_of_shape_n_by_1_and_integral_floats(rng):
    labels = np.repeat(np.arange(3), 4)
    x = rng.standard_normal((12, 6))
    expected = ole_reference(labels, x)[0]
    np.testing.assert_allclose(ops.ole_loss(labels[:, None], x).numpy(), expected, rtol=1e-10)
    np.testing.assert_allclose(
        ops.ole_loss(labels.astype(np.float32), x).numpy(), expected, rtol=1e-10
    )


def test_collapsed_batch_has_finite_gradient():
    x = np.tile(np.linspace(-1, 1, 8), (12, 1))
    value, grad = _value_and_grad(np.repeat(np.arange(3), 4), x)
    assert np.isfinite(value) and np.all(np.isfinite(grad))
    ref_value, ref_grad = ole_reference(np.repeat(np.arange(3), 4), x)
    np.testing.assert_allclose(value, ref_value, rtol=1e-10)
    np.testing.assert_allclose(grad, ref_grad, atol=1e-10)


def test_non_finite_embeddings_give_nan(rng):
    x = rng.standard_normal((8, 4))
    x[2, 1] = np.nan
    value, grad = _value_and_grad(np.repeat(np.arange(2), 4), x)
    assert np.isnan(value) and np.all(np.isnan(grad))


def test_bad_arguments_name_the_argument(rng):
    x = rng.standard_normal((8, 4))
    with pytest.raises(ValueError, match=r"argument `labels`.*one label per row"):
        ops.ole_loss(np.arange(7), x)
    with pytest.raises(ValueError, match=r"argument `labels`.*shape \[N\]"):
        ops.ole_loss(np.zeros((8, 2), np.int32), x)
    with pytest.raises(TypeError, match=r"argument `labels`"):
        ops.ole_loss(np.array(["a"] * 8), x)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"`labels`.*non-integral"):
        ops.ole_loss(np.linspace(0, 1, 8), x)
    with pytest.raises(ValueError, match=r"argument `embeddings`.*rank-2"):
        ops.ole_loss(np.arange(8), x[None])
    with pytest.raises(ValueError, match=r"argument `delta`"):
        ops.ole_loss(np.arange(8), x, delta=-1.0)
    with pytest.raises(ValueError, match=r"argument `threshold`"):
        ops.ole_loss(np.arange(8), x, threshold=float("nan"))
    fn = tf.function(
        lambda y, x: ops.ole_loss(y, x),
        input_signature=[tf.TensorSpec([None], tf.int32), tf.TensorSpec([None, 4], tf.float64)],
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match="one label per row"):
        fn(np.arange(7, dtype=np.int32), x)


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16])
def test_half_precision_inputs_are_cast_back(rng, dtype):
    labels = np.repeat(np.arange(3), 4)
    x = tf.constant(rng.standard_normal((12, 6)), dtype)
    value, grad = _value_and_grad(labels, x)
    assert value.dtype == dtype.as_numpy_dtype and grad.dtype == dtype.as_numpy_dtype
    ref_value, _ = ole_reference(labels, tf.cast(x, tf.float64).numpy())
    np.testing.assert_allclose(float(value), ref_value, rtol=2e-2, atol=2e-2)


def test_xla_compilation_is_refused_with_the_fix_in_the_message(rng):
    x = tf.constant(rng.standard_normal((8, 4)))
    fn = tf.function(lambda y, x: ops.ole_loss(y, x), jit_compile=True)
    with pytest.raises(ValueError, match=r"XLA.*jit_compile=False"):
        fn(np.repeat(np.arange(2), 4), x)


@pytest.mark.parametrize(
    "dtype, scale",
    [("float32", 2.0**100), ("float32", 1e30), ("float32", 1e-30), ("float64", 1e300)]
    + [("float64", 1e-300)],
)
def test_extreme_magnitudes_are_scale_equivariant(rng, dtype, scale):
    # ole(cX; c delta, c threshold) = c ole(X; delta, threshold), with the same (scale-free)
    # subgradient: checked against the float64 numpy reference at unit scale.
    labels = np.repeat(np.arange(3), 4)
    x = rng.standard_normal((12, 6))
    expected, expected_grad = ole_reference(labels, x, delta=1.0, threshold=1e-6)
    value, grad = _value_and_grad(
        labels, (x * scale).astype(dtype), delta=scale, threshold=1e-6 * scale
    )
    rtol = 1e-4 if dtype == "float32" else 1e-9
    np.testing.assert_allclose(value / scale, expected, rtol=rtol)
    np.testing.assert_allclose(grad, expected_grad, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("graph", [False, True])
def test_a_batch_with_no_rows_gives_zero(graph):
    """Eq. 2 of an empty batch is 0/0; it used to crash ("Dimension -2147483647") when the
    row count was dynamic and refuse when it was static."""
    fn = ops.ole_loss
    if graph:
        fn = tf.function(
            fn,
            input_signature=[tf.TensorSpec([None], tf.int32), tf.TensorSpec([None, 4], tf.float32)],
        )
    x = tf.zeros([0, 4])
    with tf.GradientTape() as tape:
        tape.watch(x)
        value = fn(tf.zeros([0], tf.int32), x)
    assert float(value) == 0.0
    assert tape.gradient(value, x).shape == (0, 4)


@pytest.mark.parametrize("dtype, rtol", [("float16", 2e-3), ("bfloat16", 1e-2)])
def test_the_svd_helper_takes_half_precision_in_float32(rng, dtype, rtol):
    # TensorFlow has no float16/bfloat16 SVD kernel; the helper promotes and casts back.
    x = tf.cast(rng.standard_normal((2, 3, 5)), dtype)
    norms, subs = nuclear_norms_and_subgradients(x, 1e-6)
    assert norms.dtype == dtype and subs.dtype == dtype
    a = tf.cast(x, tf.float64).numpy()  # the rounded half values, in float64 NumPy
    u, s, vt = np.linalg.svd(a, full_matrices=False)
    np.testing.assert_allclose(tf.cast(norms, tf.float64), s.sum(axis=-1), rtol=rtol)
    np.testing.assert_allclose(tf.cast(subs, tf.float64), u @ vt, atol=4 * rtol)
