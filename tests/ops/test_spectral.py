import warnings

import numpy as np
import pytest
import tensorflow as tf

from tests import reference_spectral as ref
from tf_svmax import ops

SHAPES = [(144, 128), (72, 128), (9, 4), (4, 9), (6, 6)]
TOL = {tf.float32: 2e-5, tf.float64: 1e-10}


def _run(fn, graph):
    return tf.function(fn)() if graph else fn()


@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("method", ["gram", "svd"])
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_singular_values_match_numpy(rng, shape, dtype, method, graph):
    x = rng.standard_normal(shape)
    x_tf = tf.constant(x, dtype)
    expected = ref.singular_values(x_tf.numpy())
    got = _run(lambda: ops.singular_values(x_tf, method=method), graph).numpy()
    assert got.dtype == dtype.as_numpy_dtype
    assert got.shape == (min(shape),)
    assert np.all(np.diff(got) <= 0), "not in descending order"
    np.testing.assert_allclose(got, expected, rtol=0, atol=TOL[dtype] * expected[0])


@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("method", ["gram", "svd", "newton_schulz"])
@pytest.mark.parametrize("shape", SHAPES)
def test_nuclear_norm_and_mean_match_numpy(rng, shape, method, graph):
    x = tf.constant(rng.standard_normal(shape), tf.float32)
    expected = ref.singular_values(x.numpy())
    nuc = _run(lambda: ops.nuclear_norm(x, method=method), graph).numpy()
    mean = _run(lambda: ops.mean_singular_value(x, method=method), graph).numpy()
    np.testing.assert_allclose(nuc, expected.sum(), rtol=2e-5)
    np.testing.assert_allclose(mean, expected.mean(), rtol=2e-5)


@pytest.mark.parametrize("method", ["gram", "svd", "newton_schulz"])
@pytest.mark.parametrize("shape", [(144, 128), (20, 50)])
def test_nuclear_norm_gradient_is_polar_factor(rng, shape, method):
    x = tf.constant(rng.standard_normal(shape), tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(x)
        value = ops.nuclear_norm(x, method=method)
    _, expected = ref.nuclear_norm_and_gradient(x.numpy())
    np.testing.assert_allclose(tape.gradient(value, x).numpy(), expected, atol=1e-7)


@pytest.mark.parametrize("method", ["gram", "svd"])
def test_singular_value_gradient_matches_finite_differences(rng, method):
    x = tf.constant(rng.standard_normal((7, 5)), tf.float64)
    weights = tf.constant(rng.standard_normal(5), tf.float64)

    def f(x):
        return tf.reduce_sum(ops.singular_values(x, method=method) * weights)

    theoretical, numerical = tf.test.compute_gradient(f, [x])
    np.testing.assert_allclose(theoretical[0], numerical[0], atol=1e-6)


@pytest.mark.parametrize("method", ["gram", "svd", "newton_schulz"])
def test_mean_singular_value_gradient_matches_finite_differences(rng, method):
    x = tf.constant(rng.standard_normal((6, 9)), tf.float64)
    theoretical, numerical = tf.test.compute_gradient(
        lambda x: ops.mean_singular_value(x, method=method), [x]
    )
    np.testing.assert_allclose(theoretical[0], numerical[0], atol=1e-6)


@pytest.mark.parametrize("method", ["gram", "svd", "newton_schulz"])
def test_repeated_singular_values_give_the_unique_polar_gradient(method):
    # [I; I] has all singular values equal to sqrt(2) (tensorflow#17476 territory); the nuclear
    # norm is still differentiable there with gradient U V^T = [I; I] / sqrt(2).
    x = tf.constant(np.vstack([np.eye(4), np.eye(4)]), tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        value = ops.nuclear_norm(x, method=method)
    np.testing.assert_allclose(value.numpy(), 4 * np.sqrt(2), rtol=1e-6)
    np.testing.assert_allclose(tape.gradient(value, x).numpy(), x.numpy() / np.sqrt(2), atol=1e-6)


@pytest.mark.parametrize("method", ["gram", "svd", "newton_schulz"])
@pytest.mark.parametrize("kind", ["collapsed", "duplicated", "zero"])
def test_degenerate_batches_have_finite_gradients(rng, kind, method):
    x = ref.unit_rows(rng, 32, 16)
    if kind == "collapsed":
        x[:] = x[0]
    elif kind == "duplicated":
        x[16:] = x[:16]
    else:
        x[:] = 0
    x = tf.constant(x)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        s_mu = ops.mean_singular_value(x, method=method)
        penalty = ops.svmax(x, method=method)
    expected = ref.singular_values(x.numpy()).mean()
    np.testing.assert_allclose(s_mu.numpy(), expected, atol=1e-5)
    for value in (s_mu, penalty):
        grad = tape.gradient(value, x).numpy()
        assert np.all(np.isfinite(grad))
    if kind == "collapsed":
        lower, _ = ops.svmax_bounds(32, 16)
        np.testing.assert_allclose(s_mu.numpy(), lower, rtol=1e-5)


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16])
def test_half_precision_is_computed_in_float32_and_cast_back(rng, dtype):
    x = tf.constant(ref.unit_rows(rng, 40, 16), dtype)
    expected = ref.singular_values(tf.cast(x, tf.float64).numpy()).mean()
    with tf.GradientTape() as tape:
        tape.watch(x)
        value = ops.mean_singular_value(x)
    assert value.dtype == dtype
    assert tape.gradient(value, x).dtype == dtype
    np.testing.assert_allclose(float(value), expected, rtol=1e-2)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("method", ["gram", "svd", "newton_schulz"])
def test_non_finite_input_gives_nan_value_and_gradient(rng, bad, method):
    x = rng.standard_normal((10, 4)).astype(np.float32)
    x[3, 2] = bad
    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        value = ops.nuclear_norm(x, method=method)
    assert np.isnan(value.numpy())
    assert np.all(np.isnan(tape.gradient(value, x).numpy()))
    if method != "newton_schulz":
        assert np.all(np.isnan(ops.singular_values(x, method=method).numpy()))


def test_bad_arguments_name_the_argument():
    with pytest.raises(ValueError, match=r"argument `x`.*rank-2"):
        ops.singular_values(tf.zeros([2, 3, 4]))
    with pytest.raises(TypeError, match=r"argument `x`.*floating"):
        ops.nuclear_norm(tf.zeros([3, 3], tf.int32))
    with pytest.raises(ValueError, match=r"argument `method`"):
        ops.nuclear_norm(tf.eye(3), method="lanczos")
    with pytest.raises(ValueError, match=r"argument `method`.*newton_schulz"):
        ops.singular_values(tf.eye(3), method="newton_schulz")
    with pytest.raises(ValueError, match=r"argument `embeddings`.*at least 2 row"):
        ops.svmax(tf.ones([1, 8]))
    with pytest.raises(ValueError, match=r"argument `bounded`"):
        ops.svmax(tf.eye(3), bounded="yes")


def test_dynamic_rank_one_batch_is_refused_when_the_graph_runs():
    fn = tf.function(ops.svmax, input_signature=[tf.TensorSpec([None, 8], tf.float32)])
    with pytest.raises(tf.errors.InvalidArgumentError, match="at least 2 rows"):
        fn(tf.ones([1, 8]))


def test_bounds_reproduce_the_originals_and_the_dissertation():
    lower, upper = ops.svmax_bounds(144, 128)
    assert lower == pytest.approx(0.09375, abs=1e-12)
    assert upper == pytest.approx(1.06066, abs=1e-5)
    for b, d in [(144, 128), (288, 64), (129, 128), (5924, 128)]:
        np.testing.assert_allclose(ops.svmax_bounds(b, d), ref.original_bounds(b, d), rtol=1e-12)
    for b, d in [(72, 128), (1, 5), (16, 1024)]:
        np.testing.assert_allclose(ops.svmax_bounds(b, d), ref.small_batch_bounds(b, d), rtol=1e-12)
    # Dissertation Fig. 3.9: CUB-200 test split, b = 5924, d = 128 gives U = 6.80.
    assert ops.svmax_bounds(5924, 128)[1] == pytest.approx(6.80, abs=5e-3)


def test_bounds_accept_tensors_and_reject_bad_values():
    lower, upper = ops.svmax_bounds(tf.constant(72), tf.constant(128))
    np.testing.assert_allclose(
        [lower.numpy(), upper.numpy()], ref.small_batch_bounds(72, 128), rtol=1e-6
    )
    with pytest.raises(ValueError, match=r"argument `batch_size`"):
        ops.svmax_bounds(0, 128)
    with pytest.raises(TypeError, match=r"argument `dim`"):
        ops.svmax_bounds(4, 2.5)


@pytest.mark.parametrize("shape", [(144, 128), (72, 128), (30, 8)])
def test_bounds_hold_and_are_attained(rng, shape):
    b, d = shape
    lower, upper = ops.svmax_bounds(b, d)
    for _ in range(3):
        s_mu = ops.mean_singular_value(ref.unit_rows(rng, b, d)).numpy()
        assert lower - 1e-6 <= s_mu <= upper + 1e-6
    rank_one = np.zeros((b, d), np.float32)
    rank_one[:, 0] = 1
    np.testing.assert_allclose(ops.mean_singular_value(rank_one).numpy(), lower, rtol=1e-5)
    # Rows cycling through the standard basis spread the energy evenly: s_mu = U when k | b.
    k = min(b, d)
    tight = np.eye(d, dtype=np.float32)[np.arange(b) % k]
    if b % k == 0:
        np.testing.assert_allclose(ops.mean_singular_value(tight).numpy(), upper, rtol=1e-5)


@pytest.mark.parametrize("bounded", [True, False])
@pytest.mark.parametrize("shape", [(144, 128), (72, 128)])
def test_svmax_value_and_gradient_match_numpy(rng, shape, bounded):
    x = tf.constant(ref.unit_rows(rng, *shape, dtype=np.float64))
    with tf.GradientTape() as tape:
        tape.watch(x)
        value = ops.svmax(x, bounded=bounded)
    bounds = ref.original_bounds(*shape) if shape[0] >= shape[1] else ref.small_batch_bounds(*shape)
    expected, expected_grad = ref.svmax_reference(x.numpy(), bounds, bounded=bounded)
    np.testing.assert_allclose(value.numpy(), expected, rtol=1e-10)
    np.testing.assert_allclose(tape.gradient(value, x).numpy(), expected_grad, atol=1e-10)


def test_svmax_with_a_dynamic_batch_dimension(rng):
    fn = tf.function(ops.svmax, input_signature=[tf.TensorSpec([None, 16], tf.float32)])
    for b in (40, 10):
        x = ref.unit_rows(rng, b, 16, dtype=np.float64)
        bounds = ref.original_bounds(b, 16) if b >= 16 else ref.small_batch_bounds(b, 16)
        expected, _ = ref.svmax_reference(x, bounds)
        np.testing.assert_allclose(fn(tf.constant(x, tf.float32)).numpy(), expected, rtol=1e-5)


def test_xla_auto_path_is_fast_path_and_correct(rng):
    x = tf.constant(ref.unit_rows(rng, 48, 16))
    expected = ref.singular_values(x.numpy()).mean()

    @tf.function(jit_compile=True)
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            value = ops.mean_singular_value(x)
        return value, tape.gradient(value, x)

    value, grad = step(x)
    np.testing.assert_allclose(value.numpy(), expected, rtol=1e-5)
    _, polar = ref.nuclear_norm_and_gradient(x.numpy())
    np.testing.assert_allclose(grad.numpy(), polar / 16, atol=1e-5)
    graph = step.get_concrete_function(x).graph.as_graph_def()
    op_types = {node.op for node in graph.node}
    op_types |= {node.op for f in graph.library.function for node in f.node_def}
    assert "While" in op_types or "StatelessWhile" in op_types  # the Newton-Schulz loop
    assert "Svd" not in op_types and "SelfAdjointEigV2" not in op_types


def test_xla_warns_for_slow_paths(rng):
    from tf_svmax.ops import _checks

    _checks._WARNED.clear()
    x = tf.constant(ref.unit_rows(rng, 12, 4))
    with pytest.warns(RuntimeWarning, match="XLA"):
        tf.function(lambda x: ops.singular_values(x), jit_compile=True)(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tf.function(lambda x: ops.svmax(x), jit_compile=True)(x)
