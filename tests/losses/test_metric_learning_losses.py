"""Keras integration and input validation of the tensorflow-addons-compatible losses.

Their values and gradients are compared with tensorflow-addons in test_tfa_parity.py.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_svmax
from tests import backends
from tests import reference_spectral as ref
from tf_svmax import losses


@keras.saving.register_keras_serializable(package="tests")
def dot_similarity(x):
    return tf.linalg.matmul(x, x, transpose_b=True)


def _model():
    inputs = keras.Input((12,))
    x = keras.layers.Dense(8)(keras.layers.Dense(16, activation="relu")(inputs))
    return keras.Model(inputs, keras.layers.UnitNormalization()(x))


def _pk_data(rng, classes=8, k=4):
    y = np.repeat(np.arange(classes), k)
    x = rng.standard_normal((classes * k, 12)).astype(np.float32) + y[:, None] * 0.1
    return x, y


BATCH_LOSSES = [
    "tf_svmax>TripletSemiHardLoss",
    "tf_svmax>TripletHardLoss",
    "tf_svmax>LiftedStructLoss",
    losses.TripletSemiHardLoss(margin=0.2, distance_metric="angular"),
    losses.TripletHardLoss(margin=0.2, soft=True, distance_metric=dot_similarity),
    losses.RegularizedLoss(losses.TripletSemiHardLoss(margin=0.2), [losses.SVMaxLoss(0.1)]),
]


# Ids that are the same in every process (pytest-xdist's workers must collect the same tests).
BATCH_LOSS_IDS = [
    *BATCH_LOSSES[:3],
    "TripletSemiHardLoss(angular)",
    "TripletHardLoss(soft,dot_similarity)",
    "RegularizedLoss(TripletSemiHardLoss,SVMaxLoss)",
]


@pytest.mark.parametrize("loss", BATCH_LOSSES, ids=BATCH_LOSS_IDS)
def test_compile_fit_save_load(rng, tmp_path, loss):
    x, y = _pk_data(rng)
    model = _model()
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss=loss)
    history = model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    model.save(tmp_path / "m.keras")
    restored = keras.models.load_model(tmp_path / "m.keras")
    a = model.evaluate(x, y, batch_size=16, verbose=0)
    b = restored.evaluate(x, y, batch_size=16, verbose=0)
    np.testing.assert_allclose(a, b, rtol=1e-5)


@pytest.mark.parametrize(
    "loss",
    [
        losses.TripletSemiHardLoss(margin=0.3, distance_metric="squared-L2"),
        losses.TripletHardLoss(margin=0.1, soft=True, distance_metric=dot_similarity),
        losses.LiftedStructLoss(margin=0.5),
        losses.ContrastiveLoss(margin=0.7, reduction="sum"),
        losses.NpairsLoss(),
        losses.NpairsMultilabelLoss(),
    ],
    ids=lambda loss: type(loss).__name__,
)
def test_config_round_trip(loss):
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert type(restored) is type(loss)
    config, restored_config = loss.get_config(), restored.get_config()
    assert restored_config == config


def test_string_lookup_builds_default_instances():
    loss = keras.losses.get("tf_svmax>TripletSemiHardLoss")
    assert isinstance(loss, losses.TripletSemiHardLoss) and loss.margin == 1.0
    assert isinstance(losses.get("tf_svmax>NpairsLoss"), losses.NpairsLoss)
    with pytest.raises(ValueError, match=r"argument `identifier`"):
        losses.get("tf_svmax>NoSuchLoss")


def test_tfa_function_names_resolve_in_compile_and_save(rng, tmp_path):
    # tensorflow-addons registered "Addons>triplet_semihard_loss"; ours is "tf_svmax>...".
    assert losses.get("tf_svmax>triplet_semihard_loss") is losses.triplet_semihard_loss
    x = rng.standard_normal((16, 6)).astype("float32")
    y = np.repeat(np.arange(4), 4)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(3)])
    model.compile(optimizer="sgd", loss="tf_svmax>triplet_semihard_loss")
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    path = str(tmp_path / "m.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    expected = float(losses.triplet_semihard_loss(y, model(x)))
    assert restored.evaluate(x, y, batch_size=16, verbose=0) == pytest.approx(expected, rel=1e-5)


def test_batch_level_reductions_follow_keras2_broadcasting(rng):
    # A scalar batch value v with weights w: "none" -> v * w, "sum" -> v * sum(w),
    # "sum_over_batch_size" -> v * mean(w); without weights every reduction gives v.
    x = rng.standard_normal((8, 4)).astype("float32")
    y = np.repeat(np.arange(4), 2)
    w = rng.random(8).astype("float32")
    v = float(losses.npairs_loss(y, x @ x.T))
    for reduction in ("none", "sum", "sum_over_batch_size", None):
        assert float(losses.NpairsLoss(reduction=reduction)(y, x @ x.T)) == pytest.approx(v)
    np.testing.assert_allclose(
        losses.NpairsLoss(reduction="none")(y, x @ x.T, sample_weight=w), v * w, rtol=1e-6
    )
    assert float(losses.NpairsLoss(reduction="sum")(y, x @ x.T, sample_weight=w)) == (
        pytest.approx(v * w.sum(), rel=1e-6)
    )
    assert float(losses.NpairsLoss()(y, x @ x.T, sample_weight=w)) == pytest.approx(
        v * w.mean(), rel=1e-6
    )
    restored = keras.saving.deserialize_keras_object(
        keras.saving.serialize_keras_object(losses.NpairsLoss(reduction="none"))
    )
    assert restored.reduction == "none"


def test_large_integer_labels_stay_distinct_in_the_classes(rng):
    e = ref.unit_rows(rng, 8, 4)
    labels = np.array([2**40, 2**40 + 1] * 4)  # equal once cast to float32
    expected = losses.triplet_semihard_loss(labels, e)
    np.testing.assert_allclose(losses.TripletSemiHardLoss()(labels, e), expected, rtol=1e-6)
    merged = losses.triplet_semihard_loss(np.zeros(8, np.int64), e)
    assert not np.isclose(float(expected), float(merged))


def test_batch_level_classes_scale_by_the_mean_sample_weight(rng):
    e = ref.unit_rows(rng, 8, 4)
    y = np.repeat(np.arange(4), 2)
    w = rng.uniform(size=8).astype(np.float32)
    for loss in (losses.TripletSemiHardLoss(), losses.TripletHardLoss(), losses.LiftedStructLoss()):
        np.testing.assert_allclose(loss(y, e, sample_weight=w), loss(y, e) * w.mean(), rtol=1e-6)


def test_float64_embeddings_are_supported(rng):
    e = ref.unit_rows(rng, 16, 4, dtype=np.float64)
    y = np.repeat(np.arange(4), 4)
    for fn in (losses.triplet_semihard_loss, losses.triplet_hard_loss, losses.lifted_struct_loss):
        value = fn(y, e)
        assert value.dtype == tf.float64
        np.testing.assert_allclose(value, fn(y, e.astype(np.float32)), rtol=1e-5)


def test_regularized_with_svmax_adds_the_paper_penalty(rng):
    e = ref.unit_rows(rng, 24, 8)
    y = np.repeat(np.arange(6), 4)
    svmax, _ = ref.svmax_reference(e, ref.original_bounds(24, 8))
    combined = losses.RegularizedLoss(losses.TripletHardLoss(margin=0.2), [losses.SVMaxLoss(0.1)])
    np.testing.assert_allclose(
        combined(y, e), losses.triplet_hard_loss(y, e, 0.2) + 0.1 * svmax, rtol=1e-5
    )


def test_bad_input_names_the_argument(rng):
    e = ref.unit_rows(rng, 8, 4)
    with pytest.raises(ValueError, match=r"argument `y_true`.*shape"):
        losses.triplet_semihard_loss(np.zeros((8, 2)), e)
    with pytest.raises(ValueError, match=r"argument `y_true`.*one label per row"):
        losses.triplet_hard_loss(np.zeros(7), e)
    with pytest.raises(TypeError, match=r"argument `y_true`"):
        losses.triplet_hard_loss(np.array(["a"] * 8), e)
    with pytest.raises(ValueError, match=r"argument `y_pred`.*rank-2"):
        losses.triplet_hard_loss(np.zeros(8), e[None])
    with pytest.raises(ValueError, match=r"argument `distance_metric`"):
        losses.TripletSemiHardLoss(distance_metric="L1")
    with pytest.raises(ValueError, match=r"argument `margin`"):
        losses.TripletHardLoss(margin="1")
    with pytest.raises(ValueError, match=r"argument `labels`"):
        losses.lifted_struct_loss(np.zeros(3), e)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"`y_true`.*at least one label"):
        losses.npairs_multilabel_loss(np.zeros((8, 3)), np.eye(8, dtype=np.float32))
    fn = tf.function(
        losses.triplet_semihard_loss,
        input_signature=[tf.TensorSpec([None], tf.int32), tf.TensorSpec([None, 4], tf.float32)],
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match="one label per row"):
        fn(np.zeros(7, np.int32), e)


def test_no_nan_for_degenerate_layouts(rng):
    e = ref.unit_rows(rng, 6, 4)
    for labels in (np.zeros(6), np.arange(6)):
        for fn in (
            losses.triplet_semihard_loss,
            losses.triplet_hard_loss,
            losses.lifted_struct_loss,
        ):
            x = tf.constant(e)
            with tf.GradientTape() as tape:
                tape.watch(x)
                value = fn(labels, x)
            assert np.isfinite(value.numpy())
            assert np.all(np.isfinite(tape.gradient(value, x).numpy()))
    duplicated = np.repeat(e[:3], 2, axis=0)  # zero distances inside each class
    x = tf.constant(duplicated)
    with tf.GradientTape() as tape:
        tape.watch(x)
        value = losses.triplet_hard_loss(np.repeat(np.arange(3), 2), x)
    assert np.all(np.isfinite(tape.gradient(value, x).numpy()))


def test_tf_svmax_namespace_exports_everything_tfa_had():
    for name in (
        "triplet_semihard_loss",
        "TripletSemiHardLoss",
        "triplet_hard_loss",
        "TripletHardLoss",
        "contrastive_loss",
        "ContrastiveLoss",
        "npairs_loss",
        "NpairsLoss",
        "npairs_multilabel_loss",
        "NpairsMultilabelLoss",
        "lifted_struct_loss",
        "LiftedStructLoss",
    ):
        assert hasattr(tf_svmax.losses, name), name
    assert callable(tf_svmax.ops.pairwise_distance) and callable(tf_svmax.ops.angular_distance)


def test_lifted_gradient_is_exact_at_ties_between_row_shifts():
    # Integer-grid embeddings make several rows' stabilizing shifts tie exactly; the loss is
    # smooth there (the shift cancels), so finite differences give its gradient.
    rng = np.random.default_rng(3)
    grid = rng.integers(-1, 2, size=(5, 3)).astype(np.float64)
    x = tf.constant(grid[rng.integers(0, 5, size=12)] + np.repeat(np.eye(3), 4, axis=0) * 0.5)
    labels = tf.constant(np.repeat(np.arange(3), 4))
    theoretical, numerical = tf.test.compute_gradient(
        lambda e: losses.lifted_struct_loss(labels, e), [x], delta=1e-6
    )
    np.testing.assert_allclose(theoretical[0], numerical[0], atol=1e-5)


_ROW_MISMATCH = [
    ("contrastive", lambda: losses.ContrastiveLoss(), np.array([0.0, 1.0, 1.0]), (2,)),
    ("npairs_multilabel", lambda: losses.NpairsMultilabelLoss(), np.eye(3), (4, 4)),
    ("center", lambda: losses.CenterLoss(3, 4), np.array([0, 1, 2]), (4, 4)),
    ("proxy_anchor", lambda: losses.ProxyAnchorLoss(), np.array([0, 1, 2]), (4, 4)),
]


@pytest.mark.parametrize("name, make, y_true, pred_shape", _ROW_MISMATCH)
def test_row_mismatch_names_y_true_eagerly_and_in_a_traced_step(name, make, y_true, pred_shape):
    y_pred = np.random.default_rng(0).random(pred_shape).astype("float32")
    # The labels argument by its name (`labels` in proxy_anchor_loss, which the class calls).
    # ContrastiveLoss' labels pair with its distances (one label per distance, issue 59).
    expected = r"argument `(y_true|labels)`. Expected one (row per row|label per distance)"
    with pytest.raises(ValueError, match=expected):
        make()(y_true, y_pred)
    # Unknown batch sizes (a traced step): the run-time assertion carries the same words.
    loss = make()
    signature = [
        tf.TensorSpec([None, *np.shape(y_true)[1:]], tf.as_dtype(np.asarray(y_true).dtype)),
        tf.TensorSpec([None, *pred_shape[1:]], tf.float32),
    ]
    traced = tf.function(lambda a, b: loss(a, b), input_signature=signature)
    with pytest.raises(tf.errors.InvalidArgumentError, match="Expected one row per row of"):
        traced(y_true, y_pred)


def test_center_loss_names_the_feature_width():
    with pytest.raises(ValueError, match=r"`y_pred`.*\[batch_size, 4\] rows.*embedding_dim"):
        losses.CenterLoss(3, 4)(np.array([0, 1, 2]), np.ones((3, 5), "float32"))


@pytest.mark.parametrize("make", [losses.NpairsLoss, losses.NpairsMultilabelLoss])
def test_npairs_losses_stay_per_replica(make):
    """Their input is the model's per-replica similarity matrix: nothing global to gather."""
    loss = make()
    assert loss.global_batch is False and loss.get_config()["global_batch"] is False
    assert type(loss).from_config(loss.get_config()).global_batch is False
    with pytest.raises(ValueError, match=r"argument `global_batch`.*PKNpairLoss"):
        make(global_batch=True)


@pytest.mark.parametrize(
    "make",
    [
        losses.TripletSemiHardLoss,
        losses.TripletHardLoss,
        losses.LiftedStructLoss,
        losses.BatchHardTripletLoss,
        lambda: losses.SpreadOutLoss(seed=0),
    ],
    ids=["semihard", "hard", "lifted", "batch_hard", "spread_out"],
)
def test_a_batch_with_no_rows_gives_zero(make):
    loss = make()
    fn = tf.function(
        lambda y, x: loss(y, x),
        input_signature=[tf.TensorSpec([None], tf.int32), tf.TensorSpec([None, 4], tf.float32)],
    )
    for call in (loss, fn):  # static and dynamic row counts
        assert float(call(tf.zeros([0], tf.int32), tf.zeros([0, 4]))) == 0.0


def test_global_batch_round_trips_and_is_checked():
    loss = losses.TripletSemiHardLoss(global_batch=False)
    assert loss.get_config()["global_batch"] is False
    assert losses.TripletSemiHardLoss.from_config(loss.get_config()).global_batch is False
    assert losses.TripletSemiHardLoss().global_batch is True
    with pytest.raises(ValueError, match=r"argument `global_batch`"):
        losses.BatchHardTripletLoss(global_batch=1)
    with pytest.raises(ValueError, match=r"argument `global_batch`"):
        losses.CenterLoss(3, 2, global_batch=None)


ANCHOR_SPLIT_LOSSES = {
    "semihard": losses.TripletSemiHardLoss(0.5),
    "semihard_angular": losses.TripletSemiHardLoss(0.5, "angular"),
    "semihard_callable": losses.TripletSemiHardLoss(0.5, dot_similarity),
    "hard": losses.TripletHardLoss(0.5),
    "hard_soft_squared": losses.TripletHardLoss(soft=True, distance_metric="squared-L2"),
}


@pytest.mark.parametrize("name", ANCHOR_SPLIT_LOSSES)
def test_anchor_shares_add_up_to_the_loss_and_its_gradient(rng, name):
    """Disjoint anchor ranges (an empty one included) cover the batch: their reference parts
    against the batch, counts summed (the replica split), give the whole batch's value and
    gradient (itself checked against tensorflow-addons)."""
    loss = ANCHOR_SPLIT_LOSSES[name]
    y = rng.integers(0, 7, size=45)
    x = tf.constant(rng.standard_normal((45, 6)).astype(np.float32))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        whole = loss.call(y, x)
        total = backends.split_value(loss, y, x, ((0, 13), (13, 0), (13, 30), (43, 2)))
    np.testing.assert_allclose(total.numpy(), whole.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        tape.gradient(total, x).numpy(), tape.gradient(whole, x).numpy(), rtol=1e-4, atol=1e-6
    )
    assert whole.numpy() > 0.01  # the comparison means something


def test_semihard_traced_and_xla_match_eager(rng):
    y = rng.integers(0, 5, size=40)
    x = rng.standard_normal((40, 8)).astype(np.float32)
    eager = losses.triplet_semihard_loss(y, x).numpy()
    for jit in (False, True):
        traced = tf.function(losses.triplet_semihard_loss, jit_compile=jit)
        np.testing.assert_allclose(traced(y, x).numpy(), eager, rtol=1e-5)


def _lifted_numpy(labels, x, margin, distance):
    """The lifted structured loss by its definition, pair by pair, in float64."""
    diff = x[:, None, :] - x[None, :, :]
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    d = {
        "L2": np.sqrt((diff**2).sum(-1)),
        "squared-L2": (diff**2).sum(-1),
        "cityblock": np.abs(diff).sum(-1),
        "angular": 1.0 - unit @ unit.T,
    }[distance]
    same = labels[:, None] == labels[None, :]
    total, pairs = 0.0, 0
    for i in range(len(x)):
        for j in range(len(x)):
            if i == j or not same[i, j]:
                continue
            pairs += 1
            negatives = (
                np.exp(margin - d[i][~same[i]]).sum() + np.exp(margin - d[j][~same[j]]).sum()
            )
            total += max(np.log(negatives) + d[i, j], 0.0) ** 2
    return 0.25 * total / (pairs / 2.0)


@pytest.mark.parametrize("distance", ["L2", "squared-L2", "cityblock", "angular"])
def test_lifted_matches_its_definition_with_each_distance(rng, distance):
    x = rng.standard_normal((12, 5))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    labels = np.repeat(np.arange(4), 3)
    expected = _lifted_numpy(labels, x, 0.5, distance)
    value = losses.lifted_struct_loss(labels, tf.constant(x), 0.5, distance=distance)
    assert float(value) == pytest.approx(expected, rel=1e-10)  # float64 in, float64 out
    loss = losses.LiftedStructLoss(margin=0.5, distance=distance)
    assert float(loss(labels, tf.constant(x))) == pytest.approx(expected, rel=1e-6)
    restored = losses.LiftedStructLoss.from_config(loss.get_config())
    assert restored.distance == distance
    # Reference rows (the replica split's and the memory's): two anchor ranges' parts.
    split = backends.split_value(restored, labels, tf.constant(x), ((0, 5), (5, 7)))
    assert float(split) == pytest.approx(expected, rel=1e-10)


def test_lifted_refuses_the_squared_keyword_naming_distance(rng):
    x = ref.unit_rows(rng, 6, 4)
    labels = np.repeat(np.arange(3), 2)
    with pytest.raises(ValueError, match=r"argument `distance`.*Received: distance='yes'"):
        losses.LiftedStructLoss(distance="yes")
    message = (
        r"the argument `squared` is now `distance` \(pass distance='squared-L2' for "
        r"squared=True\)"
    )
    with pytest.raises(TypeError, match=r"lifted_struct_loss: " + message):
        losses.lifted_struct_loss(labels, x, squared=True)
    with pytest.raises(TypeError, match=r"LiftedStructLoss: " + message):
        losses.LiftedStructLoss(squared=True)
    with pytest.raises(TypeError, match=r"squared=False -> distance='L2', squared=True -> "):
        losses.LiftedStructLoss(squared="yes")


@pytest.mark.parametrize("squared", [False, True])
def test_lifted_config_saved_with_squared_loads_with_the_same_values(rng, squared):
    # As get_config wrote it before `distance=` (a .keras file's compiled loss).
    saved = backends.saved_loss(
        "lifted", "LiftedStructLoss", "lifted_struct_loss", margin=0.5, squared=squared
    )
    saved["config"]["dtype"] = "float64"
    loss = keras.saving.deserialize_keras_object(saved)
    distance = "squared-L2" if squared else "L2"
    assert isinstance(loss, losses.LiftedStructLoss) and loss.distance == distance
    assert "squared" not in loss.get_config()
    x = ref.unit_rows(rng, 12, 5, dtype=np.float64)
    labels = np.repeat(np.arange(4), 3)
    expected = _lifted_numpy(labels, x, 0.5, distance)
    assert float(loss(labels, x)) == pytest.approx(expected, rel=1e-10)
    # Inside a wrapping loss' config too (nested losses deserialize through from_config).
    wrapped = keras.saving.serialize_keras_object(losses.RegularizedLoss(loss, []))
    wrapped["config"]["loss"] = saved
    again = keras.saving.deserialize_keras_object(wrapped)
    assert float(again(labels, x)) == pytest.approx(expected, rel=1e-10)
    saved["config"]["squared"] = 1
    with pytest.raises(ValueError, match=r"argument `squared`.*\[False, True\].*squared=1"):
        keras.saving.deserialize_keras_object(saved)


@pytest.mark.parametrize(
    "make",
    [
        losses.TripletSemiHardLoss,
        losses.TripletHardLoss,
        losses.LiftedStructLoss,
        losses.ContrastiveLoss,
    ],
)
@pytest.mark.parametrize("margin", [float("nan"), float("inf"), True, "1"])
def test_a_margin_that_is_not_a_finite_number_is_refused(make, margin):
    # A NaN or infinite margin would make every loss value NaN or infinite, silently.
    with pytest.raises(ValueError, match=r"argument `margin`. Expected a finite float"):
        make(margin=margin)


def test_a_negative_margin_is_kept_as_tensorflow_addons_keeps_it():
    assert losses.TripletSemiHardLoss(margin=-0.5).margin == -0.5
