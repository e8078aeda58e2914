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


# Each spelling's one meaning (tf_svmax.ops.distances.METRICS), from SciPy/NumPy on float64 rows:
# TFA's names with TFA's definitions (exactly zero where a row meets itself), the cdist
# names with the originals' (1e-12 under the square root; cosine of the rows as given).
def _scipy_table(x):
    from scipy.spatial import distance as sd  # noqa: PLC0415 (test-only dependency)

    sq = sd.cdist(x, x, "sqeuclidean")
    itself = np.eye(len(x), dtype=bool)
    return {
        "L2": np.where(itself, 0.0, sd.cdist(x, x, "euclidean")),
        "squared-L2": np.where(itself, 0.0, sq),
        "angular": np.maximum(sd.cdist(x, x, "cosine"), 0.0),
        "euclidean": np.sqrt(sq + 1e-12),
        "sqeuclidean": sq,
        "cityblock": sd.cdist(x, x, "cityblock"),
        "cosine": 1.0 - x @ x.T,
    }


@pytest.mark.parametrize("metric", distances.METRICS)
def test_every_metric_spelling_has_its_one_meaning(rng, metric):
    x = rng.standard_normal((9, 5))
    expected = _scipy_table(x)[metric]
    # "euclidean" at zero distance: the Gram expansion's ~1e-15 beside the 1e-12 moves the 1e-6
    # by ~1e-9 (cdist's exactness note; test_cdist_values_and_gradients_... allows 1e-8 too).
    atol = 1e-8 if metric == "euclidean" else 1e-12
    got = distances.distance_matrix(tf.constant(x), metric).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=atol)
    rows = distances.distance_matrix(tf.constant(x), metric, rows=(2, 5)).numpy()
    np.testing.assert_allclose(rows, expected[2:7], rtol=1e-9, atol=atol)
    assert distances.check_metric(metric) == metric


def test_the_two_families_differ_where_their_definitions_do(rng):
    x = rng.standard_normal((6, 3))  # rows not normalized
    table = {m: distances.distance_matrix(tf.constant(x), m).numpy() for m in distances.METRICS}
    # "L2" is exactly 0 on the diagonal, "euclidean" 1e-6 (sqrt of the 1e-12).
    assert np.all(np.diag(table["L2"]) == 0.0)
    np.testing.assert_allclose(np.diag(table["euclidean"]), 1e-6, rtol=1e-6)
    # "angular" normalizes the rows, "cosine" does not.
    assert not np.allclose(table["angular"], table["cosine"])
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    np.testing.assert_allclose(
        distances.distance_matrix(tf.constant(unit), "cosine").numpy(),
        table["angular"],
        atol=1e-12,
    )


def test_check_metric_refuses_other_names_and_callables_unless_allowed():
    for bad in ("L1", "cos", "Euclidean", None, 2):
        with pytest.raises(ValueError, match=r"argument `distance_metric`"):
            distances.check_metric(bad)
    with pytest.raises(ValueError, match=r"argument `metric`.*or a callable"):
        distances.check_metric("dot", "metric", allow_callable=True)
    with pytest.raises(ValueError, match=r"argument `metric`"):
        distances.check_metric(np.abs, "metric")
    assert distances.check_metric(np.abs, allow_callable=True) is np.abs


@pytest.mark.parametrize("metric", distances.METRICS)
def test_the_losses_read_both_spellings_from_the_one_table(rng, metric):
    from tf_svmax import losses  # noqa: PLC0415

    x = rng.standard_normal((8, 4))
    y = np.repeat(np.arange(4), 2)
    table = _scipy_table(x)[metric]
    given = lambda e: tf.constant(table)  # noqa: E731 (the table as TFA's custom distance)
    for fn in (losses.triplet_semihard_loss, losses.triplet_hard_loss):
        np.testing.assert_allclose(
            fn(y, x, distance_metric=metric).numpy(),
            fn(y, x, distance_metric=given).numpy(),
            rtol=1e-9,
        )
    # batch_hard_triplet_loss with the same distances: farthest positive - closest negative.
    same = y[:, None] == y[None, :]
    positive = np.where(same & ~np.eye(8, dtype=bool), table, 0.0).max(axis=1)
    negative = np.where(same, np.inf, table).min(axis=1)
    np.testing.assert_allclose(
        losses.batch_hard_triplet_loss(y, x, margin="none", metric=metric).numpy(),
        positive - negative,
        rtol=1e-9,
        atol=1e-12,
    )
