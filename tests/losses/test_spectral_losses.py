import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_svmax
from benchmarks.reference_ole import ole_reference
from tests import reference_spectral as ref
from tf_svmax.losses import OLELoss, RegularizedLoss, SVMaxLoss


def _embedding_model(dim=8, mixed=False):
    inputs = keras.Input((12,))
    x = keras.layers.Dense(16, activation="relu")(inputs)
    x = keras.layers.Dense(dim)(x)
    if mixed:
        x = keras.layers.Activation("linear", dtype="float32")(x)
    outputs = keras.layers.UnitNormalization()(x)
    return keras.Model(inputs, outputs)


def _data(rng, n=64, classes=8):
    x = rng.standard_normal((n, 12)).astype(np.float32)
    y = np.repeat(np.arange(classes), n // classes).astype(np.int64)
    return x, y


def test_svmax_loss_value_matches_numpy(rng):
    e = ref.unit_rows(rng, 144, 128)
    expected, _ = ref.svmax_reference(e, ref.original_bounds(144, 128))
    np.testing.assert_allclose(SVMaxLoss(lambda_=0.1)(None, e).numpy(), 0.1 * expected, rtol=1e-5)
    unbounded, _ = ref.svmax_reference(e, None, bounded=False)
    np.testing.assert_allclose(
        SVMaxLoss(bounded=False)(np.zeros(144), e).numpy(), unbounded, rtol=1e-5
    )


def test_sample_weights_scale_the_batch_penalty_by_their_mean(rng):
    e = ref.unit_rows(rng, 20, 8)
    loss = SVMaxLoss()
    weights = rng.uniform(size=20).astype(np.float32)
    np.testing.assert_allclose(
        loss(None, e, sample_weight=weights).numpy(),
        loss(None, e).numpy() * weights.mean(),
        rtol=1e-6,
    )
    np.testing.assert_allclose(
        loss(None, e, sample_weight=weights[:, None]), loss(None, e) * weights.mean(), rtol=1e-6
    )
    assert float(loss(None, e, sample_weight=2.0)) == pytest.approx(2 * float(loss(None, e)))
    with pytest.raises(ValueError, match=r"argument `sample_weight`.*one weight per row"):
        loss(None, e, sample_weight=weights[:7])
    traced = tf.function(
        lambda x, w: loss(None, x, sample_weight=w),
        input_signature=[tf.TensorSpec([None, 8]), tf.TensorSpec([None])],
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"`sample_weight`"):
        traced(tf.constant(e, tf.float32), tf.constant(weights[:7]))


def test_ole_loss_value_matches_reference_and_keeps_large_labels_distinct(rng):
    x = rng.standard_normal((12, 6)).astype(np.float32)
    labels = np.array([2**40, 2**40 + 1] * 6)  # equal once cast to float32
    expected, _ = ole_reference(labels, x.astype(np.float64))
    np.testing.assert_allclose(OLELoss(lambda_=0.5)(labels, x).numpy(), 0.5 * expected, rtol=1e-5)


def test_regularized_loss_adds_its_terms(rng):
    e = ref.unit_rows(rng, 16, 4)
    y = np.repeat(np.arange(4), 4)
    target = rng.standard_normal((16, 4)).astype(np.float32)
    mse = np.mean((e - target) ** 2)
    svmax, _ = ref.svmax_reference(e, ref.original_bounds(16, 4))
    ole, _ = ole_reference(y, e.astype(np.float64))
    combined = RegularizedLoss("mse", [SVMaxLoss(lambda_=2.0)])
    np.testing.assert_allclose(combined(target, e).numpy(), mse + 2.0 * svmax, rtol=1e-5)
    combined = RegularizedLoss(keras.losses.MeanSquaredError(), SVMaxLoss())
    np.testing.assert_allclose(combined(target, e).numpy(), mse + svmax, rtol=1e-5)
    user_fn = RegularizedLoss(lambda yt, yp: tf.reduce_sum(yp, axis=-1), [OLELoss(lambda_=1.0)])
    np.testing.assert_allclose(user_fn(y, e).numpy(), e.sum(-1).mean() + ole, rtol=1e-5)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), "1", True])
def test_bad_hyperparameters_name_the_argument(bad):
    with pytest.raises(ValueError, match=r"argument `lambda_`"):
        SVMaxLoss(lambda_=bad)
    with pytest.raises(ValueError, match=r"argument `lambda_`"):
        OLELoss(lambda_=bad)
    with pytest.raises(ValueError, match=r"argument `delta`"):
        OLELoss(delta=bad)


def test_other_bad_arguments():
    with pytest.raises(ValueError, match=r"argument `bounded`"):
        SVMaxLoss(bounded=1)
    with pytest.raises(ValueError, match=r"argument `method`"):
        SVMaxLoss(method="qr")
    with pytest.raises(ValueError, match=r"argument `regularizers`"):
        RegularizedLoss("mse", [42])
    with pytest.raises(ValueError, match=r"argument `y_true`"):
        OLELoss()(None, np.eye(3, dtype=np.float32))


@pytest.mark.parametrize(
    "loss",
    [
        SVMaxLoss(lambda_=0.3, bounded=False, method="svd"),
        OLELoss(lambda_=0.1, delta=2.0, threshold=1e-5),
        RegularizedLoss(
            keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            [SVMaxLoss(0.1), OLELoss()],
        ),
        RegularizedLoss("sparse_categorical_crossentropy", [SVMaxLoss(0.1)]),
    ],
)
def test_config_round_trip(loss):
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert type(restored) is type(loss)
    assert restored.get_config() == loss.get_config()
    rng = np.random.default_rng(0)
    e = ref.unit_rows(rng, 16, 4)
    y = np.repeat(np.arange(4), 4)
    probabilities = np.abs(e) / np.abs(e).sum(-1, keepdims=True)
    np.testing.assert_allclose(restored(y, probabilities), loss(y, probabilities), rtol=1e-6)


@pytest.mark.parametrize(
    "make_loss",
    [
        lambda: SVMaxLoss(lambda_=1.0),
        lambda: OLELoss(),
        lambda: RegularizedLoss(OLELoss(lambda_=0.1), [SVMaxLoss(lambda_=0.1)]),
    ],
)
def test_compile_fit_save_and_load(rng, tmp_path, make_loss):
    x, y = _data(rng)
    model = _embedding_model()
    model.compile(
        optimizer=keras.optimizers.SGD(0.05),
        loss=make_loss(),
        metrics=tf_svmax.metrics.svmax_metrics(),
    )
    history = model.fit(x, y, batch_size=16, epochs=2, verbose=0)
    losses = history.history["loss"]
    assert np.all(np.isfinite(losses))
    assert "mean_singular_value" in history.history
    path = tmp_path / "model.keras"
    model.save(path)
    restored = keras.models.load_model(path)  # no custom_objects needed
    assert restored.loss.get_config() == model.loss.get_config()
    np.testing.assert_allclose(
        restored.predict(x, verbose=0), model.predict(x, verbose=0), atol=1e-6
    )
    np.testing.assert_allclose(
        restored.evaluate(x, y, batch_size=16, verbose=0, return_dict=True)["loss"],
        model.evaluate(x, y, batch_size=16, verbose=0, return_dict=True)["loss"],
        rtol=1e-5,
    )


def test_svmax_loss_raises_s_mu_in_training(rng):
    """Trained on the SVMax penalty alone, the embedding spreads out (s_mu grows)."""
    x, y = _data(rng, n=128)
    model = _embedding_model(dim=8)
    before = float(tf_svmax.ops.mean_singular_value(model(x)))
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss=SVMaxLoss())
    model.fit(x, y, batch_size=64, epochs=20, verbose=0)
    after = float(tf_svmax.ops.mean_singular_value(model(x)))
    assert after > before


def test_mixed_precision_fit(rng):
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        x, y = _data(rng)
        model = _embedding_model(mixed=True)
        model.compile(optimizer="sgd", loss=RegularizedLoss(OLELoss(), [SVMaxLoss()]))
        history = model.fit(x, y, batch_size=16, epochs=1, verbose=0)
        assert np.isfinite(history.history["loss"][0])
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_regularized_loss_with_a_lambda_and_a_name_inside_fit(rng):
    x, y = _data(rng)
    model = _embedding_model()
    model.compile(
        "sgd", loss=RegularizedLoss(lambda yt, yp: tf.reduce_sum(tf.square(yp), -1), [OLELoss()])
    )
    assert np.isfinite(model.fit(x, y, batch_size=16, epochs=1, verbose=0).history["loss"][0])
    e = ref.unit_rows(rng, 8, 4)
    target = rng.standard_normal((8, 4)).astype(np.float32)
    np.testing.assert_allclose(
        tf_svmax.losses.FunctionLoss("mse")(target, e), np.mean((e - target) ** 2), rtol=1e-6
    )


def test_dtype_survives_serialization_and_bad_reduction_is_refused():
    loss = SVMaxLoss(dtype="float64")
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert restored.dtype == "float64"
    with pytest.raises(ValueError, match=r"argument `reduction`"):
        SVMaxLoss(reduction="mean")
    with pytest.raises(ValueError, match=r"argument `regularizers`.*Regularizer"):
        RegularizedLoss("mse", [tf_svmax.regularizers.SVMaxRegularizer()])


def test_one_row_remainder_batch_in_fit(rng):
    x, y = _data(rng, n=33)
    model = _embedding_model()
    model.compile("sgd", loss=RegularizedLoss(OLELoss(), [SVMaxLoss()]))
    history = model.fit(
        x, y[:33] if len(y) >= 33 else np.resize(y, 33), batch_size=16, epochs=1, verbose=0
    )
    assert np.isfinite(history.history["loss"][0])


@pytest.mark.parametrize("loss", [SVMaxLoss(), OLELoss()], ids=["svmax", "ole"])
def test_a_batch_with_no_rows_gives_zero(loss):
    fn = tf.function(
        lambda y, x: loss(y, x),
        input_signature=[tf.TensorSpec([None], tf.int32), tf.TensorSpec([None, 4], tf.float32)],
    )
    for call in (loss, fn):  # static and dynamic row counts
        assert float(call(tf.zeros([0], tf.int32), tf.zeros([0, 4]))) == 0.0
