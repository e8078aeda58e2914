"""tf_svmax.ops.ole_loss on the process' Keras backend (TensorFlow, JAX or PyTorch), against the
independent float64 NumPy/SciPy reference of the original (benchmarks/reference_ole.py).

float64 cases run on TensorFlow and PyTorch; on JAX they are skipped with the reason asserted
(`_float64_or_skip`): JAX has no float64 unless `jax_enable_x64` is set, a process-wide switch.
There the loss itself computes in float32 and warns; the float32 cases hold it to 1e-5. Under XLA
OLE takes a static class layout (`num_classes`, or one slot per row without it); the other
`tf.function` cases are TensorFlow's.
"""

import warnings

import keras
import numpy as np
import pytest
from keras import ops

from benchmarks.reference_ole import ole_reference
from tests import backends
from tf_svmax import ops as svmax_ops
from tf_svmax.ops.ole import nuclear_norms_and_subgradients

pytestmark = pytest.mark.all_backends

B = backends.BACKEND
TF_ONLY = pytest.mark.skipif(B != "tensorflow", reason="tf.function graphs are TensorFlow's")
DTYPES = ["float32", "float64"]
# float64 as before; float32 at the core's 1e-5 relative to the largest entry.
TOL = {"float32": 1e-5, "float64": 1e-10}


@pytest.fixture(autouse=True)
def _no_float32_warning_noise():
    # JAX without x64 warns once that OLE computes in float32 (test_jax_without_x64_says_...).
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "tf_svmax: ole_loss computes in float64")
        yield


def _float64_or_skip():
    """Skips a float64 case on JAX after checking why: without x64, float64 becomes float32."""
    if B == "jax":
        import jax

        assert not jax.config.jax_enable_x64
        assert backends.to_numpy(ops.convert_to_tensor(np.zeros(1))).dtype == np.float32
        pytest.skip("JAX without jax_enable_x64 computes float64 input in float32")


def _value_and_grad(labels, x, graph=False, **kwargs):
    if graph:
        import tensorflow as tf

        @tf.function
        def step(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                value = svmax_ops.ole_loss(labels, x, **kwargs)
            return value, tape.gradient(value, x)

        value, grad = step(tf.constant(x))
        return value.numpy(), grad.numpy()
    value, (grad,) = backends.value_and_grad(lambda x: svmax_ops.ole_loss(labels, x, **kwargs), x)
    return value, grad


def _assert_close(value, grad, ref_value, ref_grad, dtype, err_msg=""):
    """The value within `TOL` relative, the gradient within `TOL` of its largest entry."""
    tol = TOL[dtype]
    np.testing.assert_allclose(value, ref_value, rtol=tol, atol=1e-12, err_msg=err_msg)
    scale = max(np.abs(ref_grad).max(), 1e-300)
    np.testing.assert_allclose(grad, ref_grad, rtol=0, atol=tol * scale, err_msg=err_msg)


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


@pytest.mark.parametrize("graph", [False, pytest.param(True, marks=TF_ONLY)])
def test_value_and_gradient_match_float64_reference(rng, graph):
    _float64_or_skip()
    for name, labels, x in _cases(rng):
        value, grad = _value_and_grad(labels, x, graph=graph)
        ref_value, ref_grad = ole_reference(labels, x)
        np.testing.assert_allclose(value, ref_value, rtol=1e-10, atol=1e-12, err_msg=name)
        np.testing.assert_allclose(grad, ref_grad, atol=1e-10, err_msg=name)


@pytest.mark.parametrize("graph", [False, pytest.param(True, marks=TF_ONLY)])
def test_a_class_straddling_the_threshold_keeps_it_as_the_svd_does(rng, graph):
    # Class 0 has singular values (s_1, 0.7 s_1, 3e-6, 4e-7): the threshold keeps the third and
    # drops the fourth. Eigenvectors of its 4 x 4 Gram matrix cannot separate those two
    # (eps64 * s_1^2 is above their squares' gap), so the classes' Gram route must leave such a
    # class to the SVD; taking the Gram route regardless puts the gradient 1.6e-5 (s_1 = 2) and
    # 0.22 (s_1 = 200) of its largest entry away from the reference.
    _float64_or_skip()
    labels = np.repeat([0, 1, 2], 4)
    for s_1 in (2.0, 200.0):
        u, _ = np.linalg.qr(rng.standard_normal((4, 4)))
        v, _ = np.linalg.qr(rng.standard_normal((16, 4)))
        straddling = u @ np.diag([s_1, 0.7 * s_1, 3e-6, 4e-7]) @ v.T
        x = np.concatenate([straddling, rng.standard_normal((8, 16))])
        value, grad = _value_and_grad(labels, x, graph=graph)
        ref_value, ref_grad = ole_reference(labels, x)
        np.testing.assert_allclose(value, ref_value, rtol=1e-10, err_msg=f"s_1={s_1}")
        # The reference's own direction for 3e-6 is resolved to ~eps64 * s_1 / 3e-6.
        np.testing.assert_allclose(
            grad, ref_grad, atol=1e-6 * np.abs(ref_grad).max(), err_msg=f"s_1={s_1}"
        )


def test_float32_inputs_match_reference_at_float32_precision(rng):
    labels = np.repeat(np.arange(36), 4)
    x = rng.standard_normal((144, 128)).astype(np.float32)
    value, grad = _value_and_grad(labels, x)
    ref_value, ref_grad = ole_reference(labels, x.astype(np.float64))
    assert value.dtype == np.float32 and grad.dtype == np.float32
    # The value is a difference of nuclear norms ~7x its size: 2e-6 holds the batch term's
    # float32 shortcut on TensorFlow to its normalized eigenvectors (1.1e-7 to 1.5e-7 over three
    # seeds; 5e-6 to 6.3e-6 without the normalization) and JAX without x64 to float32 (<= 9.6e-7).
    np.testing.assert_allclose(value, ref_value, rtol=2e-6)
    np.testing.assert_allclose(grad, ref_grad, atol=1e-6)


def test_float32_inputs_in_every_case_match_reference(rng):
    # Well-conditioned batches take the float32-eigenvector shortcut for the batch term;
    # (nearly) rank-deficient ones must fall back to float64 and keep the threshold semantics.
    for name, labels, x in _cases(rng):
        if B == "jax" and name == "rank_deficient_batch":
            # Rounded to float32, this batch has singular values of ~1e-6 (the rounding of its
            # entries) next to the 1e-6 threshold: the float64 reference keeps or drops their
            # noise directions by chance, and JAX without x64, computing in float32, cannot
            # resolve them (it drops them below the float32 rank cutoff). Per seed, not a bound.
            continue
        x32 = x.astype(np.float32)
        value, grad = _value_and_grad(labels, x32)
        ref_value, ref_grad = ole_reference(labels, x32.astype(np.float64))
        np.testing.assert_allclose(value, ref_value, rtol=1e-5, atol=1e-6, err_msg=name)
        scale = np.abs(ref_grad).max()
        np.testing.assert_allclose(grad, ref_grad, atol=1e-5 * scale, err_msg=name)


def test_float32_rank_deficient_batch_keeps_the_threshold_exactly(rng):
    # Features in a 3-dim subspace: the batch has 7 zero singular values. A float32
    # decomposition would see them as ~1e-7 * s_1 and could keep noise directions, which is
    # what JAX without x64 gets (the loss warns): the float64 computation is the point here.
    _float64_or_skip()
    labels = np.repeat(np.arange(5), 4)
    x = (rng.standard_normal((20, 3)) @ rng.standard_normal((3, 10)) * 30).astype(np.float32)
    value, grad = _value_and_grad(labels, x)
    ref_value, ref_grad = ole_reference(labels, x.astype(np.float64))
    np.testing.assert_allclose(grad, ref_grad, atol=1e-7)
    np.testing.assert_allclose(value, ref_value, rtol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
def test_delta_and_threshold_are_applied(rng, dtype):
    if dtype == "float64":
        _float64_or_skip()
    labels = np.repeat(np.arange(3), 4)
    x = rng.standard_normal((12, 6)).astype(dtype)
    for delta, threshold in [(0.0, 0.0), (3.0, 1e-6), (100.0, 1e-6), (1.0, 0.5)]:
        value, grad = _value_and_grad(labels, x, delta=delta, threshold=threshold)
        ref_value, ref_grad = ole_reference(labels, x, delta=delta, threshold=threshold)
        _assert_close(value, grad, ref_value, ref_grad, dtype, err_msg=f"{delta}, {threshold}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_gradient_matches_finite_differences_where_differentiable(rng, dtype):
    if dtype == "float64":
        _float64_or_skip()
    labels = np.repeat(np.arange(3), 3)
    x = rng.standard_normal((9, 5)).astype(dtype)
    _, theoretical = _value_and_grad(labels, x)
    numerical = backends.numpy_gradient(lambda x: ole_reference(labels, x)[0], x)
    if dtype == "float64":
        np.testing.assert_allclose(theoretical, numerical, atol=1e-6)
    else:
        np.testing.assert_allclose(theoretical, numerical, atol=1e-5 * np.abs(numerical).max())


def test_a_scaled_loss_scales_the_gradient(rng):
    """Keras' PyTorch backend calls a custom gradient as ``grad(*args, upstream=...)``,
    TensorFlow and JAX positionally: the upstream factor must reach the gradient."""
    labels = np.repeat(np.arange(3), 4)
    x = rng.standard_normal((12, 6)).astype(np.float32)
    _, (grad,) = backends.value_and_grad(lambda x: -2.5 * svmax_ops.ole_loss(labels, x), x)
    _, ref_grad = ole_reference(labels, x)
    np.testing.assert_allclose(grad, -2.5 * ref_grad, atol=1e-5 * np.abs(2.5 * ref_grad).max())


@TF_ONLY
def test_dynamic_shapes_and_class_sets_inside_tf_function(rng):
    import tensorflow as tf

    fn = tf.function(
        lambda y, x: svmax_ops.ole_loss(y, x),
        input_signature=[tf.TensorSpec([None], tf.int64), tf.TensorSpec([None, 6], tf.float64)],
    )
    for labels in (np.repeat([5, 9, 1], 4), np.array([3, 3, 8, 0, 0, 0, 8])):
        x = rng.standard_normal((len(labels), 6))
        np.testing.assert_allclose(fn(labels, x).numpy(), ole_reference(labels, x)[0], rtol=1e-10)


@pytest.mark.parametrize("dtype", DTYPES)
def test_changing_class_sets_from_batch_to_batch(rng, dtype):
    if dtype == "float64":
        _float64_or_skip()
    for labels in (np.repeat([5, 9, 1], 4), np.array([3, 3, 8, 0, 0, 0, 8])):
        x = rng.standard_normal((len(labels), 6)).astype(dtype)
        value, grad = _value_and_grad(labels, x)
        _assert_close(value, grad, *ole_reference(labels, x), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_labels_of_shape_n_by_1_and_integral_floats(rng, dtype):
    if dtype == "float64":
        _float64_or_skip()
    labels = np.repeat(np.arange(3), 4)
    x = rng.standard_normal((12, 6)).astype(dtype)
    expected = ole_reference(labels, x)[0]
    for y in (labels[:, None], labels.astype(np.float32), ops.convert_to_tensor(labels)):
        value = backends.to_numpy(svmax_ops.ole_loss(y, x))
        np.testing.assert_allclose(value, expected, rtol=TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_collapsed_batch_has_finite_gradient(dtype):
    if dtype == "float64":
        _float64_or_skip()
    labels = np.repeat(np.arange(3), 4)
    x = np.tile(np.linspace(-1, 1, 8), (12, 1)).astype(dtype)
    value, grad = _value_and_grad(labels, x)
    assert np.isfinite(value) and np.all(np.isfinite(grad))
    _assert_close(value, grad, *ole_reference(labels, x), dtype)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dtype", DTYPES)
def test_non_finite_embeddings_give_nan(rng, dtype, bad):
    if dtype == "float64":
        _float64_or_skip()
    x = rng.standard_normal((8, 4)).astype(dtype)
    x[2, 1] = bad
    value, grad = _value_and_grad(np.repeat(np.arange(2), 4), x)
    assert np.isnan(value) and np.all(np.isnan(grad))


def test_bad_arguments_name_the_argument(rng):
    x = rng.standard_normal((8, 4)).astype(np.float32)
    with pytest.raises(ValueError, match=r"argument `labels`.*one label per row"):
        svmax_ops.ole_loss(np.arange(7), x)
    with pytest.raises(ValueError, match=r"argument `labels`.*shape \[N\]"):
        svmax_ops.ole_loss(np.zeros((8, 2), np.int32), x)
    with pytest.raises(TypeError, match=r"argument `labels`"):
        svmax_ops.ole_loss(np.array(["a"] * 8), x)
    # Checked in the graph on TensorFlow, at once on the eager backends.
    if B == "tensorflow":
        import tensorflow as tf

        error = tf.errors.InvalidArgumentError
    else:
        error = ValueError
    with pytest.raises(error, match=r"`labels`.*non-integral"):
        svmax_ops.ole_loss(np.linspace(0, 1, 8), x)
    with pytest.raises(ValueError, match=r"argument `embeddings`.*rank-2"):
        svmax_ops.ole_loss(np.arange(8), x[None])
    with pytest.raises(TypeError, match=r"argument `embeddings`.*floating"):
        svmax_ops.ole_loss(np.arange(8), np.zeros((8, 4), np.int32))
    with pytest.raises(ValueError, match=r"argument `delta`"):
        svmax_ops.ole_loss(np.arange(8), x, delta=-1.0)
    with pytest.raises(ValueError, match=r"argument `threshold`"):
        svmax_ops.ole_loss(np.arange(8), x, threshold=float("nan"))


@TF_ONLY
def test_a_dynamic_label_count_is_checked_inside_tf_function(rng):
    import tensorflow as tf

    x = rng.standard_normal((8, 4))
    fn = tf.function(
        lambda y, x: svmax_ops.ole_loss(y, x),
        input_signature=[tf.TensorSpec([None], tf.int32), tf.TensorSpec([None, 4], tf.float64)],
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match="one label per row"):
        fn(np.arange(7, dtype=np.int32), x)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_inputs_are_cast_back(rng, dtype):
    labels = np.repeat(np.arange(3), 4)
    half = ops.cast(ops.convert_to_tensor(rng.standard_normal((12, 6)).astype(np.float32)), dtype)
    x32 = backends.to_numpy(ops.cast(half, "float32"))
    value = svmax_ops.ole_loss(labels, half)
    assert keras.backend.standardize_dtype(value.dtype) == dtype
    ref_value, ref_grad = ole_reference(labels, x32.astype(np.float64))
    np.testing.assert_allclose(
        float(backends.to_numpy(ops.cast(value, "float32"))), ref_value, rtol=2e-2, atol=2e-2
    )
    # The gradient flows through the half-precision input (cast in and out inside the loss).
    _, (grad,) = backends.value_and_grad(
        lambda x: ops.cast(svmax_ops.ole_loss(labels, ops.cast(x, dtype)), "float32"), x32
    )
    np.testing.assert_allclose(grad, ref_grad, atol=2e-2 * np.abs(ref_grad).max())


@pytest.mark.skipif(B == "torch", reason="Keras does not compile PyTorch with XLA")
def test_xla_without_num_classes_matches_the_reference(rng):
    """Under XLA without `num_classes` (one class slot per row): any label values, in any
    order, give the reference's value and gradient."""
    cases = [(name, labels, x) for name, labels, x, _ in _static_cases(rng)]
    labels = np.array([7, -3, 7, 2**30, -3, 2**30, 9])
    cases.append(("large_labels", labels, rng.standard_normal((7, 4))))
    for name, labels, x in cases:
        x32 = x.astype(np.float32)
        fn = backends.compiled(lambda x, labels=labels: svmax_ops.ole_loss(labels, x))
        value, (grad,) = backends.value_and_grad(fn, x32)
        ref_value, ref_grad = ole_reference(labels, x32.astype(np.float64))
        _assert_close(value, grad, ref_value, ref_grad, "float32", err_msg=name)


@pytest.mark.skipif(B == "torch", reason="Keras does not compile PyTorch with XLA")
def test_xla_without_num_classes_gives_nan_for_non_integral_labels(rng):
    """Inside a compiled function non-integral float labels (refused eagerly) make the value
    and gradient NaN, as labels outside [0, num_classes) do."""
    x = rng.standard_normal((6, 4)).astype(np.float32)
    labels = np.array([0, 0, 1, 1, 2, 2.5], np.float32)
    value, grad = _compiled_value_and_grad(labels, x, num_classes=None)
    assert np.isnan(value) and np.isnan(grad).all()
    # Integral floats are class labels like any other.
    labels = np.array([0, 0, 1, 1, 2, 2], np.float32)
    value, grad = _compiled_value_and_grad(labels, x, num_classes=None)
    ref_value, ref_grad = ole_reference(labels, x.astype(np.float64))
    _assert_close(value, grad, ref_value, ref_grad, "float32")


def _static_cases(rng):
    """(name, labels, features, num_classes): class ids in [0, C), some classes absent."""
    x = rng.standard_normal((12, 6))
    x[:3] *= 0.01  # class 0's nuclear norm is below delta
    return [
        (
            "pk_9x4_of_12",
            np.repeat(np.arange(9), 4)[rng.permutation(36)],
            rng.standard_normal((36, 16)),
            12,
        ),
        ("below_delta_absent_4", np.repeat([0, 1, 2, 5], 3), x, 6),
        ("singletons", np.array([0, 1, 2, 3, 4, 4, 4]), rng.standard_normal((7, 5)), 5),
        ("wide_classes", np.repeat([3, 1, 0, 2], 2), rng.standard_normal((8, 3)), 4),
    ]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_static_num_classes_matches_the_reference_eager_and_compiled(rng, compiled):
    """With num_classes the layout is static: XLA (TensorFlow's jit_compile=True, jax.jit)
    compiles it; classes absent from the batch add nothing."""
    for name, labels, x, classes in _static_cases(rng):
        x32 = x.astype(np.float32)

        def loss(x, labels=labels, classes=classes):
            return svmax_ops.ole_loss(labels, x, num_classes=classes)

        fn = backends.compiled(loss) if compiled else loss
        value, (grad,) = backends.value_and_grad(fn, x32)
        ref_value, ref_grad = ole_reference(labels, x32.astype(np.float64))
        _assert_close(value, grad, ref_value, ref_grad, "float32", err_msg=name)
        # The same as the dynamic layout, eagerly.
        dynamic, (dynamic_grad,) = backends.value_and_grad(
            lambda x, labels=labels: svmax_ops.ole_loss(labels, x), x32
        )
        _assert_close(value, grad, dynamic, dynamic_grad, "float32", err_msg=name)


def test_static_num_classes_in_float64(rng):
    _float64_or_skip()
    for name, labels, x, classes in _static_cases(rng):
        value, grad = _value_and_grad(labels, x, num_classes=classes)
        ref_value, ref_grad = ole_reference(labels, x)
        _assert_close(value, grad, ref_value, ref_grad, "float64", err_msg=name)


def test_static_num_classes_refuses_labels_outside_its_range(rng):
    x = rng.standard_normal((6, 4)).astype(np.float32)
    for labels in ([0, 0, 1, 1, 3, 3], [0, 0, 1, 1, -1, -1]):
        with pytest.raises(ValueError, match=r"argument `labels`.*\[0, num_classes=3\)"):
            svmax_ops.ole_loss(np.array(labels), x, num_classes=3)
    with pytest.raises(ValueError, match="argument `labels`.*non-integral"):
        svmax_ops.ole_loss(np.array([0, 0, 1, 1, 2, 2.5]), x, num_classes=3)
    with pytest.raises(ValueError, match="argument `num_classes`"):
        svmax_ops.ole_loss(np.array([0, 0, 1, 1, 2, 2]), x, num_classes=0)
    with pytest.raises(ValueError, match="argument `labels`.*one label per row"):
        svmax_ops.ole_loss(np.array([0, 1, 2]), x, num_classes=3)


@pytest.mark.skipif(B == "torch", reason="Keras does not compile PyTorch with XLA")
def test_static_num_classes_out_of_range_inside_xla_gives_nan(rng):
    """Inside a compiled function the labels' values are unknown when tracing: NaN value and
    gradient, as for non-finite embeddings."""
    x = rng.standard_normal((6, 4)).astype(np.float32)
    labels = np.array([0, 0, 1, 1, 5, 5], np.int32)
    value, grad = _compiled_value_and_grad(labels, x)
    assert np.isnan(value) and np.isnan(grad).all()


@pytest.mark.skipif(B != "tensorflow", reason="a TensorFlow graph without XLA")
def test_static_num_classes_out_of_range_in_a_tensorflow_graph_is_refused_by_name(rng):
    """A `tf.function` without XLA checks the labels when it runs, with the eager message (it
    failed inside TensorFlow's scatter naming no argument, issue 59 item 10)."""
    import tensorflow as tf

    x = rng.standard_normal((6, 4)).astype(np.float32)
    labels = np.array([0, 0, 1, 1, 7, 7], np.int32)
    loss = tf.function(lambda y, e: svmax_ops.ole_loss(y, e, num_classes=4))
    with pytest.raises(
        tf.errors.InvalidArgumentError, match=r"argument `labels`.*\[0, num_classes=4\)"
    ):
        loss(tf.constant(labels), tf.constant(x))


def _compiled_value_and_grad(labels, x, num_classes=3):
    """Value and gradient of `ole_loss(labels, x, num_classes=num_classes)` with the labels an
    input of the compiled function (not a constant folded in at trace time)."""
    if B == "tensorflow":
        import tensorflow as tf

        @tf.function(jit_compile=True)
        def step(labels, x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                value = svmax_ops.ole_loss(labels, x, num_classes=num_classes)
            return value, tape.gradient(value, x)

        value, grad = step(tf.constant(labels), tf.constant(x))
        return value.numpy(), grad.numpy()
    import jax

    fn = jax.jit(jax.value_and_grad(lambda x, y: svmax_ops.ole_loss(y, x, num_classes=num_classes)))
    value, grad = fn(x, labels)
    return np.asarray(value), np.asarray(grad)


@pytest.mark.skipif(B != "jax", reason="only JAX lacks float64 by default")
def test_jax_without_x64_says_the_loss_is_computed_in_float32(rng):
    import jax

    from tf_svmax import checks

    assert not jax.config.jax_enable_x64
    checks._WARNED.discard("ole-float32")
    x = rng.standard_normal((8, 4))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = svmax_ops.ole_loss(np.repeat(np.arange(2), 4), x)
    assert any("jax_enable_x64" in str(w.message) for w in caught)
    assert keras.backend.standardize_dtype(value.dtype) == "float32"
    np.testing.assert_allclose(
        backends.to_numpy(value), ole_reference(np.repeat(np.arange(2), 4), x)[0], rtol=1e-5
    )


@pytest.mark.parametrize(
    "dtype, scale",
    [("float32", 2.0**100), ("float32", 1e30), ("float32", 1e-30), ("float64", 1e300)]
    + [("float64", 1e-300)],
)
def test_extreme_magnitudes_are_scale_equivariant(rng, dtype, scale):
    # ole(cX; c delta, c threshold) = c ole(X; delta, threshold), with the same (scale-free)
    # subgradient: checked against the float64 numpy reference at unit scale.
    if dtype == "float64":
        _float64_or_skip()
    labels = np.repeat(np.arange(3), 4)
    x = rng.standard_normal((12, 6))
    expected, expected_grad = ole_reference(labels, x, delta=1.0, threshold=1e-6)
    value, grad = _value_and_grad(
        labels, (x * scale).astype(dtype), delta=scale, threshold=1e-6 * scale
    )
    rtol = 1e-4 if dtype == "float32" else 1e-9
    np.testing.assert_allclose(value / scale, expected, rtol=rtol)
    np.testing.assert_allclose(grad, expected_grad, rtol=rtol, atol=rtol)


def test_a_batch_with_no_rows_gives_zero():
    """Eq. 2 of an empty batch is 0/0: 0, with a zero gradient of the input's shape."""
    x = np.zeros([0, 4], np.float32)
    value, grad = _value_and_grad(np.zeros([0], np.int32), x)
    assert float(value) == 0.0
    assert grad.shape == (0, 4)


@TF_ONLY
def test_a_batch_with_no_rows_and_a_dynamic_row_count_inside_tf_function():
    """It used to crash ("Dimension -2147483647") when the row count was dynamic."""
    import tensorflow as tf

    fn = tf.function(
        svmax_ops.ole_loss,
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
    # No backend has a float16/bfloat16 SVD kernel; the helper promotes and casts back.
    x = ops.cast(rng.standard_normal((2, 3, 5)), dtype)
    norms, subs = nuclear_norms_and_subgradients(x, 1e-6)
    assert keras.backend.standardize_dtype(norms.dtype) == dtype
    assert keras.backend.standardize_dtype(subs.dtype) == dtype
    a = backends.to_numpy(ops.cast(x, "float32")).astype(np.float64)  # the rounded half values
    u, s, vt = np.linalg.svd(a, full_matrices=False)
    np.testing.assert_allclose(backends.to_numpy(ops.cast(norms, "float32")), s.sum(-1), rtol=rtol)
    np.testing.assert_allclose(backends.to_numpy(ops.cast(subs, "float32")), u @ vt, atol=4 * rtol)
