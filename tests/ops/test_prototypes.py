"""XML's histograms and closed-form prototypes on every Keras backend, against NumPy / SciPy
float64 references (values, and gradients from the closed form or central differences).

float64 parametrizations run on TensorFlow and PyTorch; JAX without `jax_enable_x64` (its
default) computes float64 input in float32, so there the float32 cases stand for both.
"""

import keras
import numpy as np
import pytest
import scipy.linalg
from keras import ops

from tests import backends
from tf_svmax.ops import cross_batch_embeddings, prototype_histograms
from tf_svmax.ops.prototypes import fit_prototypes

pytestmark = pytest.mark.all_backends


def _softmax(a, axis):
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _histograms(x, v, epsilon):
    """Eq. 2.4 per image: the mean over locations of the softmax over prototypes."""
    return np.stack([_softmax(epsilon * xi @ v.T, axis=1).mean(axis=0) for xi in x])


def _histogram_gradients(x, v, weights, epsilon):
    """d/dx and d/dv of sum_bm W_bm H_bm (float64), through the softmax Jacobian:
    dL/dS_bnm = P_bnm (W_bm - sum_k P_bnk W_bk) / n for the scores S = eps x v^T."""
    p = _softmax(epsilon * np.einsum("bnd,md->bnm", x, v), axis=2)
    w = weights[:, None, :]
    d_scores = p * (w - (p * w).sum(axis=2, keepdims=True)) / x.shape[1]
    return (
        epsilon * np.einsum("bnm,md->bnd", d_scores, v),
        epsilon * np.einsum("bnm,bnd->md", d_scores, x),
    )


@pytest.mark.parametrize("dtype", [np.float32, backends.FLOAT64])
def test_histograms_are_eq_2_4_and_sum_to_one(rng, dtype):
    x = rng.standard_normal((4, 9, 6)).astype(dtype)
    v = (0.3 * rng.standard_normal((5, 6))).astype(dtype)  # scores of order 1-10 at eps = 10
    weights = rng.standard_normal((4, 5))
    x64, v64 = x.astype(np.float64), v.astype(np.float64)
    got = backends.to_numpy(prototype_histograms(x, v, epsilon=10.0))
    assert got.dtype == dtype
    rtol = backends.RTOL32 if dtype == np.float32 else 1e-12
    backends.assert_close(got, _histograms(x64, v64, 10.0), rtol)
    backends.assert_close(got.sum(axis=1), np.ones(4), rtol)
    assert (got >= 0).all()

    def total(x, v):
        w = ops.convert_to_tensor(weights.astype(dtype))
        return ops.sum(prototype_histograms(x, v, epsilon=10.0) * w)

    _, grads = backends.value_and_grad(total, x, v)
    for got_grad, want in zip(grads, _histogram_gradients(x64, v64, weights, 10.0), strict=True):
        backends.assert_close(got_grad, want, backends.RTOL32 if dtype == np.float32 else 1e-10)


def _ridge(z, y, ridge):
    """SciPy least squares of [Z; sqrt(ridge) I] V = [Y; 0]."""
    m = z.shape[1]
    a = np.concatenate([z, np.sqrt(ridge) * np.eye(m)])
    b = np.concatenate([y, np.zeros((m, y.shape[1]))])
    return scipy.linalg.lstsq(a, b)[0]


def _cross_reference(z, y, mask, ridge=0.05):
    return z @ _ridge(z[mask], y[mask], ridge)


def _central_difference(fn, x, h=1e-6):
    """d fn / dx of a scalar float64 NumPy function, entry by entry."""
    grad = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[index] = h
        grad[index] = (fn(x + step) - fn(x - step)) / (2 * h)
    return grad


@pytest.mark.parametrize("dtype", [np.float32, backends.FLOAT64])
@pytest.mark.parametrize("rows, m", [(40, 8), (12, 64)])  # m x m form, then b x b form
def test_cross_predictions_use_scipys_ridge_fit_on_the_fit_rows_only(rng, rows, m, dtype):
    z = _softmax(rng.standard_normal((rows, m)), axis=1).astype(dtype)
    y = rng.standard_normal((rows, 5)).astype(dtype)
    mask = np.arange(rows) < rows // 2
    z64, y64 = z.astype(np.float64), y.astype(np.float64)
    got = backends.to_numpy(cross_batch_embeddings(z, y, mask, ridge=0.05))
    assert got.dtype == dtype
    if dtype == np.float64:
        np.testing.assert_allclose(got, _cross_reference(z, y, mask), rtol=1e-8, atol=1e-10)
    else:
        backends.assert_close(got, _cross_reference(z64, y64, mask), backends.RTOL32)
    # The rows not fitted do not influence the fit.
    y2 = y.copy()
    y2[~mask] = rng.standard_normal(y2[~mask].shape)
    backends.assert_close(backends.to_numpy(cross_batch_embeddings(z, y2, mask)), got, 1e-6)


@pytest.mark.parametrize("dtype", [np.float32, backends.FLOAT64])
def test_cross_prediction_gradients_are_the_reference_fits(rng, dtype):
    rows, m = 10, 4
    z = _softmax(rng.standard_normal((rows, m)), axis=1)
    y = rng.standard_normal((rows, 3))
    mask = np.arange(rows) % 3 != 0
    weights = rng.standard_normal((rows, 3))

    def total(z, y):
        w = ops.convert_to_tensor(weights.astype(dtype))
        return ops.sum(cross_batch_embeddings(z, y, mask) * w)

    _, grads = backends.value_and_grad(total, z.astype(dtype), y.astype(dtype))
    expected = (
        _central_difference(lambda z: (weights * _cross_reference(z, y, mask)).sum(), z),
        _central_difference(lambda y: (weights * _cross_reference(z, y, mask)).sum(), y),
    )
    for got, want in zip(grads, expected, strict=True):
        backends.assert_close(got, want, backends.RTOL32 if dtype == np.float32 else 1e-7)


def test_the_closed_forms_under_the_backends_compiler_and_graph(rng):
    z = _softmax(rng.standard_normal((12, 16)), axis=1).astype(np.float32)
    y = rng.standard_normal((12, 3)).astype(np.float32)
    mask = np.arange(12) % 2 == 0
    want = _cross_reference(z.astype(np.float64), y.astype(np.float64), mask)
    for wrap in (backends.compiled, backends.graph):
        got = wrap(lambda z, y: cross_batch_embeddings(z, y, mask))(z, y)
        backends.assert_close(backends.to_numpy(got), want, backends.RTOL32)


@pytest.mark.skipif(
    backends.BACKEND != "tensorflow", reason="only TensorFlow traces with unknown row counts"
)
def test_both_closed_forms_agree(rng):
    import tensorflow as tf  # noqa: PLC0415

    z = tf.constant(_softmax(rng.standard_normal((10, 16)), axis=1))
    y = tf.constant(rng.standard_normal((10, 3)))
    w = tf.constant((np.arange(10) % 2).astype(np.float64))
    small = fit_prototypes(z, y, w)  # b = 10 < m = 16: the b x b form
    z_dynamic = tf.function(lambda z, y, w: fit_prototypes(z, y, w)).get_concrete_function(
        tf.TensorSpec([None, 16], tf.float64),
        tf.TensorSpec([None, 3], tf.float64),
        tf.TensorSpec([None], tf.float64),
    )
    large = z_dynamic(z, y, w)  # unknown b: the m x m form
    np.testing.assert_allclose(small, large, rtol=1e-8, atol=1e-12)


def test_fit_prototypes_is_the_weighted_ridge_fit(rng):
    z = _softmax(rng.standard_normal((10, 16)), axis=1).astype(np.float32)
    y = rng.standard_normal((10, 3)).astype(np.float32)
    w = (np.arange(10) % 2).astype(np.float32)
    got = backends.to_numpy(fit_prototypes(z, y, w))  # b = 10 < m = 16: the b x b form
    keep = w > 0
    backends.assert_close(
        got, _ridge(z[keep].astype(float), y[keep].astype(float), 0.05), backends.RTOL32
    )


def test_bad_arguments_are_named(rng):
    with pytest.raises(ValueError, match=r"argument `ridge`"):
        cross_batch_embeddings(np.ones((2, 3)), np.ones((2, 2)), [True, False], ridge=0.0)
    with pytest.raises(ValueError, match=r"argument `fit_mask`"):
        cross_batch_embeddings(np.ones((2, 3)), np.ones((2, 2)), [1, 0])
    with pytest.raises(ValueError, match=r"argument `features`"):
        prototype_histograms(np.ones((2, 3)), np.ones((4, 3)))


@pytest.mark.parametrize(
    "histograms, embeddings, mask, name",
    [
        (np.ones((4, 3)), np.ones((3, 2)), [True, False, True, False], "embeddings"),
        (np.ones((4, 3)), np.ones((4, 2)), [True, False, True], "fit_mask"),
        (np.ones((4, 3)), np.ones((4, 2)), [[True, False], [True, False]], "fit_mask"),
        (np.ones((4, 3, 1)), np.ones((4, 2)), [True, False, True, False], "histograms"),
        (np.ones((4, 3)), np.ones((4,)), [True, False, True, False], "embeddings"),
    ],
)
def test_cross_batch_inputs_of_other_lengths_or_ranks_are_named(histograms, embeddings, mask, name):
    with pytest.raises(ValueError, match=f"argument `{name}`.*Received"):
        cross_batch_embeddings(histograms, embeddings, mask)


def test_cross_batch_row_mismatch_under_the_compiler_is_named_when_traced(rng):
    """JAX traces with concrete shapes and PyTorch runs eagerly: a ValueError at trace time;
    TensorFlow's XLA function is traced with the inputs' shapes too."""
    z, y = rng.random((4, 3)).astype(np.float32), rng.standard_normal((4, 2)).astype(np.float32)
    mask = np.array([1, 0, 1, 0], bool)
    fn = backends.compiled(lambda z, y, mask: cross_batch_embeddings(z, y, mask))
    with pytest.raises(ValueError, match="argument `embeddings`"):
        fn(z, y[:3], mask)
    with pytest.raises(ValueError, match="argument `fit_mask`"):
        fn(z, y, mask[:3])


@pytest.mark.skipif(
    backends.BACKEND != "tensorflow", reason="only TensorFlow traces with unknown row counts"
)
def test_cross_batch_row_mismatch_in_a_traced_function_is_named(rng):
    import tensorflow as tf  # noqa: PLC0415

    fn = tf.function(lambda z, y, w: cross_batch_embeddings(z, y, w)).get_concrete_function(
        tf.TensorSpec([None, 3], tf.float64),
        tf.TensorSpec([None, 2], tf.float64),
        tf.TensorSpec([None], tf.bool),
    )
    z, y, mask = rng.random((4, 3)), rng.standard_normal((4, 2)), np.array([1, 0, 1, 0], bool)
    np.testing.assert_allclose(fn(z, y, mask), cross_batch_embeddings(z, y, mask), rtol=1e-12)
    with pytest.raises(tf.errors.InvalidArgumentError, match="argument `embeddings`"):
        fn(z, y[:3], mask)
    with pytest.raises(tf.errors.InvalidArgumentError, match="argument `fit_mask`"):
        fn(z, y, mask[:3])


def test_histograms_refuse_integer_inputs_and_empty_sizes():
    features, prototypes = np.ones((8, 3, 4), np.float32), np.ones((5, 4), np.float32)
    with pytest.raises(TypeError, match="argument `features`.*floating"):
        prototype_histograms(features.astype(np.int32), prototypes)
    with pytest.raises(TypeError, match="argument `prototypes`.*floating"):
        prototype_histograms(features, prototypes.astype(np.int32))
    # No location: the mean of nothing (NaN before). No prototype: an [8, 0] "histogram".
    with pytest.raises(ValueError, match="argument `features`.*Received"):
        prototype_histograms(features[:, :0], prototypes)
    with pytest.raises(ValueError, match="argument `prototypes`.*Received"):
        prototype_histograms(features, prototypes[:0])
    with pytest.raises(ValueError, match="argument `prototypes`.*Received"):
        prototype_histograms(features, prototypes[:, :3])  # another feature size d


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_histograms_are_computed_in_float32(rng, dtype):
    x = ops.cast(rng.standard_normal((3, 5, 4)).astype(np.float32), dtype)
    v = ops.cast(0.3 * rng.standard_normal((6, 4)).astype(np.float32), dtype)
    got = prototype_histograms(x, v)
    assert keras.backend.standardize_dtype(got.dtype) == "float32"
    exact = _histograms(
        *(backends.to_numpy(ops.cast(t, "float32")).astype(np.float64) for t in (x, v)), 10.0
    )
    backends.assert_close(backends.to_numpy(got), exact, backends.RTOL32)


def test_ridge_accepts_numpy_floats_and_refuses_non_positive_ones(rng):
    z, y, mask = rng.random((4, 3)), rng.standard_normal((4, 2)), [True, False, True, False]
    np.testing.assert_allclose(
        backends.to_numpy(cross_batch_embeddings(z, y, mask, ridge=np.float32(0.5))),
        backends.to_numpy(cross_batch_embeddings(z, y, mask, ridge=0.5)),
    )
    for ridge in (0.0, float("inf"), float("nan"), np.float64(-1.0)):
        with pytest.raises(ValueError, match="argument `ridge`"):
            cross_batch_embeddings(z, y, mask, ridge=ridge)
