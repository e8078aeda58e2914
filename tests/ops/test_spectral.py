"""tf_svmax.ops.spectral on the process' Keras backend (TensorFlow, JAX or PyTorch), against
float64 NumPy references (tests/reference_spectral.py, closed forms, NumPy finite differences).

float64 cases run on TensorFlow and PyTorch; on JAX they are skipped with the reason asserted
(`_float64_or_skip`): JAX has no float64 unless `jax_enable_x64` is set, a process-wide switch,
and the float32 cases already cover JAX's solvers at the 1e-5 the core promises. The tests that
need a `tf.function` with unknown shapes are TensorFlow's (JAX and PyTorch shapes are static).
"""

import warnings

import keras
import numpy as np
import pytest
from keras import ops

from tests import backends
from tests import reference_spectral as ref
from tf_svmax import _backend, checks
from tf_svmax import ops as svmax_ops
from tf_svmax.ops import spectral

pytestmark = pytest.mark.all_backends

B = backends.BACKEND
SHAPES = [(144, 128), (72, 128), (9, 4), (4, 9), (6, 6)]
METHODS = ["gram", "svd", "newton_schulz"]
# float32: the 1e-5 relative of the core on every backend; float64 as before.
TOL = {"float32": 1e-5, "float64": 1e-10}
TF_ONLY = pytest.mark.skipif(B != "tensorflow", reason="tf.function with unknown shapes")
# On JAX and TensorFlow `graph` is a compiled trace; PyTorch runs eagerly.
MODES = ["eager", "graph"]


def _float64_or_skip():
    """Skips a float64 case on JAX after checking why: without x64, float64 becomes float32."""
    if B == "jax":
        import jax

        assert not jax.config.jax_enable_x64
        assert backends.to_numpy(ops.convert_to_tensor(np.zeros(1))).dtype == np.float32
        pytest.skip("JAX without jax_enable_x64 computes float64 input in float32")


def _wrap(fn, mode):
    return backends.graph(fn) if mode == "graph" else fn


def _dtype(x):
    return keras.backend.standardize_dtype(x.dtype)


def _assert_rel(got, expected, rtol, err_msg=""):
    """max |got - expected| <= rtol * max |expected| (relative to the largest entry)."""
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    scale = np.abs(expected).max()
    np.testing.assert_allclose(got, expected, rtol=0, atol=rtol * scale, err_msg=err_msg)


def _compiled_value_and_grad(fn, x):
    """`backends.value_and_grad` inside the backend's compiler (XLA on TensorFlow and JAX)."""
    if B == "tensorflow":
        import tensorflow as tf

        @tf.function(jit_compile=True)
        def step(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                value = fn(x)
            return value, tape.gradient(value, x)

        value, grad = step(tf.constant(x))
        return backends.to_numpy(value), backends.to_numpy(grad)
    if B == "jax":
        import jax

        value, grad = jax.jit(jax.value_and_grad(fn))(x)
        return backends.to_numpy(value), backends.to_numpy(grad)
    value, (grad,) = backends.value_and_grad(fn, x)
    return value, grad


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("method", ["gram", "svd"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", SHAPES)
def test_singular_values_match_numpy(rng, shape, dtype, method, mode):
    if dtype == "float64":
        _float64_or_skip()
    x = rng.standard_normal(shape).astype(dtype)
    expected = ref.singular_values(x)
    got = backends.to_numpy(_wrap(lambda x: svmax_ops.singular_values(x, method=method), mode)(x))
    assert got.dtype == np.dtype(dtype)
    assert got.shape == (min(shape),)
    assert np.all(np.diff(got) <= 0), "not in descending order"
    np.testing.assert_allclose(got, expected, rtol=0, atol=TOL[dtype] * expected[0])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("shape", SHAPES)
def test_nuclear_norm_and_mean_match_numpy(rng, shape, method, mode):
    x = rng.standard_normal(shape).astype(np.float32)
    expected = ref.singular_values(x)
    nuc = backends.to_numpy(_wrap(lambda x: svmax_ops.nuclear_norm(x, method=method), mode)(x))
    mean = backends.to_numpy(
        _wrap(lambda x: svmax_ops.mean_singular_value(x, method=method), mode)(x)
    )
    np.testing.assert_allclose(nuc, expected.sum(), rtol=TOL["float32"])
    np.testing.assert_allclose(mean, expected.mean(), rtol=TOL["float32"])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("shape", [(144, 128), (20, 50)])
def test_nuclear_norm_gradient_is_polar_factor(rng, shape, method, dtype):
    if dtype == "float64":
        _float64_or_skip()
    x = rng.standard_normal(shape).astype(dtype)
    value, (grad,) = backends.value_and_grad(lambda x: svmax_ops.nuclear_norm(x, method=method), x)
    expected_value, expected = ref.nuclear_norm_and_gradient(x)
    np.testing.assert_allclose(value, expected_value, rtol=TOL[dtype])
    if dtype == "float64":
        np.testing.assert_allclose(grad, expected, atol=1e-7)
    else:
        _assert_rel(grad, expected, TOL[dtype])


def test_the_upstream_gradient_is_applied_on_every_backend(rng):
    """Keras' PyTorch backend calls a custom gradient as ``grad(*args, upstream=...)``,
    TensorFlow and JAX positionally; a scaled loss must scale every path's gradient."""
    x = rng.standard_normal((9, 4)).astype(np.float32)
    _, polar = ref.nuclear_norm_and_gradient(x)
    weights = rng.standard_normal(4).astype(np.float32)
    u, _, vt = np.linalg.svd(x.astype(np.float64), full_matrices=False)
    for method in METHODS:
        _, (grad,) = backends.value_and_grad(
            lambda x, method=method: -3.0 * svmax_ops.nuclear_norm(x, method=method), x
        )
        _assert_rel(grad, -3.0 * polar, TOL["float32"], err_msg=method)
    for method in ["gram", "svd"]:
        _, (grad,) = backends.value_and_grad(
            lambda x, method=method: ops.sum(
                svmax_ops.singular_values(x, method=method) * ops.convert_to_tensor(weights)
            ),
            x,
        )
        _assert_rel(grad, (u * weights) @ vt, TOL["float32"], err_msg=method)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("method", ["gram", "svd"])
def test_singular_value_gradient_matches_finite_differences(rng, method, dtype):
    if dtype == "float64":
        _float64_or_skip()
    x = rng.standard_normal((7, 5)).astype(dtype)
    weights = rng.standard_normal(5)

    def f(x):
        s = svmax_ops.singular_values(x, method=method)
        return ops.sum(s * ops.convert_to_tensor(weights.astype(dtype)))

    _, (theoretical,) = backends.value_and_grad(f, x)
    numerical = backends.numpy_gradient(lambda x: np.sum(ref.singular_values(x) * weights), x)
    if dtype == "float64":
        np.testing.assert_allclose(theoretical, numerical, atol=1e-6)
    else:
        _assert_rel(theoretical, numerical, TOL[dtype])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("method", METHODS)
def test_mean_singular_value_gradient_matches_finite_differences(rng, method, dtype):
    if dtype == "float64":
        _float64_or_skip()
    x = rng.standard_normal((6, 9)).astype(dtype)
    _, (theoretical,) = backends.value_and_grad(
        lambda x: svmax_ops.mean_singular_value(x, method=method), x
    )
    numerical = backends.numpy_gradient(lambda x: ref.singular_values(x).mean(), x)
    if dtype == "float64":
        np.testing.assert_allclose(theoretical, numerical, atol=1e-6)
    else:
        _assert_rel(theoretical, numerical, TOL[dtype])


@pytest.mark.parametrize("method", METHODS)
def test_repeated_singular_values_give_the_unique_polar_gradient(method):
    # [I; I] has all singular values equal to sqrt(2) (tensorflow#17476 territory); the nuclear
    # norm is still differentiable there with gradient U V^T = [I; I] / sqrt(2).
    x = np.vstack([np.eye(4), np.eye(4)]).astype(np.float32)
    value, (grad,) = backends.value_and_grad(lambda x: svmax_ops.nuclear_norm(x, method=method), x)
    np.testing.assert_allclose(value, 4 * np.sqrt(2), rtol=1e-6)
    np.testing.assert_allclose(grad, x / np.sqrt(2), atol=1e-6)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("kind", ["collapsed", "duplicated", "zero"])
def test_degenerate_batches_have_finite_gradients(rng, kind, method):
    x = ref.unit_rows(rng, 32, 16)
    if kind == "collapsed":
        x[:] = x[0]
    elif kind == "duplicated":
        x[16:] = x[:16]
    else:
        x[:] = 0
    s_mu, (grad,) = backends.value_and_grad(
        lambda x: svmax_ops.mean_singular_value(x, method=method), x
    )
    _, (penalty_grad,) = backends.value_and_grad(lambda x: svmax_ops.svmax(x, method=method), x)
    expected = ref.singular_values(x).mean()
    np.testing.assert_allclose(s_mu, expected, atol=1e-5)
    assert np.all(np.isfinite(grad)) and np.all(np.isfinite(penalty_grad))
    if kind == "collapsed":
        lower, _ = svmax_ops.svmax_bounds(32, 16)
        np.testing.assert_allclose(s_mu, lower, rtol=1e-5)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_is_computed_in_float32_and_cast_back(rng, dtype):
    x32 = ref.unit_rows(rng, 40, 16)
    half = ops.cast(ops.convert_to_tensor(x32), dtype)
    x64 = backends.to_numpy(ops.cast(half, "float32")).astype(np.float64)
    expected = ref.singular_values(x64).mean()
    value = svmax_ops.mean_singular_value(half)
    assert _dtype(value) == dtype
    np.testing.assert_allclose(float(backends.to_numpy(ops.cast(value, "float32"))), expected, 1e-2)
    # The gradient flows through the half-precision input (cast in and out inside `fn`).
    seen = {}

    def fn(x):
        x_half = ops.cast(x, dtype)
        value = svmax_ops.mean_singular_value(x_half)
        seen["dtype"] = _dtype(value)
        return ops.cast(value, "float32")

    _, (grad,) = backends.value_and_grad(fn, x32)
    assert seen["dtype"] == dtype
    _, polar = ref.nuclear_norm_and_gradient(x64)
    np.testing.assert_allclose(grad, polar / 16, atol=1e-2 * np.abs(polar / 16).max())


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("method", METHODS)
def test_non_finite_input_gives_nan_value_and_gradient(rng, bad, method, mode):
    x = rng.standard_normal((10, 4)).astype(np.float32)
    x[3, 2] = bad
    if mode == "compiled":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the slow-path XLA warnings
            value, grad = _compiled_value_and_grad(
                lambda x: svmax_ops.nuclear_norm(x, method=method), x
            )
    else:
        value, (grad,) = backends.value_and_grad(
            lambda x: svmax_ops.nuclear_norm(x, method=method), x
        )
    assert np.isnan(value)
    assert np.all(np.isnan(grad))
    if method != "newton_schulz":
        values = backends.to_numpy(svmax_ops.singular_values(x, method=method))
        assert np.all(np.isnan(values))
        _, (grad,) = backends.value_and_grad(
            lambda x: ops.sum(svmax_ops.singular_values(x, method=method)), x
        )
        assert np.all(np.isnan(grad))


def test_bad_arguments_name_the_argument():
    with pytest.raises(ValueError, match=r"argument `x`.*rank-2"):
        svmax_ops.singular_values(np.zeros([2, 3, 4], np.float32))
    with pytest.raises(TypeError, match=r"argument `x`.*floating"):
        svmax_ops.nuclear_norm(np.zeros([3, 3], np.int32))
    with pytest.raises(ValueError, match=r"argument `method`"):
        svmax_ops.nuclear_norm(np.eye(3, dtype=np.float32), method="lanczos")
    with pytest.raises(ValueError, match=r"argument `method`.*newton_schulz"):
        svmax_ops.singular_values(np.eye(3, dtype=np.float32), method="newton_schulz")
    with pytest.raises(ValueError, match=r"argument `bounded`"):
        svmax_ops.svmax(np.eye(3, dtype=np.float32), bounded="yes")


@pytest.mark.parametrize("mode", MODES)
def test_single_row_batches_have_the_defined_penalty_one(rng, mode):
    """min(b, d) = 1 makes U = L (Eq. 4 is 0/0): the penalty is defined as 1, gradient 0."""
    for shape in ([1, 8], [5, 1]):
        x = rng.standard_normal(shape).astype(np.float32)
        x /= np.linalg.norm(x, axis=-1, keepdims=True)
        value = backends.to_numpy(_wrap(svmax_ops.svmax, mode)(x))
        assert float(value) == 1.0
        _, (grad,) = backends.value_and_grad(svmax_ops.svmax, x)
        np.testing.assert_array_equal(grad, 0.0)


@TF_ONLY
def test_single_row_batches_with_dynamic_shapes_inside_tf_function(rng):
    import tensorflow as tf

    fn = tf.function(svmax_ops.svmax, input_signature=[tf.TensorSpec([None, None], tf.float32)])
    for shape in ([1, 8], [5, 1]):
        x = tf.math.l2_normalize(tf.constant(rng.standard_normal(shape), tf.float32), axis=-1)
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


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["collapsed", "bottleneck", "duplicated_wide"])
def test_rank_deficient_gradient_is_the_subgradient_u1_v1(rng, kind, dtype, method):
    if dtype == np.float64:
        _float64_or_skip()
    if kind == "collapsed":
        x = np.tile(ref.unit_rows(rng, 1, 16, np.float64), (32, 1))
    elif kind == "bottleneck":  # 144 x 128 embeddings through a 20-dim linear bottleneck
        x = rng.standard_normal((144, 20)) @ rng.standard_normal((20, 128))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
    else:  # b < d with duplicated rows
        x = ref.unit_rows(rng, 36, 64, np.float64)
        x = np.vstack([x, x])
    x = x.astype(dtype)
    _, (grad,) = backends.value_and_grad(lambda x: svmax_ops.nuclear_norm(x, method=method), x)
    grad = grad.astype(np.float64)
    expected = _rank_cut_polar(x)
    tol = 2e-3 if dtype == np.float32 else 1e-6
    assert np.all(np.isfinite(grad))
    np.testing.assert_allclose(grad, expected, atol=tol)
    assert np.linalg.norm(grad, 2) <= 1 + tol  # a subgradient of the nuclear norm


def test_bounds_reproduce_the_originals_and_the_dissertation():
    lower, upper = svmax_ops.svmax_bounds(144, 128)
    assert lower == pytest.approx(0.09375, abs=1e-12)
    assert upper == pytest.approx(1.06066, abs=1e-5)
    for b, d in [(144, 128), (288, 64), (129, 128), (5924, 128), (64, 16)]:
        np.testing.assert_allclose(
            svmax_ops.svmax_bounds(b, d), ref.original_bounds(b, d), rtol=1e-12
        )
    for b, d in [(72, 128), (1, 5), (16, 1024)]:
        np.testing.assert_allclose(
            svmax_ops.svmax_bounds(b, d), ref.small_batch_bounds(b, d), rtol=1e-12
        )
    # Dissertation Fig. 3.9: CUB-200 test split, b = 5924, d = 128 gives U = 6.80.
    assert svmax_ops.svmax_bounds(5924, 128)[1] == pytest.approx(6.80, abs=5e-3)


def test_bounds_accept_tensors_and_reject_bad_values():
    tensor = ops.convert_to_tensor
    lower, upper = svmax_ops.svmax_bounds(tensor(72), tensor(128))
    assert _dtype(lower) == _dtype(upper) == "float32"
    np.testing.assert_allclose(
        [backends.to_numpy(lower), backends.to_numpy(upper)],
        ref.small_batch_bounds(72, 128),
        rtol=1e-6,
    )
    with pytest.raises(ValueError, match=r"argument `batch_size`"):
        svmax_ops.svmax_bounds(0, 128)
    with pytest.raises(TypeError, match=r"argument `dim`"):
        svmax_ops.svmax_bounds(4, 2.5)
    # A tensor's value is checked when it runs: TensorFlow's assertion, or Python eagerly.
    if B == "tensorflow":
        import tensorflow as tf

        error = tf.errors.InvalidArgumentError
    else:
        error = ValueError
    with pytest.raises(error, match=r"`batch_size`"):
        svmax_ops.svmax_bounds(tensor(0), 8)
    with pytest.raises(ValueError, match=r"argument `batch_size`"):
        svmax_ops.svmax_bounds(-4, tensor(8))
    with pytest.raises(ValueError, match=r"argument `dim`.*scalar"):
        svmax_ops.svmax_bounds(4, tensor([8, 8]))
    with pytest.raises(TypeError, match=r"argument `dtype`"):
        svmax_ops.svmax_bounds(tensor(4), 8, dtype="int32")


@TF_ONLY
@pytest.mark.parametrize("method", METHODS)
def test_unknown_rank_inputs_inside_tf_function(rng, method):
    import tensorflow as tf

    fn = tf.function(
        lambda x: svmax_ops.svmax(x, method=method),
        input_signature=[tf.TensorSpec(None, tf.float32)],
    )
    x = ref.unit_rows(rng, 20, 6)
    expected, _ = ref.svmax_reference(x, ref.original_bounds(20, 6))
    np.testing.assert_allclose(fn(x).numpy(), expected, rtol=1e-5)
    with pytest.raises(tf.errors.InvalidArgumentError, match="rank-2"):
        fn(np.zeros([2, 3, 4], np.float32))


@pytest.mark.parametrize("shape", [(144, 128), (72, 128), (30, 8), (64, 16), (256, 128)])
def test_bounds_hold_and_are_attained(rng, shape):
    b, d = shape
    lower, upper = svmax_ops.svmax_bounds(b, d)
    for _ in range(3):
        s_mu = backends.to_numpy(svmax_ops.mean_singular_value(ref.unit_rows(rng, b, d)))
        assert lower - 1e-6 <= s_mu <= upper + 1e-6
    rank_one = np.zeros((b, d), np.float32)
    rank_one[:, 0] = 1
    np.testing.assert_allclose(
        backends.to_numpy(svmax_ops.mean_singular_value(rank_one)), lower, rtol=1e-5
    )
    # Rows cycling through the standard basis spread the energy evenly: s_mu = U when k | b.
    k = min(b, d)
    tight = np.eye(d, dtype=np.float32)[np.arange(b) % k]
    if b % k == 0:
        np.testing.assert_allclose(
            backends.to_numpy(svmax_ops.mean_singular_value(tight)), upper, rtol=1e-5
        )


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("bounded", [True, False])
@pytest.mark.parametrize("shape", [(144, 128), (72, 128)])
def test_svmax_value_and_gradient_match_numpy(rng, shape, bounded, dtype):
    if dtype == "float64":
        _float64_or_skip()
    x = ref.unit_rows(rng, *shape, dtype=np.float64).astype(dtype)
    value, (grad,) = backends.value_and_grad(lambda x: svmax_ops.svmax(x, bounded=bounded), x)
    bounds = ref.original_bounds(*shape) if shape[0] >= shape[1] else ref.small_batch_bounds(*shape)
    expected, expected_grad = ref.svmax_reference(x, bounds, bounded=bounded)
    if dtype == "float64":
        np.testing.assert_allclose(value, expected, rtol=1e-10)
        np.testing.assert_allclose(grad, expected_grad, atol=1e-10)
    else:
        np.testing.assert_allclose(value, expected, rtol=TOL[dtype])
        _assert_rel(grad, expected_grad, TOL[dtype])


def test_svmax_with_changing_batch_sizes_in_one_compiled_function(rng):
    # TensorFlow: one graph with a dynamic batch dimension; JAX: a retrace per shape.
    fn = backends.graph(svmax_ops.svmax)
    if B == "tensorflow":
        import tensorflow as tf

        fn = tf.function(svmax_ops.svmax, input_signature=[tf.TensorSpec([None, 16], tf.float32)])
    for b in (40, 10):
        x = ref.unit_rows(rng, b, 16, dtype=np.float64)
        bounds = ref.original_bounds(b, 16) if b >= 16 else ref.small_batch_bounds(b, 16)
        expected, _ = ref.svmax_reference(x, bounds)
        value = backends.to_numpy(fn(x.astype(np.float32)))
        np.testing.assert_allclose(value, expected, rtol=TOL["float32"])


def _compiled_op_names(fn, x):
    """The primitive/op names of `fn`'s compiled program (TensorFlow graph, JAX jaxpr)."""
    if B == "tensorflow":
        import tensorflow as tf

        graph = tf.function(fn, jit_compile=True).get_concrete_function(x).graph.as_graph_def()
        names = {node.op for node in graph.node}
        return names | {node.op for f in graph.library.function for node in f.node_def}
    import jax

    return set(str(jax.make_jaxpr(fn)(x)).replace("(", " ").replace("[", " ").split())


@pytest.mark.parametrize(
    "kind", ["gaussian", "unit_rows", "stacked_identities", "rank_one", "one_large_entry", "signs"]
)
def test_newton_schulz_starts_from_an_upper_bound_of_the_largest_singular_value(rng, kind):
    """The Newton-Schulz iteration converges only for singular values of the start in
    (0, sqrt(3)): its scale must bound s_1 (NumPy float64), and never exceed ||E||_F."""
    x = {
        "gaussian": lambda: rng.standard_normal((144, 128)),
        "unit_rows": lambda: ref.unit_rows(rng, 1024, 128, np.float64),
        "stacked_identities": lambda: np.vstack([np.eye(8), np.eye(8)]),
        "rank_one": lambda: np.outer(rng.standard_normal(40), rng.standard_normal(16)),
        "one_large_entry": lambda: np.diag(np.r_[100.0, np.ones(15)]),
        "signs": lambda: np.sign(rng.standard_normal((64, 32))),
    }[kind]().astype(np.float32)
    e = ops.convert_to_tensor(x)
    bound = float(
        backends.to_numpy(spectral._sigma_max_bound(ops.matmul(ops.transpose(e), e), ops.norm(e)))
    )
    s_1 = ref.singular_values(x)[0]
    assert s_1 <= bound * (1 + 1e-5), (s_1, bound)
    assert bound <= np.linalg.norm(x.astype(np.float64)) * (1 + 1e-5)


@pytest.mark.parametrize("compile_mode", ["eager", "xla"])
@pytest.mark.parametrize("rows", [144, 1024])
def test_newton_schulz_matches_numpy_on_an_ill_conditioned_batch(rng, rows, compile_mode):
    """Singular values from 1 down to 1e-3 (condition 1,000): the accelerated start (two quintic
    steps) and the cubic iteration still reach every direction's polar factor."""
    if compile_mode == "xla" and B == "torch":
        pytest.skip("Keras does not compile PyTorch with XLA")
    u, _ = np.linalg.qr(rng.standard_normal((rows, 128)))
    v, _ = np.linalg.qr(rng.standard_normal((128, 128)))
    x = ((u * np.geomspace(1.0, 1e-3, 128)) @ v.T).astype(np.float32)
    fn = lambda e: svmax_ops.nuclear_norm(e, method="newton_schulz")  # noqa: E731
    if compile_mode == "xla":
        value, grad = _compiled_value_and_grad(fn, x)
    else:
        value, (grad,) = backends.value_and_grad(fn, x)
    expected_value, expected = ref.nuclear_norm_and_gradient(x)
    np.testing.assert_allclose(value, expected_value, rtol=TOL["float32"])
    # float32 products at condition 1,000 leave ~eps * 1,000 in U V^T (measured on TensorFlow:
    # <= 3.1e-5 relative to its largest entry, 5.7e-5 before the quintic start); a direction
    # the iteration had not reached would be off by its whole u_i v_i^T (~1e-1 here).
    _assert_rel(grad, expected, 1e-4)


@pytest.mark.skipif(B == "torch", reason="Keras does not compile PyTorch with XLA")
def test_xla_auto_path_is_fast_path_and_correct(rng):
    x = ref.unit_rows(rng, 48, 16)
    expected = ref.singular_values(x).mean()

    def step(x):
        value, grad = _compiled_value_and_grad(svmax_ops.mean_singular_value, x)
        return value, grad

    value, grad = step(x)
    np.testing.assert_allclose(value, expected, rtol=TOL["float32"])
    _, polar = ref.nuclear_norm_and_gradient(x)
    _assert_rel(grad, polar / 16, TOL["float32"])
    names = _compiled_op_names(svmax_ops.mean_singular_value, x)
    if B == "tensorflow":
        assert "While" in names or "StatelessWhile" in names  # the Newton-Schulz loop
        assert "Svd" not in names and "SelfAdjointEigV2" not in names
        return
    if _jax_on_cpu():  # JAX's eigh is a LAPACK call there: the faster Gram path
        assert "eigh" in names
        assert "while" not in names and "svd" not in names
    else:
        assert "while" in names  # the Newton-Schulz loop
        assert not {"eigh", "svd"} & names


def test_in_xla_context_means_compiled_by_xla_on_this_backend(rng):
    seen = []

    def fn(x):
        seen.append(_backend.in_xla_context())
        return ops.sum(x)

    x = rng.standard_normal(3).astype(np.float32)
    fn(ops.convert_to_tensor(x))
    backends.value_and_grad(fn, x)
    backends.compiled(fn)(x)
    assert seen == [False, False, B in ("tensorflow", "jax")]


@pytest.mark.skipif(B == "torch", reason="Keras does not compile PyTorch with XLA")
def test_xla_warns_for_slow_paths(rng):
    checks._WARNED.clear()
    x = ref.unit_rows(rng, 12, 4)
    if _jax_on_cpu():  # JAX's compiled eigh is LAPACK's there: not slow, no warning
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            backends.compiled(lambda x: svmax_ops.singular_values(x))(x)
    else:
        with pytest.warns(RuntimeWarning, match="XLA"):
            backends.compiled(lambda x: svmax_ops.singular_values(x))(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        backends.compiled(lambda x: svmax_ops.svmax(x))(x)


def _jax_on_cpu():
    if B != "jax":
        return False
    import jax

    return jax.default_backend() == "cpu"


@pytest.mark.parametrize(
    "dtype, scales",
    [
        (np.float32, (1e-30, 1e-20, 1e-19, 1e19, 1e20, 1e30)),
        (np.float64, (1e-300, 1e-150, 1e150, 1e300)),
    ],
)
@pytest.mark.parametrize(
    "method, compile_mode",
    [(m, c) for m in METHODS for c in ("eager", "graph")]
    + [("newton_schulz", "xla")],  # XLA's own path (the others warn that they are slow there)
)
def test_scale_equivariant_value_and_scale_invariant_gradient(
    rng, dtype, scales, method, compile_mode
):
    """s_mu(c E) = c s_mu(E) and its gradient does not depend on c (numpy float64 reference),
    at magnitudes where squares overflow or underflow."""
    if dtype == np.float64:
        _float64_or_skip()
    x = ref.unit_rows(rng, 12, 5).astype(np.float64)
    s = np.linalg.svd(x, compute_uv=False)
    u, _, vt = np.linalg.svd(x, full_matrices=False)
    expected_grad = (u @ vt) / 5  # d mean / dE = U V^T / k
    fn = lambda e: svmax_ops.mean_singular_value(e, method=method)  # noqa: E731
    for c in scales:
        e = (x * c).astype(dtype)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the slow-path XLA warnings
            if compile_mode == "eager":
                value, (grad,) = backends.value_and_grad(fn, e)
            elif compile_mode == "xla":
                value, grad = _compiled_value_and_grad(fn, e)
            else:
                value = backends.to_numpy(backends.graph(fn)(e))
                _, (grad,) = backends.value_and_grad(fn, e)
        tol = 1e-4 if dtype == np.float32 else 1e-9
        np.testing.assert_allclose(float(value) / c, s.mean(), rtol=tol, err_msg=f"scale {c}")
        np.testing.assert_allclose(grad, expected_grad, atol=tol, err_msg=f"scale {c}")


@pytest.mark.parametrize(
    "dtype, largest",
    [
        (np.float32, (1e-25, 3e-10, 1e-5, 1.0, 1e5, 3e9, 1e20, 3e38)),
        (np.float64, (1e-300, 1e-25, 1.0, 1e20, 1e300)),
    ],
)
@pytest.mark.parametrize("mode", MODES)
def test_finite_scaled_divides_by_the_power_of_two_of_the_largest_entry(rng, dtype, largest, mode):
    """The spectral guard (`_guards.finite_scaled`, a primitive of each backend) against NumPy:
    the scale is 2^floor(log2 max|x|) (`np.frexp`'s exponent - 1) outside [2^-30, 2^31), 1
    inside, and the matrix divided by it exactly; a non-finite entry zeroes every entry. At the
    dtype's top two octaves (3e38) the exponent stops at maxexp - 3, whose reciprocal is still
    a normal number (XLA divides by multiplying with it)."""
    if dtype == np.float64:
        _float64_or_skip()
    from tf_svmax.ops import _guards

    fn = _wrap(lambda e: _guards.finite_scaled(ops.convert_to_tensor(e)), mode)
    for top in largest:
        x = rng.uniform(-1.0, 1.0, (5, 3)) * top
        x[2, 1] = -top  # the largest |entry|, exactly
        x = x.astype(dtype)
        all_finite, x_scaled, scale = (backends.to_numpy(t) for t in fn(x))
        exponent = min(np.frexp(np.abs(x).max())[1] - 1, np.finfo(dtype).maxexp - 3)
        expected = np.ldexp(dtype(1), exponent) if abs(exponent) > 30 else dtype(1)
        assert bool(all_finite) and scale.dtype == dtype, top
        assert scale == expected, (top, scale, expected)
        np.testing.assert_array_equal(x_scaled, x / expected, err_msg=f"largest {top}")
    x[1, 0] = np.nan
    all_finite, x_scaled, scale = (backends.to_numpy(t) for t in fn(x))
    assert not bool(all_finite) and scale == 1
    np.testing.assert_array_equal(x_scaled, np.zeros_like(x))
    all_finite, x_scaled, scale = (backends.to_numpy(t) for t in fn(np.zeros((2, 3), dtype)))
    assert bool(all_finite) and scale == 1 and not x_scaled.any()


@pytest.mark.parametrize("mode", MODES)
def test_a_batch_with_no_rows_gives_zero_with_a_zero_gradient(mode):
    """Nothing to measure or penalize is 0 (not NaN, not an error), so a replica's empty share
    of an uneven batch cannot poison training."""
    fns = {
        "nuclear_norm": svmax_ops.nuclear_norm,
        "mean_singular_value": svmax_ops.mean_singular_value,
        "svmax": svmax_ops.svmax,
        "svmax_unbounded": lambda x: svmax_ops.svmax(x, bounded=False),
    }
    x = np.zeros([0, 4], np.float32)
    for name, fn in fns.items():
        assert float(backends.to_numpy(_wrap(fn, mode)(x))) == 0.0, name
        value, (grad,) = backends.value_and_grad(fn, x)
        assert float(value) == 0.0, name
        assert grad.shape == (0, 4), name


@TF_ONLY
def test_a_batch_with_no_rows_and_a_dynamic_row_count_inside_tf_function():
    import tensorflow as tf

    for fn in (svmax_ops.nuclear_norm, svmax_ops.mean_singular_value, svmax_ops.svmax):
        fn = tf.function(fn, input_signature=[tf.TensorSpec([None, 4], tf.float32)])
        x = tf.zeros([0, 4])
        with tf.GradientTape() as tape:
            tape.watch(x)
            value = fn(x)
        assert float(value) == 0.0
        assert tape.gradient(value, x).shape == (0, 4)


def _tall_batch(rng, kind):
    """The 1,024 x 128 (or 16 x 128) batches of the Gram-space Newton-Schulz start, float64."""
    if kind == "gaussian":
        return rng.standard_normal((1024, 128))
    if kind == "unit_rows":
        return ref.unit_rows(rng, 1024, 128, np.float64)
    if kind == "ill_conditioned":  # singular values from 1 down to 1e-4 of s_1
        u, _ = np.linalg.qr(rng.standard_normal((1024, 128)))
        v, _ = np.linalg.qr(rng.standard_normal((128, 128)))
        return (u * np.geomspace(1.0, 1e-4, 128)) @ v.T
    if kind in ("rank_20", "rank_1"):  # unit rows through a linear bottleneck
        rank = 20 if kind == "rank_20" else 1
        x = rng.standard_normal((1024, rank)) @ rng.standard_normal((rank, 128))
        return x / np.linalg.norm(x, axis=1, keepdims=True)
    if kind == "repeated":  # eight stacked 128 x 128 identities: s_i = sqrt(8) for all i
        return np.vstack([np.eye(128)] * 8)
    assert kind == "wide"  # transposed to 128 x 16: the Gram-space start with N = 16
    return ref.unit_rows(rng, 16, 128, np.float64)


# Largest |error| of U V^T relative to its largest entry allowed per kind (float32). Measured on
# TensorFlow (eager and XLA), JAX (eager and jit) and PyTorch with the Gram-space start: at most
# 1.1e-4 (ill-conditioned), 1.5e-5 (rank 20), 6.9e-5 (rank 1: its entries are small; 6e-7
# absolute), 8e-7 elsewhere; the tall start gave 1.8e-4, 1.8e-5, 3.5e-6 and 1.9e-6. Condition
# 10,000 leaves ~eps * 10,000 in U V^T wherever float32 products are used.
_GRAM_START_GRAD_TOL = {"ill_conditioned": 5e-4, "rank_20": 1e-4, "rank_1": 3e-4}


@pytest.mark.parametrize("compile_mode", ["eager", "xla"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(
    "kind",
    ["gaussian", "unit_rows", "ill_conditioned", "rank_20", "rank_1", "repeated", "wide"],
)
def test_newton_schulz_started_in_gram_space_matches_numpy(rng, kind, dtype, compile_mode):
    """Batches at least twice as tall as wide start Newton-Schulz on the N x N Gram matrix
    (`_newton_schulz_start_in_gram_space`): the nuclear norm and its gradient U V^T of the
    numerical rank against a float64 NumPy SVD, eagerly and under XLA (TensorFlow's
    jit_compile, jax.jit)."""
    if compile_mode == "xla" and B == "torch":
        pytest.skip("Keras does not compile PyTorch with XLA")
    if dtype == "float64":
        _float64_or_skip()
    x = _tall_batch(rng, kind).astype(dtype)
    if kind == "rank_1" and dtype == "float32":
        # The case the start must survive: the float32 Gram matrix (here NumPy's product) has
        # computed eigenvalues below zero, on which the Gram-space maps would diverge if
        # iterated without bound (see `_newton_schulz_start_in_gram_space`).
        assert np.linalg.eigvalsh((x.T @ x).astype(np.float64))[0] < 0
    fn = lambda e: svmax_ops.nuclear_norm(e, method="newton_schulz")  # noqa: E731
    if compile_mode == "xla":
        value, grad = _compiled_value_and_grad(fn, x)
    else:
        value, (grad,) = backends.value_and_grad(fn, x)
    expected_value = ref.singular_values(x).sum()
    # The ill-conditioned batch's small singular values are genuine (above the input's noise):
    # its reference is the whole U V^T; the rank-deficient ones drop the noise directions.
    if kind == "ill_conditioned":
        _, expected = ref.nuclear_norm_and_gradient(x)
    else:
        expected = _rank_cut_polar(x)
    np.testing.assert_allclose(value, expected_value, rtol=TOL[dtype])
    if dtype == "float64":
        np.testing.assert_allclose(grad, expected, atol=1e-9)
    else:
        _assert_rel(grad, expected, _GRAM_START_GRAD_TOL.get(kind, TOL["float32"]))
    assert np.linalg.norm(np.asarray(grad, np.float64), 2) <= 1 + 1e-4  # a subgradient


def test_the_gram_space_start_is_taken_from_twice_as_tall_as_wide(rng, monkeypatch):
    """`_NS_GRAM_MIN_ASPECT`: M >= 2 N of the matrix made tall (a wide batch is transposed)."""
    calls = []
    start = spectral._newton_schulz_start_in_gram_space

    def spy(x_tall, *args):
        calls.append(tuple(x_tall.shape))
        return start(x_tall, *args)

    monkeypatch.setattr(spectral, "_newton_schulz_start_in_gram_space", spy)
    for shape, taken in [((32, 16), True), ((31, 16), False), ((8, 16), True), ((9, 16), False)]:
        calls.clear()
        x = rng.standard_normal(shape).astype(np.float32)
        value = backends.to_numpy(svmax_ops.nuclear_norm(x, method="newton_schulz"))
        np.testing.assert_allclose(value, ref.singular_values(x).sum(), rtol=TOL["float32"])
        assert calls == ([tuple(sorted(shape, reverse=True))] if taken else []), shape


@TF_ONLY
@pytest.mark.parametrize("jit_compile", [False, True])
def test_newton_schulz_with_unknown_shapes_chooses_its_start_at_run_time(rng, jit_compile):
    """Keras' `fit` traces the batch dimension as unknown: the Gram-space start is then a
    conditional on the run-time shape, and under XLA (where `is_tall` leaves a wide batch
    untransposed) so is `polar_newton_schulz`'s transposition of a wide batch."""
    import tensorflow as tf

    @tf.function(jit_compile=jit_compile, input_signature=[tf.TensorSpec([None, None], tf.float32)])
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            value = svmax_ops.nuclear_norm(x, method="newton_schulz")
        return value, tape.gradient(value, x)

    for shape in [(1024, 128), (144, 128), (16, 128), (100, 128), (40, 8)]:
        x = ref.unit_rows(rng, *shape)
        value, grad = step(tf.constant(x))
        expected_value, expected = ref.nuclear_norm_and_gradient(x)
        np.testing.assert_allclose(value.numpy(), expected_value, rtol=TOL["float32"])
        _assert_rel(grad.numpy(), expected, TOL["float32"], err_msg=str(shape))
