"""`tf_svmax.losses.Loss`, the base of every loss, for a loss of one's own: the function and
its arguments, a nested loss and a function among them through a JSON config and a `.keras`
file (against NumPy), and what it refuses by name. On every backend (marked all_backends:
tests/conftest.py)."""

import json

import keras
import numpy as np
import pytest

from tests import backends
from tf_svmax import losses

pytestmark = pytest.mark.all_backends


def _weighted(y_true, y_pred, *, inner, weight, transform):
    """`weight` times the nested loss' per-sample values on ``transform(y_pred)``."""
    return weight * inner(y_true, transform(y_pred))


@keras.saving.register_keras_serializable(package="tests_loss_base")
class WeightedLoss(losses.Loss):
    """A loss of one's own: a function of a nested loss, a number and a function."""

    def __init__(self, inner, weight=1.0, transform=keras.activations.relu, name="w", **kwargs):
        fn_kwargs = dict(inner=inner, weight=weight, transform=transform)
        super().__init__(_weighted, fn_kwargs, name=name, **kwargs)


def _batch(rng):
    y = rng.standard_normal((6, 3)).astype("float32")
    x = rng.standard_normal((6, 3)).astype("float32")
    # The mean over the rows of 2.5 * mean_j (y - relu(x))^2, in float64.
    want = 2.5 * np.mean((y - np.maximum(x.astype(np.float64), 0.0)) ** 2)
    return y, x, want


def _loss():
    return WeightedLoss(keras.losses.MeanSquaredError(reduction=None), weight=2.5)


def test_the_function_gets_its_arguments_and_they_round_trip_through_json(rng):
    y, x, want = _batch(rng)
    loss = _loss()
    assert float(backends.to_numpy(loss(y, x))) == pytest.approx(want, rel=1e-6)
    config = json.loads(json.dumps(loss.get_config()))
    assert config["weight"] == 2.5 and config["inner"]["class_name"] == "MeanSquaredError"
    again = WeightedLoss.from_config(config)
    assert isinstance(again.inner, keras.losses.MeanSquaredError)
    assert again.inner.reduction is None and again.transform is keras.activations.relu
    assert json.loads(json.dumps(again.get_config())) == config
    assert float(backends.to_numpy(again(y, x))) == pytest.approx(want, rel=1e-6)


def test_a_keras_file_restores_the_loss_and_its_nested_loss(rng, tmp_path):
    y, x, want = _batch(rng)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Identity()])
    model.compile(loss=_loss())
    model.save(tmp_path / "model.keras")
    loaded = keras.models.load_model(tmp_path / "model.keras")
    assert isinstance(loaded.loss, WeightedLoss)
    assert isinstance(loaded.loss.inner, keras.losses.MeanSquaredError)
    assert loaded.loss.get_config() == model.loss.get_config()
    assert float(backends.to_numpy(loaded.loss(y, x))) == pytest.approx(want, rel=1e-6)


def test_an_unknown_argument_is_refused_when_constructed():
    with pytest.raises(TypeError, match="wieght"):
        WeightedLoss(keras.losses.MeanSquaredError(), wieght=2.0)


def test_without_a_function_a_loss_must_write_its_call():
    with pytest.raises(NotImplementedError):
        losses.Loss(name="bare")(np.zeros((2, 1)), np.zeros((2, 1)))


class _StateLoss(losses.Loss):
    """Declares a state layer argument and no way to find the layer again."""

    state_layer_arguments = {"state": "state_name"}

    def __init__(self, state=None, **kwargs):
        self.state = state
        super().__init__(**kwargs)


def test_a_state_layer_argument_needs_its_state_layer_from_config():
    config = {"name": "s", "reduction": "sum_over_batch_size", "state_name": "layer"}
    with pytest.raises(NotImplementedError, match="_StateLoss .*state_layer_from_config"):
        _StateLoss.from_config(config)
    # A config without the layer's name (one saved before it was recorded) loads.
    assert _StateLoss.from_config({"name": "s"}).state is None
