"""The SVMax papers' own ranking losses and regularizers against float64 NumPy references."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests import backends
from tests import reference_ranking as rr
from tests import reference_spectral as ref
from tf_svmax import losses


def _unit(rng, b, d, dtype=np.float64):
    return ref.unit_rows(rng, b, d, dtype)


def _grad_check(fn, x):
    x = tf.constant(x, tf.float64)
    theoretical, numerical = tf.test.compute_gradient(fn, [x])
    np.testing.assert_allclose(theoretical[0], numerical[0], atol=2e-6)


# Batch-hard triplet -------------------------------------------------------------------------


@pytest.mark.parametrize("metric", ["euclidean", "sqeuclidean", "cityblock", "cosine"])
@pytest.mark.parametrize("margin", [0.2, 1.0, "soft", "none"])
def test_batch_hard_matches_numpy(rng, metric, margin):
    labels = np.repeat(np.arange(6), 4)
    labels[-1] = 99  # a singleton anchor (no positive)
    x = _unit(rng, 24, 8)
    got = losses.batch_hard_triplet_loss(labels, x, margin=margin, distance=metric).numpy()
    np.testing.assert_allclose(
        got, rr.batch_hard(labels, x, margin, metric), rtol=1e-10, atol=1e-12
    )


@pytest.mark.parametrize("metric", ["euclidean", "sqeuclidean", "cityblock", "cosine"])
def test_batch_hard_gradient(rng, metric):
    labels = tf.constant(np.repeat(np.arange(3), 3))
    _grad_check(
        lambda x: tf.reduce_sum(
            losses.batch_hard_triplet_loss(labels, x, margin="soft", distance=metric)
        ),
        _unit(rng, 9, 5),
    )


def test_batch_hard_one_class_is_zero_not_inf(rng):
    x = _unit(rng, 6, 4)
    for margin in (0.2, "soft", "none"):
        np.testing.assert_array_equal(
            losses.batch_hard_triplet_loss(np.zeros(6), x, margin=margin).numpy(), 0.0
        )


# P x K pair losses ----------------------------------------------------------------------------


def test_pk_contrastive_pairs_follow_the_originals_layout(rng):
    labels = np.repeat([10, 20, 30, 40], 4)
    x = np.arange(16, dtype=np.float64)[:, None] * np.ones((1, 2))
    first, second, similar = losses.pk_contrastive_pairs(labels, x)
    np.testing.assert_array_equal(first.numpy()[:, 0], [0, 4, 2, 6, 8, 12, 10, 14])
    np.testing.assert_array_equal(second.numpy()[:, 0], [1, 3, 5, 7, 9, 11, 13, 15])
    np.testing.assert_array_equal(similar.numpy(), [1, 0, 0, 1] * 2)


@pytest.mark.parametrize("margin", [1.0, 0.5])
def test_pk_contrastive_matches_numpy(rng, margin):
    labels = np.repeat(np.arange(8), 4)
    x = _unit(rng, 32, 8)
    np.testing.assert_allclose(
        losses.pk_contrastive_loss(labels, x, margin=margin).numpy(),
        rr.pk_contrastive(labels, x, margin),
        rtol=1e-10,
    )
    labels_t = tf.constant(labels)
    _grad_check(lambda e: tf.reduce_sum(losses.pk_contrastive_loss(labels_t, e, margin=margin)), x)


@pytest.mark.parametrize("l2_reg", [0.002, 0.0])
def test_pk_npair_matches_numpy(rng, l2_reg):
    labels = np.repeat([3, 1, 4, 1, 5, 9], 2)  # a repeated class among the anchors
    x = rng.standard_normal((12, 6))
    np.testing.assert_allclose(
        losses.pk_npair_loss(labels, x, l2_reg=l2_reg).numpy(),
        rr.pk_npair(labels, x, l2_reg),
        rtol=1e-10,
    )
    labels_t = tf.constant(labels)
    _grad_check(lambda e: tf.reduce_sum(losses.pk_npair_loss(labels_t, e, l2_reg=l2_reg)), x)


@pytest.mark.parametrize("alpha", [45.0, 36.0])
def test_pk_angular_matches_numpy(rng, alpha):
    labels = np.repeat(np.arange(6), 2)
    x = _unit(rng, 12, 6)
    np.testing.assert_allclose(
        losses.pk_angular_loss(labels, x, alpha=alpha).numpy(),
        rr.pk_angular(labels, x, alpha, 0.002),
        rtol=1e-10,
    )
    labels_t = tf.constant(labels)
    _grad_check(lambda e: tf.reduce_sum(losses.pk_angular_loss(labels_t, e, alpha=alpha)), x)


def test_pk_layouts_are_validated(rng):
    x = _unit(rng, 12, 4)
    with pytest.raises(ValueError, match=r"argument `batch_k`"):
        losses.pk_contrastive_loss(np.repeat(np.arange(4), 3), x, batch_k=3)
    with pytest.raises(ValueError, match=r"argument `embeddings`.*multiple of 8"):
        losses.pk_contrastive_loss(np.repeat(np.arange(3), 4), x)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"`labels`.*consecutive"):
        losses.pk_npair_loss(np.arange(12), x)
    with pytest.raises(ValueError, match=r"argument `alpha`"):
        losses.PKAngularLoss(alpha=90)


def test_a_remainder_batch_in_fit_gets_the_layout_message(rng):
    """A batch of unknown size that is no multiple of 2K (a remainder batch) gets the layout
    message naming `labels`, not a raw reshape error; in `fit` as in a traced call."""
    loss = losses.PKContrastiveLoss()
    spec = [tf.TensorSpec([None], tf.float32), tf.TensorSpec([None, 4], tf.float32)]
    traced = tf.function(loss.call, input_signature=spec)
    x = _unit(rng, 4, 4).astype(np.float32)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"`labels`.*multiple of 8.*remainder"):
        traced(tf.zeros([4]), tf.constant(x))
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4)])
    model.compile(optimizer="sgd", loss=loss)
    rows = _unit(rng, 20, 4).astype(np.float32)
    data = tf.data.Dataset.from_tensor_slices((rows, np.repeat(np.arange(5), 4)))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"`labels`.*multiple of 8"):
        model.fit(data.batch(8), epochs=1, verbose=0)  # 8, 8, then a remainder of 4


# Spread-out -----------------------------------------------------------------------------------


def test_spread_out_matches_numpy_and_samples_only_other_classes(rng):
    labels = np.repeat(np.arange(5), 4)
    x = _unit(rng, 20, 8)
    negatives = losses.random_negatives(labels, rng.uniform(size=(20, 20))).numpy()
    assert np.all(labels[negatives] != labels)
    np.testing.assert_allclose(
        losses.spread_out_loss(labels, x, negatives).numpy(),
        rr.spread_out(x, negatives),
        rtol=1e-10,
    )
    _grad_check(lambda e: losses.spread_out_loss(labels, e, negatives), x)
    one_class = losses.random_negatives(np.zeros(4), rng.uniform(size=(4, 4))).numpy()
    np.testing.assert_array_equal(one_class, -1)
    assert float(losses.spread_out_loss(np.zeros(4), x[:4], one_class)) == 0.0


def test_spread_out_negatives_are_uniform(rng):
    labels = np.array([0, 1, 1, 2, 2, 2])
    counts = np.zeros(6)
    # One traced graph called 3,000 times (eager calls cost ~10x as much, for the same draws).
    first_row = tf.function(lambda uniform: losses.random_negatives(labels, uniform)[0])
    for _ in range(3000):
        counts[first_row(tf.constant(rng.uniform(size=(6, 6)))).numpy()] += 1
    np.testing.assert_allclose(counts[1:] / 3000, 0.2, atol=0.03)


def test_spread_out_loss_class_is_seeded_and_label_aware(rng):
    x = _unit(rng, 16, 8, np.float32)
    y = np.repeat(np.arange(4), 4)
    a = float(losses.SpreadOutLoss(seed=3)(y, x))
    b = float(losses.SpreadOutLoss(seed=3)(y, x))
    assert a == b and a > 0


# Center loss ----------------------------------------------------------------------------------


def test_center_loss_value_update_and_no_update_without_gradient(rng):
    labels = np.array([0, 2, 2, 1, 0, 2])
    x = rng.standard_normal((6, 4)).astype(np.float32)
    loss = losses.CenterLoss(num_classes=3, embedding_dim=4, lambda_=0.003, alpha=0.5, seed=0)
    before = loss.centers.numpy().copy()
    value, expected_centers = rr.center(x, labels, before, 0.5, 0.003)
    np.testing.assert_allclose(float(loss(labels, x)), value, rtol=1e-5)
    np.testing.assert_array_equal(loss.centers.numpy(), before)  # no gradient, no update
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        out = loss(labels, xt)
    grad = tape.gradient(out, xt).numpy()
    np.testing.assert_allclose(grad, 0.003 * (x - before[labels]), rtol=1e-5)
    np.testing.assert_allclose(loss.centers.numpy(), expected_centers, rtol=1e-5)


def test_center_loss_trains_saves_and_restores_its_centers(rng, tmp_path):
    x = rng.standard_normal((32, 6)).astype(np.float32)
    y = np.repeat(np.arange(4), 8)
    inputs = keras.Input((6,))
    features = keras.layers.UnitNormalization()(keras.layers.Dense(5)(inputs))
    model = keras.Model(inputs, features)
    loss = losses.CenterLoss(num_classes=4, embedding_dim=5, lambda_=1.0, seed=1)
    initial = loss.centers.numpy().copy()
    model.compile(keras.optimizers.SGD(0.01), loss=loss)
    model.fit(x, y, batch_size=8, epochs=2, verbose=0)
    trained = loss.centers.numpy().copy()
    assert not np.allclose(trained, initial)
    model.evaluate(x, y, batch_size=8, verbose=0)
    np.testing.assert_array_equal(loss.centers.numpy(), trained)  # evaluate never moves them
    model.save(tmp_path / "m.keras")
    restored = keras.models.load_model(tmp_path / "m.keras")
    np.testing.assert_allclose(restored.loss.centers.numpy(), trained)


def test_center_loss_bad_input():
    with pytest.raises(ValueError, match=r"argument `num_classes`"):
        losses.CenterLoss(num_classes=0, embedding_dim=4)
    with pytest.raises(ValueError, match=r"argument `centers`"):
        losses.CenterLoss(num_classes=2, embedding_dim=4, centers=np.zeros((3, 4)))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"`y_true`.*\[0, 2\)"):
        losses.CenterLoss(num_classes=2, embedding_dim=2)([0, 5], np.eye(2, dtype=np.float32))
    # Neither truncated (1.7 -> 1) nor wrapped by an int32 cast (2**32 + 1 -> 1).
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"`y_true`.*non-integral"):
        losses.CenterLoss(num_classes=2, embedding_dim=2)([0.0, 1.7], np.eye(2, dtype=np.float32))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"`y_true`.*\[0, 2\)"):
        losses.CenterLoss(num_classes=2, embedding_dim=2)(
            np.array([0, 2**32 + 1]), np.eye(2, dtype=np.float32)
        )


def test_proxy_anchor_refuses_labels_it_would_truncate_or_wrap():
    s = np.eye(2, dtype=np.float32)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"`labels`.*non-integral"):
        losses.proxy_anchor_loss(np.array([0.0, 1.7]), s)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"`labels`.*\[0, num_classes\)"):
        losses.proxy_anchor_loss(np.array([0, 2**32 + 1]), s)


# Proxy-Anchor ---------------------------------------------------------------------------------


def test_proxy_anchor_matches_numpy(rng):
    labels = np.array([0, 0, 1, 3, 3, 3])  # class 2 has no positive in the batch
    s = np.tanh(rng.standard_normal((6, 4)))
    np.testing.assert_allclose(
        losses.proxy_anchor_loss(labels, s).numpy(),
        rr.proxy_anchor(labels, s, 32.0, 0.1),
        rtol=1e-10,
    )
    _grad_check(lambda t: losses.proxy_anchor_loss(labels, t, alpha=4.0), s)


# Keras integration and composition with SVMax --------------------------------------------------

PAPER_SETUPS = [  # (loss, batch_k, SVMax lambda from the paper)
    (losses.PKContrastiveLoss(), 4, 1.0),
    (losses.PKNpairLoss(), 2, 1.0),
    (losses.BatchHardTripletLoss(margin=0.2), 4, 0.1),
    (losses.PKAngularLoss(), 2, 2.0),
]


@pytest.mark.parametrize(
    "loss, batch_k, lam",
    PAPER_SETUPS,
    ids=lambda v: type(v).__name__ if not np.isscalar(v) else str(v),
)
def test_paper_composition_with_svmax_fits_and_round_trips(rng, tmp_path, loss, batch_k, lam):
    classes = 16 // batch_k
    y = np.repeat(np.arange(classes), batch_k)
    x = rng.standard_normal((16, 10)).astype(np.float32) + y[:, None] * 0.2
    combined = losses.RegularizedLoss(loss, [losses.SVMaxLoss(lambda_=lam)])
    e = ref.unit_rows(rng, 16, 8)
    svmax, _ = ref.svmax_reference(e, ref.original_bounds(16, 8))
    np.testing.assert_allclose(float(combined(y, e)), float(loss(y, e)) + lam * svmax, rtol=1e-5)

    inputs = keras.Input((10,))
    outputs = keras.layers.UnitNormalization()(keras.layers.Dense(8)(inputs))
    model = keras.Model(inputs, outputs)
    model.compile(keras.optimizers.SGD(0.01, momentum=0.9), loss=combined)
    history = model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(combined))
    np.testing.assert_allclose(float(restored(y, e)), float(combined(y, e)), rtol=1e-6)
    model.save(tmp_path / "m.keras")
    assert keras.models.load_model(tmp_path / "m.keras").loss.get_config() == combined.get_config()


@pytest.mark.parametrize(
    "loss",
    [
        losses.BatchHardTripletLoss(margin="soft", distance="cityblock"),
        losses.PKContrastiveLoss(margin=0.5),
        losses.PKNpairLoss(l2_reg=0.0),
        losses.PKAngularLoss(alpha=40.0, l2_reg=0.001),
        losses.SpreadOutLoss(alpha=0.5, seed=2),
        losses.ProxyAnchorLoss(alpha=16.0, delta=0.2),
    ],
    ids=lambda loss: type(loss).__name__,
)
def test_config_round_trip(loss):
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert type(restored) is type(loss) and restored.get_config() == loss.get_config()


def test_batch_hard_metric_keyword_is_refused_naming_distance(rng):
    x = _unit(rng, 8, 4, np.float32)
    y = np.repeat(np.arange(4), 2)
    message = (
        r"batch_hard_triplet_loss: the argument `metric` is now `distance` "
        r"\(pass distance='cosine' for metric='cosine'\)"
    )
    with pytest.raises(TypeError, match=message):
        losses.batch_hard_triplet_loss(y, x, metric="cosine")
    with pytest.raises(TypeError, match=message.replace("batch_hard_triplet_loss", "BatchHard.*")):
        losses.BatchHardTripletLoss(metric="cosine")
    with pytest.raises(TypeError, match=r"`metric` is now `distance` \(the old values map as "):
        losses.BatchHardTripletLoss(metric="cos")


@pytest.mark.parametrize("metric", ["euclidean", "cityblock", "cosine"])
def test_batch_hard_config_saved_with_metric_loads_with_the_same_values(rng, metric):
    # As get_config wrote it before `distance=` (a .keras file's compiled loss).
    saved = backends.saved_loss(
        "batch_hard", "BatchHardTripletLoss", "batch_hard_triplet", margin="soft", metric=metric
    )
    saved["config"].update(reduction=None, dtype="float64")
    loss = keras.saving.deserialize_keras_object(saved)
    assert isinstance(loss, losses.BatchHardTripletLoss) and loss.distance == metric
    assert "metric" not in loss.get_config() and loss.get_config()["distance"] == metric
    labels = np.repeat(np.arange(4), 3)
    x = _unit(rng, 12, 5)
    np.testing.assert_allclose(
        loss(labels, x).numpy(), rr.batch_hard(labels, x, "soft", metric), rtol=1e-10
    )
    both = {**saved, "config": {**saved["config"], "distance": metric}}
    with pytest.raises(ValueError, match=r"both `metric` and `distance`"):
        keras.saving.deserialize_keras_object(both)


def test_batch_hard_class_reductions_and_label_errors(rng):
    x = _unit(rng, 8, 4, np.float32)
    y = np.repeat(np.arange(4), 2)
    per_anchor = losses.batch_hard_triplet_loss(y, x).numpy()
    w = rng.uniform(size=8).astype(np.float32)
    np.testing.assert_allclose(losses.BatchHardTripletLoss()(y, x), per_anchor.mean(), rtol=1e-6)
    np.testing.assert_allclose(
        losses.BatchHardTripletLoss(reduction="sum")(y, x, sample_weight=w),
        (per_anchor * w).sum(),
        rtol=1e-6,
    )
    np.testing.assert_allclose(
        losses.BatchHardTripletLoss(reduction=None)(y, x), per_anchor, rtol=1e-6
    )
    for margin in ("hard", float("nan"), -0.1, float("inf")):
        with pytest.raises(ValueError, match=r"argument `margin`"):
            losses.BatchHardTripletLoss(margin=margin)
    with pytest.raises(ValueError, match=r"argument `distance`.*Received: distance='cos'"):
        losses.BatchHardTripletLoss(distance="cos")
    with pytest.raises(ValueError, match=r"argument `labels`.*one label per row"):
        losses.batch_hard_triplet_loss(np.zeros(5), x)


def test_spread_out_baseline_fits_next_to_a_ranking_loss(rng):
    y = np.repeat(np.arange(4), 4)
    x = rng.standard_normal((16, 10)).astype(np.float32)
    inputs = keras.Input((10,))
    model = keras.Model(inputs, keras.layers.UnitNormalization()(keras.layers.Dense(8)(inputs)))
    model.compile(
        "sgd",
        loss=losses.RegularizedLoss(
            losses.PKContrastiveLoss(), [losses.SpreadOutLoss(alpha=1.0, seed=0)]
        ),
    )
    # P x K losses need the batch layout intact: no shuffling inside fit.
    history = model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0).history
    assert np.all(np.isfinite(history["loss"]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="consecutive rows per class"):
        model.fit(x[::-1].copy(), np.roll(y, 1), batch_size=16, epochs=1, shuffle=False, verbose=0)


@pytest.mark.parametrize("alpha", [0.0, 2.0, -0.5, float("nan")])
def test_center_loss_update_rate_outside_0_1_is_refused(alpha):
    # Wen et al.: alpha in [0, 1]; at 0 the centers never leave their initialization.
    with pytest.raises(ValueError, match=r"argument `alpha`. Expected a (finite )?float"):
        losses.CenterLoss(num_classes=3, embedding_dim=4, alpha=alpha)
