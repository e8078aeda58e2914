"""ConstantThenPolynomialDecay: values against the closed form, checks, serialization, on every
Keras backend (marked all_backends: tests/conftest.py)."""

import keras
import numpy as np
import pytest

from tf_svmax.training import ConstantThenPolynomialDecay

pytestmark = pytest.mark.all_backends


def test_constant_for_half_then_linear_to_the_end_rate():
    schedule = ConstantThenPolynomialDecay(0.01, 1000)
    for step, expected in (
        (0, 0.01),
        (499, 0.01),
        (500, 0.01),
        (750, 0.005 + 0.5e-7),
        (1000, 1e-7),
        (5000, 1e-7),
    ):
        assert float(schedule(step)) == pytest.approx(expected, rel=1e-5)
    odd = ConstantThenPolynomialDecay(1.0, 7, end_learning_rate=0.0)  # K/2 = 3, 4 decay steps
    expected = [1.0] * 4 + [1 - k / 4 for k in (1, 2, 3, 4)]
    np.testing.assert_allclose([float(odd(t)) for t in range(8)], expected, rtol=1e-6)


def test_round_trip_and_the_old_registered_name():
    schedule = ConstantThenPolynomialDecay(0.02, 300, end_learning_rate=1e-5)
    config = keras.saving.serialize_keras_object(schedule)
    assert config["registered_name"] == "tf_svmax>ConstantThenPolynomialDecay"
    again = keras.saving.deserialize_keras_object(config)
    assert again.get_config() == schedule.get_config()
    # Saved before the schedule moved into the package (trainers' registration).
    old = {**config, "registered_name": "tf_svmax_trainers>ConstantThenPolynomialDecay"}
    assert keras.saving.deserialize_keras_object(old).get_config() == schedule.get_config()


@pytest.mark.parametrize(
    "kwargs, argument",
    [
        (dict(learning_rate=0.0, total_steps=10), "learning_rate"),
        (dict(learning_rate=float("inf"), total_steps=10), "learning_rate"),
        (dict(learning_rate=0.1, total_steps=0), "total_steps"),
        (dict(learning_rate=0.1, total_steps=10, end_learning_rate=-1.0), "end_learning_rate"),
    ],
)
def test_bad_arguments_are_refused_by_name(kwargs, argument):
    with pytest.raises(ValueError, match=f"`{argument}`"):
        ConstantThenPolynomialDecay(**kwargs)


def test_drives_an_optimizer_in_fit():
    # 3 steps of 4: the rate read at step 3 is halfway down the decay (the closed form).
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(ConstantThenPolynomialDecay(0.1, 4, 0.0)), loss="mse")
    model.fit(np.ones((6, 2)), np.zeros((6, 1)), batch_size=2, epochs=1, verbose=0)
    assert int(keras.ops.convert_to_numpy(model.optimizer.iterations)) == 3
    assert float(model.optimizer.learning_rate) == pytest.approx(0.05, rel=1e-6)
