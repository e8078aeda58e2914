"""XMLLoss against a NumPy/SciPy composition of Eq. 2.10-2.11 around the base loss."""

import keras
import numpy as np
import pytest
import scipy.linalg
import tensorflow as tf

from tf_svmax.losses import (
    BatchHardTripletLoss,
    NpairsLoss,
    OLELoss,
    PKContrastiveLoss,
    ProxyAnchorLoss,
    SVMaxLoss,
    TripletHardLoss,
    XMLLoss,
    triplet_hard_loss,
)
from tf_svmax.losses.xml import class_halves


def _batch(rng, classes=6, k=4, e=8, m=5):
    labels = np.repeat(np.arange(classes) * 7 + 3, k)
    emb = rng.standard_normal((classes * k, e))
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    hist = rng.random((classes * k, m))
    hist /= hist.sum(axis=1, keepdims=True)
    return labels, emb, hist


def _ridge(z, y, ridge=0.05):
    m = z.shape[1]
    a = np.concatenate([z, np.sqrt(ridge) * np.eye(m)])
    return scipy.linalg.lstsq(a, np.concatenate([y, np.zeros((m, y.shape[1]))]))[0]


def test_class_halves_are_disjoint():
    labels = tf.constant([5, 5, 2, 2, 9, 9, 1, 1, 4, 4])
    first = class_halves(labels).numpy()
    np.testing.assert_array_equal(first, [1, 1, 1, 1, 1, 1, 0, 0, 0, 0])


def test_zero_lambda_is_the_base_loss_exactly(rng):
    labels, emb, hist = _batch(rng)
    base = TripletHardLoss()
    xml = XMLLoss(TripletHardLoss(), num_prototypes=5, lambda_=0.0)
    y_pred = np.concatenate([emb, hist], 1).astype(np.float32)
    assert float(xml(labels, y_pred)) == float(base(labels, emb.astype(np.float32)))


def test_value_is_eq_2_11(rng):
    labels, emb, hist = _batch(rng)
    lam = 0.3
    first = np.repeat(np.arange(6) < 3, 4)
    predicted = np.empty_like(emb)
    for part in (first, ~first):
        v = _ridge(hist[~part], emb[~part])  # fitted on the other half
        predicted[part] = hist[part] @ v
    predicted /= np.linalg.norm(predicted, axis=1, keepdims=True)
    f = lambda y, x: float(triplet_hard_loss(y, x))  # noqa: E731
    want = (1 - lam) * f(labels, emb) + lam * (
        f(labels[first], predicted[first]) + f(labels[~first], predicted[~first])
    )
    xml = XMLLoss(TripletHardLoss(), num_prototypes=5, lambda_=lam)
    got = xml(labels, np.concatenate([emb, hist], 1))
    np.testing.assert_allclose(float(got), want, rtol=1e-5)


def test_trains_a_model_and_round_trips(rng, tmp_path):
    # 8 classes: each half holds 4, as the P x K contrastive pairing (classes in pairs) needs.
    labels, emb, hist = _batch(rng, classes=8)
    inputs = keras.Input((8,))
    e = keras.layers.UnitNormalization()(keras.layers.Dense(8)(inputs))
    h = keras.layers.Softmax()(keras.layers.Dense(5)(inputs))
    model = keras.Model(inputs, keras.layers.Concatenate()([e, h]))
    loss = XMLLoss(PKContrastiveLoss(), num_prototypes=5, lambda_=0.5)
    model.compile("sgd", loss=loss)
    history = model.fit(
        emb.astype(np.float32), labels, batch_size=32, epochs=2, shuffle=False, verbose=0
    )
    assert np.isfinite(history.history["loss"]).all()
    path = tmp_path / "m.keras"
    model.save(path)
    again = keras.models.load_model(path)
    np.testing.assert_allclose(again.predict(emb, verbose=0), model.predict(emb, verbose=0))
    config = XMLLoss.from_config(loss.get_config()).get_config()
    assert config == loss.get_config()


def test_one_class_batch_has_no_cross_term(rng):
    labels = np.zeros(6, np.int32)
    emb = rng.standard_normal((6, 4)).astype(np.float32)
    hist = np.full((6, 3), 1 / 3, np.float32)
    value = XMLLoss(TripletHardLoss(), num_prototypes=3, lambda_=0.5)(
        labels, np.concatenate([emb, hist], 1)
    )
    assert np.isfinite(float(value))


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(num_prototypes=0), "num_prototypes"),
        (dict(lambda_=1.5), "lambda_"),
        (dict(normalize="yes"), "normalize"),
    ],
)
def test_bad_arguments_are_named(kwargs, name):
    base = dict(loss=TripletHardLoss(), num_prototypes=4)
    with pytest.raises(ValueError, match=f"argument `{name}`"):
        XMLLoss(**{**base, **kwargs})


@pytest.mark.parametrize(
    "loss",
    [
        keras.losses.MeanSquaredError(),  # compares y_true with y_pred element-wise
        "mse",
        triplet_hard_loss,  # a function: use its class, TripletHardLoss
        lambda y_true, y_pred: tf.reduce_mean(y_pred),
        "tf_svmax>triplet_hard_loss",
        "no_such_loss",
        ProxyAnchorLoss(),  # y_pred are proxy similarities, not embeddings
        NpairsLoss(),  # y_pred is a similarity matrix, not embeddings
        "tf_svmax>NpairsMultilabelLoss",  # the same, and multi-hot y_true
        SVMaxLoss(),  # regularizers: beside XML on the embeddings, not inside it
        "tf_svmax>SpreadOutLoss",
        OLELoss(),
        XMLLoss(TripletHardLoss(), num_prototypes=2),
    ],
)
def test_losses_that_are_not_ranking_losses_on_embeddings_are_refused(loss):
    with pytest.raises(ValueError, match=r"argument `loss`.*ranking loss.*Received: loss="):
        XMLLoss(loss, num_prototypes=4)


@pytest.mark.parametrize("loss", [BatchHardTripletLoss(), "tf_svmax>TripletSemiHardLoss"])
def test_ranking_losses_are_accepted_as_instances_or_names(rng, loss):
    labels, emb, hist = _batch(rng)
    xml = XMLLoss(loss, num_prototypes=5, lambda_=0.3)
    assert np.isfinite(float(xml(labels, np.concatenate([emb, hist], 1).astype(np.float32))))
