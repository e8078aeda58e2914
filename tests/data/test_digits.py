"""The digits splits, checked against scikit-learn's own arrays and a numpy bilinear resize."""

import numpy as np
import pytest
from sklearn.datasets import load_digits

from tf_svmax import data


@pytest.fixture(scope="module")
def digits():
    raw = load_digits()
    return raw.images / 16.0, raw.target


def _rows(images):
    """Each image as a hashable key (its float32 bytes)."""
    return [np.asarray(x, np.float32).tobytes() for x in images.reshape(len(images), -1)]


def _bilinear(image, size):
    """Bilinear resize of one `[h, w]` image with half-pixel centres and edge clamping (the
    convention of TF 2's `tf.image.resize(method="bilinear")`), written out in numpy."""
    h, w = image.shape

    def axis(n_in):
        source = (np.arange(size) + 0.5) * (n_in / size) - 0.5
        source = np.clip(source, 0, n_in - 1)
        low = np.floor(source).astype(int)
        high = np.minimum(low + 1, n_in - 1)
        return low, high, source - low

    y0, y1, fy = axis(h)
    x0, x1, fx = axis(w)
    top = image[y0][:, x0] * (1 - fx) + image[y0][:, x1] * fx
    bottom = image[y1][:, x0] * (1 - fx) + image[y1][:, x1] * fx
    return top * (1 - fy[:, None]) + bottom * fy[:, None]


def test_closed_set_split_is_stratified_over_all_ten_classes(digits):
    images, labels = digits
    split = data.load_digits_closed_set()
    (x_train, y_train), (x_test, y_test) = split["train"], split["test"]
    assert set(np.unique(y_train)) == set(np.unique(y_test)) == set(range(10))
    per_class = np.bincount(labels, minlength=10)
    expected_test = np.round(0.2 * per_class).astype(int)
    np.testing.assert_array_equal(np.bincount(y_test, minlength=10), expected_test)
    np.testing.assert_array_equal(np.bincount(y_train, minlength=10), per_class - expected_test)
    assert len(x_test) >= 320  # the original plots 320 test images
    assert x_train.shape[1:] == (8, 8, 1) and x_train.dtype == np.float32
    assert y_train.dtype == np.int64
    assert 0.0 <= min(x_train.min(), x_test.min()) and max(x_train.max(), x_test.max()) <= 1.0


def test_closed_set_split_partitions_the_images_with_their_labels(digits):
    images, labels = digits
    split = data.load_digits_closed_set(seed=5)
    ours = sorted(
        (key, int(y))
        for part in ("train", "test")
        for key, y in zip(_rows(split[part][0]), split[part][1], strict=True)
    )
    assert ours == sorted(zip(_rows(images), labels.tolist(), strict=True))
    # scikit-learn's digits hold a few duplicate images; the split is disjoint by index, so an
    # image key may be on both sides only where the original set holds it more than once.
    shared = set(_rows(split["train"][0])) & set(_rows(split["test"][0]))
    counts = {}
    for key in _rows(images):
        counts[key] = counts.get(key, 0) + 1
    assert all(counts[key] > 1 for key in shared)


def test_closed_set_split_is_deterministic_per_seed():
    first, again = data.load_digits_closed_set(seed=3), data.load_digits_closed_set(seed=3)
    other = data.load_digits_closed_set(seed=4)
    for part in ("train", "test"):
        np.testing.assert_array_equal(first[part][0], again[part][0])
        np.testing.assert_array_equal(first[part][1], again[part][1])
    assert not np.array_equal(first["test"][0], other["test"][0])
    np.testing.assert_array_equal(
        np.bincount(first["test"][1], minlength=10), np.bincount(other["test"][1], minlength=10)
    )


def test_closed_set_resize_is_bilinear_to_28():
    small = data.load_digits_closed_set(seed=1)
    large = data.load_digits_closed_set(seed=1, image_size=28)
    for part in ("train", "test"):
        (x8, y8), (x28, y28) = small[part], large[part]
        assert x28.shape == (len(x8), 28, 28, 1) and x28.dtype == np.float32
        np.testing.assert_array_equal(y8, y28)
        assert 0.0 <= x28.min() and x28.max() <= 1.0
    for i in (0, 7, 100):
        np.testing.assert_allclose(
            large["test"][0][i, ..., 0], _bilinear(small["test"][0][i, ..., 0], 28), atol=1e-6
        )


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"test_fraction": 0.0}, "test_fraction"),
        ({"test_fraction": 1.0}, "test_fraction"),
        ({"seed": -1}, "seed"),
        ({"image_size": 0}, "image_size"),
        ({"image_size": 2.5}, "image_size"),
        ({"image_size": True}, "image_size"),
    ],
)
def test_closed_set_refuses_bad_arguments(kwargs, argument):
    with pytest.raises(ValueError, match=rf"argument `{argument}`.*Received: {argument}="):
        data.load_digits_closed_set(**kwargs)
