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
    with pytest.raises(ValueError, match=r"argument `bounded`"):
        ops.svmax(tf.eye(3), bounded="yes")


@pytest.mark.parametrize("graph", [False, True])
def test_single_row_batches_have_the_defined_penalty_one(graph):
    """min(b, d) = 1 makes U = L (Eq. 4 is 0/0): the penalty is defined as 1, gradient 0."""
    fn = ops.svmax
    if graph:
        fn = tf.function(fn, input_signature=[tf.TensorSpec([None, None], tf.float32)])
    for shape in ([1, 8], [5, 1]):
        x = tf.math.l2_normalize(tf.random.normal(shape), axis=-1)
        with tf.GradientTape() as tape:
            tape.watch(x)
            value = fn(x)
        assert float(value) == 1.0
        np.testing.assert_array_equal(tape.gradient(value, x).numpy(), 0.0)


def _rank_cut_polar(x):
    """U_1 V_1^T over the singular values above the input dtype's noise floor (float64 SVD).

    The cutoff (10x NumPy's matrix_rank default for the input dtype) separates the genuine
    directions from the rounding noise of the input itself.
    """
    u, s, vt = np.linalg.svd(np.asarray(x, np.float64), full_matrices=False)
    keep = s > 10 * max(x.shape) * np.finfo(x.dtype).eps * s[0]
    return u[:, keep] @ vt[keep]


@pytest.mark.parametrize("method", ["gram", "svd", "newton_schulz"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["collapsed", "bottleneck", "duplicated_wide"])
def test_rank_deficient_gradient_is_the_subgradient_u1_v1(rng, kind, dtype, method):
    if kind == "collapsed":
        x = np.tile(ref.unit_rows(rng, 1, 16, np.float64), (32, 1))
    elif kind == "bottleneck":  # 144 x 128 embeddings through a 20-dim linear bottleneck
        x = rng.standard_normal((144, 20)) @ rng.standard_normal((20, 128))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
    else:  # b < d with duplicated rows
        x = ref.unit_rows(rng, 36, 64, np.float64)
        x = np.vstack([x, x])
    x = x.astype(dtype)
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        value = ops.nuclear_norm(xt, method=method)
    grad = tape.gradient(value, xt).numpy().astype(np.float64)
    expected = _rank_cut_polar(x)
    tol = 2e-3 if dtype == np.float32 else 1e-6
    np.testing.assert_allclose(grad, expected, atol=tol)
    assert np.linalg.norm(grad, 2) <= 1 + tol  # a subgradient of the nuclear norm


def test_bounds_reproduce_the_originals_and_the_dissertation():
    lower, upper = ops.svmax_bounds(144, 128)
    assert lower == pytest.approx(0.09375, abs=1e-12)
    assert upper == pytest.approx(1.06066, abs=1e-5)
    for b, d in [(144, 128), (288, 64), (129, 128), (5924, 128), (64, 16)]:
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
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"`batch_size`"):
        ops.svmax_bounds(tf.constant(0), 8)
    with pytest.raises(ValueError, match=r"argument `batch_size`"):
        ops.svmax_bounds(-4, tf.constant(8))
    with pytest.raises(ValueError, match=r"argument `dim`.*scalar"):
        ops.svmax_bounds(4, tf.constant([8, 8]))
    with pytest.raises(TypeError, match=r"argument `dtype`"):
        ops.svmax_bounds(tf.constant(4), 8, dtype=tf.int32)


@pytest.mark.parametrize("method", ["gram", "svd", "newton_schulz"])
def test_unknown_rank_inputs_inside_tf_function(rng, method):
    fn = tf.function(
        lambda x: ops.svmax(x, method=method), input_signature=[tf.TensorSpec(None, tf.float32)]
    )
    x = ref.unit_rows(rng, 20, 6)
    expected, _ = ref.svmax_reference(x, ref.original_bounds(20, 6))
    np.testing.assert_allclose(fn(x).numpy(), expected, rtol=1e-5)
    with pytest.raises(tf.errors.InvalidArgumentError, match="rank-2"):
        fn(np.zeros([2, 3, 4], np.float32))


@pytest.mark.parametrize("shape", [(144, 128), (72, 128), (30, 8), (64, 16), (256, 128)])
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


@pytest.mark.parametrize(
    "dtype, scales",
    [
        (np.float32, (1e-30, 1e-20, 1e-19, 1e19, 1e20, 1e30)),
        (np.float64, (1e-300, 1e-150, 1e150, 1e300)),
    ],
)
@pytest.mark.parametrize(
    "method, compile_mode",
    [(m, c) for m in ("gram", "svd", "newton_schulz") for c in ("eager", "function")]
    + [("newton_schulz", "xla")],  # XLA's own path (the others warn that they are slow there)
)
def test_scale_equivariant_value_and_scale_invariant_gradient(
    rng, dtype, scales, method, compile_mode
):
    """s_mu(c E) = c s_mu(E) and its gradient does not depend on c (numpy float64 reference),
    at magnitudes where squares overflow or underflow."""
    x = ref.unit_rows(rng, 12, 5).astype(np.float64)
    s = np.linalg.svd(x, compute_uv=False)
    u, _, vt = np.linalg.svd(x, full_matrices=False)
    expected_grad = (u @ vt) / 5  # d mean / dE = U V^T / k
    fn = lambda e: ops.mean_singular_value(e, method=method)  # noqa: E731
    if compile_mode != "eager":
        fn = tf.function(fn, jit_compile=compile_mode == "xla")
    for c in scales:
        e = tf.constant((x * c).astype(dtype))
        with tf.GradientTape() as tape:
            tape.watch(e)
            value = fn(e)
        grad = tape.gradient(value, e).numpy()
        tol = 1e-4 if dtype == np.float32 else 1e-9
        np.testing.assert_allclose(float(value) / c, s.mean(), rtol=tol, err_msg=f"scale {c}")
        np.testing.assert_allclose(grad, expected_grad, atol=tol, err_msg=f"scale {c}")


@pytest.mark.parametrize("graph", [False, True])
def test_a_batch_with_no_rows_gives_zero_with_a_zero_gradient(graph):
    """Static and dynamic row counts agree: nothing to measure or penalize is 0 (not NaN, not
    an error), so a replica's empty share of an uneven batch cannot poison training."""
    fns = {
        "nuclear_norm": ops.nuclear_norm,
        "mean_singular_value": ops.mean_singular_value,
        "svmax": ops.svmax,
        "svmax_unbounded": lambda x: ops.svmax(x, bounded=False),
    }
    for name, fn in fns.items():
        if graph:
            fn = tf.function(fn, input_signature=[tf.TensorSpec([None, 4], tf.float32)])
        x = tf.zeros([0, 4])
        with tf.GradientTape() as tape:
            tape.watch(x)
            value = fn(x)
        assert float(value) == 0.0, name
        assert tape.gradient(value, x).shape == (0, 4), name
