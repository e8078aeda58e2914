import keras
import numpy as np
import pytest

from tests import reference_spectral as ref
from tf_svmax.regularizers import SVMaxRegularizer


def _keras_divides_activity_loss_by_batch_size():
    major, minor = (int(p) for p in keras.__version__.split(".")[:2])
    return (major, minor) >= (3, 14)


def test_regularizer_value_matches_numpy(rng):
    e = ref.unit_rows(rng, 144, 128)
    expected, _ = ref.svmax_reference(e, ref.original_bounds(144, 128))
    np.testing.assert_allclose(SVMaxRegularizer(lambda_=0.5)(e).numpy(), 0.5 * expected, rtol=1e-5)


def test_effective_activity_penalty_on_the_installed_keras(rng):
    """Documented rule: Keras >= 3.14 divides the activity penalty by the batch size."""
    b = 24
    e = ref.unit_rows(rng, b, 6)
    layer = keras.layers.Activation("linear", activity_regularizer=SVMaxRegularizer(lambda_=2.0))
    layer(e)
    (added,) = layer.losses
    expected, _ = ref.svmax_reference(e, ref.original_bounds(b, 6))
    divisor = b if _keras_divides_activity_loss_by_batch_size() else 1
    np.testing.assert_allclose(float(added), 2.0 * expected / divisor, rtol=1e-5)


def test_config_round_trip_and_fit(rng, tmp_path):
    reg = SVMaxRegularizer(lambda_=0.3, bounded=False, method="svd")
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(reg))
    assert restored.get_config() == reg.get_config()
    inputs = keras.Input((5,))
    outputs = keras.layers.Dense(4, activity_regularizer=SVMaxRegularizer())(inputs)
    model = keras.Model(inputs, outputs)
    model.compile("sgd", "mse")
    x = rng.standard_normal((32, 5)).astype(np.float32)
    history = model.fit(x, x[:, :4], batch_size=8, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    assert loaded.layers[1].activity_regularizer.get_config() == SVMaxRegularizer().get_config()


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"argument `lambda_`"):
        SVMaxRegularizer(lambda_=-0.1)
    with pytest.raises(ValueError, match=r"argument `method`"):
        SVMaxRegularizer(method="x")


def test_single_example_predict_and_one_row_remainder_batches(rng):
    inputs = keras.Input((5,))
    outputs = keras.layers.Dense(4, activity_regularizer=SVMaxRegularizer(lambda_=0.5))(inputs)
    model = keras.Model(inputs, outputs)
    model.compile("sgd", "mse")
    x = rng.standard_normal((33, 5)).astype(np.float32)  # batches of 16, 16 and 1
    assert model.predict(x[:1], verbose=0).shape == (1, 4)
    history = model.fit(x, x[:, :4], batch_size=16, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    model(x[:1])
    (added,) = model.losses
    # The defined one-row penalty lambda_ * 1 (Keras' division by the batch size is by 1 here).
    assert float(added) == 0.5


def test_mixed_precision_activity_regularizer(rng):
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        inputs = keras.Input((5,))
        hidden = keras.layers.Dense(8, activity_regularizer=SVMaxRegularizer())(inputs)
        outputs = keras.layers.Dense(4, dtype="float32")(hidden)
        model = keras.Model(inputs, outputs)
        model.compile("sgd", "mse")
        x = rng.standard_normal((32, 5)).astype(np.float32)
        history = model.fit(x, x[:, :4], batch_size=16, epochs=1, verbose=0)
        assert np.isfinite(history.history["loss"][0])
        reg = SVMaxRegularizer()(np.eye(4, dtype=np.float16))
        assert reg.dtype == "float32"
    finally:
        keras.mixed_precision.set_global_policy("float32")
