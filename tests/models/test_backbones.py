"""The small backbones and their weights files (`tf_svmax/models/backbones.py`), on every Keras
backend (marked all_backends: tests/conftest.py)."""

import keras
import numpy as np
import pytest

from tests.backends import to_numpy
from tf_svmax import models

pytestmark = pytest.mark.all_backends

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
    np.testing.assert_allclose(
        pooled.predict(images, verbose=0), to_numpy(source(images)), rtol=1e-4
    )

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


def _mnist_toy_numpy(
    images, conv_kernel, conv_bias, dense_kernel, dense_bias, emb_kernel, emb_bias
):
    """The SVMax original's ToyModel forward pass in numpy: a valid 3 x 3 convolution as an
    einsum over explicit patches, ReLU, flatten in (height, width, channels) order, two dense
    layers (ReLU on the first), then rows divided by their L2 norms."""
    n, h, w, _ = images.shape
    k = conv_kernel.shape[0]
    patches = np.stack(
        [
            np.stack([images[:, i : i + k, j : j + k, :] for j in range(w - k + 1)], axis=1)
            for i in range(h - k + 1)
        ],
        axis=1,
    )  # [n, h', w', k, k, c]
    conv = np.maximum(np.einsum("nijabc,abco->nijo", patches, conv_kernel) + conv_bias, 0)
    hidden = np.maximum(conv.reshape(n, -1) @ dense_kernel + dense_bias, 0)
    out = hidden @ emb_kernel + emb_bias
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def test_mnist_toy_is_the_svmax_originals_toy_model():
    model = models.build_embedding_model("mnist_toy", input_shape=(28, 28, 1), embedding_dim=2)
    # By hand: conv 3*3*1*32 + 32; dense (26*26*32) * 128 + 128; embedding 128 * 2 + 2.
    assert model.count_params() == (9 * 32 + 32) + (26 * 26 * 32 * 128 + 128) + (128 * 2 + 2)
    assert model.count_params() == 2_769_602
    assert "mnist_toy" in models.BACKBONES and "mnist_toy" not in models.SMALL_BACKBONES
    rng = np.random.default_rng(0)
    # Random biases too (Keras initialises them to zero), so a missing or misplaced bias shows.
    values = [rng.normal(scale=0.1, size=w.shape).astype("float32") for w in model.weights]
    for weight, value in zip(model.weights, values, strict=True):
        weight.assign(value)
    images = rng.uniform(size=(5, 28, 28, 1)).astype("float32")
    ours = model.predict(images, verbose=0)
    expected = _mnist_toy_numpy(images.astype(np.float64), *[v.astype(np.float64) for v in values])
    assert ours.shape == (5, 2)
    np.testing.assert_allclose(ours, expected, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-6)
    h = models.feature_map("mnist_toy", keras.Input((28, 28, 1)))
    assert tuple(h.shape[1:]) == (26, 26, 32)
    with pytest.raises(ValueError, match="embedding_model"):
        models.pooled_feature_map(model)  # no global pooling: XML cannot use it


@pytest.mark.parametrize("weights", ["imagenet", "some.weights.h5"])
def test_mnist_toy_refuses_weights(weights):
    with pytest.raises(
        ValueError, match=r"argument `weights`.*None \(mnist_toy.*Received: weights="
    ):
        models.build_embedding_model("mnist_toy", input_shape=(28, 28, 1), weights=weights)


def test_unreadable_weights_files_are_refused_naming_the_file_and_what_is_wrong(tmp_path):
    """An empty, truncated or non-HDF5 file (h5py cannot open it) and a file of another format
    than .weights.h5 raise a ValueError naming the file, not h5py's bare OSError."""
    good = tmp_path / "small_cnn.weights.h5"
    models.build_backbone("small_cnn", input_shape=SHAPE).save_weights(str(good))
    content = good.read_bytes()
    cases = {
        "empty.weights.h5": (b"", "empty"),
        "truncated.weights.h5": (content[: len(content) // 2], "truncated"),
        "text.weights.h5": (b"not an HDF5 file\n", "not a readable HDF5"),
        "copy.bin": (content, "not a .weights.h5 file"),
    }
    for name, (payload, reason) in cases.items():
        path = tmp_path / name
        path.write_bytes(payload)
        with pytest.raises(ValueError, match=reason) as caught:
            models.build_embedding_model("small_cnn", input_shape=SHAPE, weights=str(path))
        assert str(path) in str(caught.value)
        assert isinstance(caught.value, models.WeightsFileError)
