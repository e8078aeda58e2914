"""`tf_svmax.ops.distances`: the originals' `cdist` in O(n m) memory, and distance rows.

The TFA-semantics matrices (`pairwise_distance`, `angular_distance`) are compared with
tensorflow-addons in tests/losses/test_tfa_parity.py.
"""

import numpy as np
import pytest
import tensorflow as tf

from tests import reference_ranking as rr
from tf_svmax.ops import distances


def _numpy_gradient(x, weights, metric):
    """d/dx of sum_ij W_ij dist(x_i, x_j) from explicit differences (float64)."""
    diff = x[:, None, :] - x[None, :, :]
    if metric == "cityblock":
        local = np.sign(diff)
    elif metric == "sqeuclidean":
        local = 2.0 * diff
    else:  # euclidean, with the originals' 1e-12 under the square root
        local = diff / np.sqrt((diff**2).sum(-1, keepdims=True) + 1e-12)
    return ((weights + weights.T)[:, :, None] * local).sum(axis=1)


@pytest.mark.parametrize("metric", ["euclidean", "sqeuclidean", "cityblock"])
@pytest.mark.parametrize("block_elements", [None, 7])
def test_cdist_values_and_gradients_match_explicit_differences(
    rng, metric, block_elements, monkeypatch
):
    if block_elements:  # city-block in blocks of a row or less
        monkeypatch.setattr(distances, "_BLOCK_ELEMENTS", block_elements)
    x = rng.standard_normal((23, 5))
    x[7] = x[3]  # a duplicated row: zero distance, sign 0
    weights = rng.standard_normal((23, 23))
    x_t = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x_t)
        d = distances.cdist(x_t, x_t, metric)
        total = tf.reduce_sum(d * weights)
    # The Gram expansion leaves ~1e-15 of the squared distance at zero distances: sqrt(1e-12 +
    # 1e-15) differs from the originals' 1e-6 by ~1e-9 there (cdist's exactness note).
    np.testing.assert_allclose(d.numpy(), rr.cdist(x, metric), rtol=1e-9, atol=1e-8)
    np.testing.assert_allclose(
        tape.gradient(total, x_t).numpy(), _numpy_gradient(x, weights, metric), rtol=1e-7, atol=1e-6
    )


def test_cdist_float32_is_as_exact_as_the_explicit_float32_sum(rng):
    """The float64 Gram expansion of float32 rows: within float32 rounding of the exact value,
    near-duplicate rows included."""
    x = rng.standard_normal((40, 128)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    x[5] = x[2] + np.float32(1e-4) * rng.standard_normal(128).astype(np.float32)
    exact = rr.cdist(x.astype(np.float64), "euclidean")
    got = distances.cdist(x, x, "euclidean").numpy()
    explicit = np.sqrt(((x[:, None] - x[None]) ** 2).sum(-1) + np.float32(1e-12))
    assert np.abs(got - exact).max() <= 2 * np.abs(explicit - exact).max() + 1e-7


@pytest.mark.parametrize("squared", [False, True])
def test_distance_rows_are_rows_of_the_matrix(rng, squared):
    x = rng.standard_normal((17, 4)).astype(np.float32)
    x[9] = x[4]
    full = distances.pairwise_distance(x, squared=squared).numpy()
    for start, count in ((0, 5), (5, 7), (12, 5), (17, 0)):
        rows = distances.pairwise_distance(x, squared=squared, rows=(start, count)).numpy()
        np.testing.assert_allclose(rows, full[start : start + count], rtol=1e-6, atol=1e-6)
        assert np.all(rows[np.arange(count), start + np.arange(count)] == 0.0)
    angular = distances.angular_distance(x).numpy()
    np.testing.assert_allclose(
        distances.angular_distance(x, rows=(3, 6)).numpy(), angular[3:9], rtol=1e-6, atol=1e-6
    )
