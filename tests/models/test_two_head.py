"""The two-head model: heads on the pooled and the unpooled map (Eqs. 5.8, 5.9), on every
Keras backend (marked all_backends: tests/conftest.py)."""

import keras
import numpy as np
import pytest

from tests.backends import to_numpy
from tf_svmax import models

pytestmark = pytest.mark.all_backends


def test_logits_on_the_pooled_map_and_embedding_on_the_flattened_map():
    keras.utils.set_random_seed(0)
    model = models.build_two_head_model(
        "small_cnn_bn", input_shape=(16, 16, 1), num_classes=7, embedding_dim=12
    )
    x = np.random.default_rng(0).random((5, 16, 16, 1)).astype("float32")
    out = {name: to_numpy(value) for name, value in model(x, training=False).items()}
    assert out["logits"].shape == (5, 7) and out["embedding"].shape == (5, 12)
    np.testing.assert_allclose(np.linalg.norm(out["embedding"], axis=1), 1.0, rtol=1e-5)
    # Independent recomputation from the last feature map h.
    h_layer = model.get_layer("flatten_h").input
    h = to_numpy(keras.Model(model.input, h_layer)(x, training=False))
    pooled = h.mean(axis=(1, 2))
    np.testing.assert_allclose(out["features"], pooled, rtol=1e-5, atol=1e-6)
    w, b = model.get_layer("logits").get_weights()
    np.testing.assert_allclose(out["logits"], pooled @ w + b, rtol=1e-4, atol=1e-5)
    w, b = model.get_layer("embedding_dense").get_weights()
    e = h.reshape(5, -1) @ w + b
    np.testing.assert_allclose(
        out["embedding"], e / np.linalg.norm(e, axis=1, keepdims=True), rtol=1e-4, atol=1e-5
    )


def test_single_head_has_no_embedding_and_saves(tmp_path):
    model = models.build_two_head_model(
        "small_cnn", input_shape=(8, 8, 1), num_classes=3, embedding_head=False
    )
    assert set(model.output_names) == {"logits", "features"}
    path = str(tmp_path / "m.keras")
    model.save(path)
    x = np.ones((2, 8, 8, 1), "float32")
    np.testing.assert_allclose(
        to_numpy(keras.saving.load_model(path)(x)["logits"]),
        to_numpy(model(x)["logits"]),
        rtol=1e-6,
    )


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="num_classes"):
        models.build_two_head_model("small_cnn", input_shape=(8, 8, 1), num_classes=0)
    with pytest.raises(ValueError, match="backbone"):
        models.build_two_head_model("vgg", input_shape=(8, 8, 1), num_classes=2)
