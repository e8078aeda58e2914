"""`CosineProxies` and `PrototypeHistograms` (tf_svmax/models/heads.py) on every Keras backend
(marked all_backends: tests/conftest.py), against float64 NumPy references: values, gradients,
a `fit` with the loss each is made for, and a `.keras` round trip."""

import keras
import numpy as np
import pytest

from tests.backends import RTOL32, assert_close, numpy_gradient, to_numpy, value_and_grad
from tf_svmax import losses, models

pytestmark = pytest.mark.all_backends


def _unit_rows(a):
    """tf.math.l2_normalize's rows: ``a / sqrt(max(|a|^2, 1e-12))`` (a zero row stays zero)."""
    return a / np.sqrt(np.maximum((a * a).sum(axis=1, keepdims=True), 1e-12))


def _cosines(x, p):
    return _unit_rows(x) @ _unit_rows(p).T


def _softmax(a):
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _histograms(feature_map, v, epsilon):
    """XML Eq. 2.4 per image: the mean over the map's locations of the softmax over prototypes."""
    x = feature_map.reshape(len(feature_map), -1, feature_map.shape[-1])
    return _softmax(epsilon * x @ v.T).mean(axis=1)


def test_cosine_proxies_are_the_cosines_to_each_proxy_and_a_zero_row_stays_zero(rng):
    x = rng.standard_normal((6, 5)).astype(np.float32)
    x[2] = 0.0
    layer = models.CosineProxies(4)
    layer.build((None, 5))
    proxies = to_numpy(layer.proxies).astype(np.float64)
    got = to_numpy(layer(x))
    assert got.shape == (6, 4)
    assert_close(got, _cosines(x.astype(np.float64), proxies), RTOL32)
    np.testing.assert_array_equal(got[2], 0.0)


def test_cosine_proxies_gradients_are_the_references(rng):
    x = rng.standard_normal((5, 3))
    p = rng.standard_normal((4, 3)).astype(np.float32)
    weights = rng.standard_normal((5, 4))
    layer = models.CosineProxies(4)
    layer.build((None, 3))
    layer.proxies.assign(p)

    def total(inputs):
        return keras.ops.sum(layer(inputs) * keras.ops.convert_to_tensor(weights, "float32"))

    _, (grad,) = value_and_grad(total, x.astype(np.float32))
    expected = numpy_gradient(lambda a: (_cosines(a, p.astype(np.float64)) * weights).sum(), x)
    assert_close(grad, expected, 1e-4)


def test_cosine_proxies_train_with_proxy_anchor_and_round_trip(rng, tmp_path):
    keras.utils.set_random_seed(0)
    x = rng.standard_normal((32, 6)).astype(np.float32)
    y = np.repeat(np.arange(4), 8)
    inputs = keras.Input((6,))
    model = keras.Model(inputs, models.CosineProxies(4)(keras.layers.Dense(8)(inputs)))
    model.compile(keras.optimizers.Adam(0.01), loss=losses.ProxyAnchorLoss())
    history = model.fit(x, y, batch_size=16, epochs=5, verbose=0).history["loss"]
    assert history[-1] < history[0]
    model.save(tmp_path / "m.keras")
    np.testing.assert_allclose(
        keras.models.load_model(tmp_path / "m.keras").predict(x, verbose=0),
        model.predict(x, verbose=0),
        atol=1e-6,
    )


@pytest.mark.parametrize("num_classes", [0, -1, 2.0, True])
def test_cosine_proxies_name_a_bad_class_count(num_classes):
    with pytest.raises(ValueError, match="argument `num_classes`"):
        models.CosineProxies(num_classes)


def test_prototype_histograms_are_eq_2_4_in_a_model_and_round_trip(rng, tmp_path):
    keras.utils.set_random_seed(0)
    maps = rng.standard_normal((3, 4, 4, 6)).astype(np.float32)
    inputs = keras.Input((4, 4, 6))
    layer = models.PrototypeHistograms(5, epsilon=2.0)
    model = keras.Model(inputs, layer(inputs))
    got = model.predict(maps, verbose=0)
    v = to_numpy(layer.prototypes).astype(np.float64)
    assert_close(got, _histograms(maps.astype(np.float64), v, 2.0), RTOL32)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=1e-6)
    model.save(tmp_path / "h.keras")
    np.testing.assert_allclose(
        keras.models.load_model(tmp_path / "h.keras").predict(maps, verbose=0), got, atol=1e-7
    )


def test_prototype_histograms_refuse_a_map_that_is_not_4d():
    with pytest.raises(ValueError, match="argument `input_shape`"):
        models.PrototypeHistograms(3).build((None, 6))
