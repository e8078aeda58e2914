"""The small backbones and their weights files (`tf_svmax/models/backbones.py`)."""

import keras
import numpy as np
import pytest

from tf_svmax import models

SHAPE = (32, 32, 1)


def _conv_bn_weights(k, c_in, c_out):
    """Weights of a bias-free k x k convolution followed by batch normalization (gamma, beta,
    moving mean and variance)."""
    return k * k * c_in * c_out + 4 * c_out


def test_small_resnet_is_resnet18s_layout_at_a_quarter_of_its_widths():
    model = models.build_backbone("small_resnet", input_shape=SHAPE)
    widths = models.SMALL_RESNET_WIDTHS
    assert widths == (16, 32, 64, 128)
    # Counted by hand from the layout: stem, then per stage two basic blocks (two 3 x 3 conv-BN)
    # and a 1 x 1 projection where the width or the stride changes.
    expected = _conv_bn_weights(3, 1, widths[0])
    c_in = widths[0]
    for stage, width in enumerate(widths):
        for block in range(2):
            expected += _conv_bn_weights(3, c_in, width) + _conv_bn_weights(3, width, width)
            if block == 0 and (stage > 0 or c_in != width):
                expected += _conv_bn_weights(1, c_in, width)
            c_in = width
    assert model.count_params() == expected
    assert model.output.shape[1:] == (128,)
    feature_map = models.feature_map("small_resnet", keras.Input(SHAPE))
    assert tuple(feature_map.shape[1:]) == (4, 4, 128)  # 32 / 2^3: three strided stages
    convs = [layer for layer in model.layers if isinstance(layer, keras.layers.Conv2D)]
    assert len([c for c in convs if c.kernel_size == (3, 3)]) == 1 + 4 * 2 * 2  # 17 + fc = 18


@pytest.mark.parametrize("backbone", models.SMALL_BACKBONES)
def test_a_backbone_weights_file_loads_into_the_embedding_and_two_head_models(backbone, tmp_path):
    keras.utils.set_random_seed(1)
    source = models.build_backbone(backbone, input_shape=SHAPE)
    rng = np.random.default_rng(0)
    # Distinct values everywhere (BN moving statistics included), so a weight loaded into the
    # wrong layer or left at its initial value shows.
    values = [rng.normal(size=w.shape).astype("float32") for w in source.weights]
    for w, v in zip(source.weights, values, strict=True):
        if "moving_variance" in w.path:
            v = np.abs(v) + 0.5
        w.assign(v)
    path = str(tmp_path / f"{backbone}.weights.h5")
    source.save_weights(path)

    keras.utils.set_random_seed(2)
    embedding = models.build_embedding_model(
        backbone, input_shape=SHAPE, embedding_dim=8, weights=path
    )
    backbone_weights = [w for w in embedding.weights if not w.path.startswith("embedding")]
    assert len(backbone_weights) == len(source.weights)
    for loaded, original in zip(backbone_weights, source.weights, strict=True):
        np.testing.assert_array_equal(loaded.numpy(), original.numpy())
    images = rng.uniform(size=(4, *SHAPE)).astype("float32")
    pooled = keras.Model(embedding.input, embedding.get_layer("embedding").input)
    # Random weights blow the deep network up (to ~1e17): a relative tolerance.
    np.testing.assert_allclose(pooled.predict(images, verbose=0), source(images), rtol=1e-4)

    two_head = models.build_two_head_model(
        backbone, input_shape=SHAPE, num_classes=3, embedding_dim=8, weights=path
    )
    heads = ("logits", "embedding_dense")
    backbone_weights = [w for w in two_head.weights if not w.path.startswith(heads)]
    assert len(backbone_weights) == len(source.weights)
    for loaded, original in zip(backbone_weights, source.weights, strict=True):
        np.testing.assert_array_equal(loaded.numpy(), original.numpy())


def test_weights_files_that_do_not_fit_are_refused_by_name(tmp_path):
    path = str(tmp_path / "small_cnn.weights.h5")
    models.build_backbone("small_cnn", input_shape=SHAPE).save_weights(path)
    with pytest.raises(ValueError, match="does not fit backbone 'small_resnet'"):
        models.build_embedding_model("small_resnet", input_shape=SHAPE, weights=path)
    with pytest.raises(ValueError, match="does not fit backbone 'small_cnn'.*another number"):
        models.build_backbone("small_cnn", input_shape=(32, 32, 3), weights=path)
    with pytest.raises(FileNotFoundError, match="missing.weights.h5"):
        models.build_embedding_model(
            "small_cnn_bn", input_shape=SHAPE, weights=str(tmp_path / "missing.weights.h5")
        )
    with pytest.raises(ValueError, match="`weights`.*None or a .weights.h5 file for small_cnn"):
        models.build_embedding_model("small_cnn", input_shape=SHAPE, weights="imagenet")
    with pytest.raises(ValueError, match="`backbone`"):
        models.build_backbone("resnet50", input_shape=(32, 32, 3))
