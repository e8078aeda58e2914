"""XML's histograms and closed-form prototypes against NumPy / SciPy references."""

import numpy as np
import pytest
import scipy.linalg
import tensorflow as tf

from tf_svmax.ops import cross_batch_embeddings, prototype_histograms


def _softmax(a, axis):
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def test_histograms_are_eq_2_4_and_sum_to_one(rng):
    x = rng.standard_normal((4, 9, 6))
    v = rng.standard_normal((5, 6))
    got = prototype_histograms(x, v, epsilon=10.0).numpy()
    want = np.stack([_softmax(10.0 * xi @ v.T, axis=1).mean(axis=0) for xi in x])
    np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=1e-12)
    assert (got >= 0).all()


def _ridge(z, y, ridge):
    """SciPy least squares of [Z; sqrt(ridge) I] V = [Y; 0]."""
    m = z.shape[1]
    a = np.concatenate([z, np.sqrt(ridge) * np.eye(m)])
    b = np.concatenate([y, np.zeros((m, y.shape[1]))])
    return scipy.linalg.lstsq(a, b)[0]


@pytest.mark.parametrize("rows, m", [(40, 8), (12, 64)])  # m x m form, then b x b form
def test_cross_predictions_use_scipys_ridge_fit_on_the_fit_rows_only(rng, rows, m):
    z = _softmax(rng.standard_normal((rows, m)), axis=1)
    y = rng.standard_normal((rows, 5))
    mask = np.arange(rows) < rows // 2
    got = cross_batch_embeddings(z, y, mask, ridge=0.05).numpy()
    v = _ridge(z[mask], y[mask], 0.05)
    np.testing.assert_allclose(got, z @ v, rtol=1e-8, atol=1e-10)
    # The rows not fitted do not influence the fit.
    y2 = y.copy()
    y2[~mask] = rng.standard_normal(y2[~mask].shape)
    np.testing.assert_allclose(cross_batch_embeddings(z, y2, mask).numpy(), got, rtol=1e-8)


def test_both_closed_forms_agree(rng):
    from tf_svmax.ops.prototypes import fit_prototypes

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


def test_cross_batch_row_mismatch_in_a_traced_function_is_named(rng):
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


def test_ridge_accepts_numpy_floats_and_refuses_non_positive_ones(rng):
    z, y, mask = rng.random((4, 3)), rng.standard_normal((4, 2)), [True, False, True, False]
    np.testing.assert_allclose(
        cross_batch_embeddings(z, y, mask, ridge=np.float32(0.5)),
        cross_batch_embeddings(z, y, mask, ridge=0.5),
    )
    for ridge in (0.0, float("inf"), float("nan"), np.float64(-1.0)):
        with pytest.raises(ValueError, match="argument `ridge`"):
            cross_batch_embeddings(z, y, mask, ridge=ridge)
