"""Stateless contrastive views."""

import numpy as np
import tensorflow as tf

from tf_svmax.data import random_view


def test_views_are_seeded_in_range_and_differ_by_seed():
    rng = np.random.default_rng(0)
    images = rng.random((6, 32, 32, 1)).astype(np.float32)
    a = random_view(images, tf.constant([1, 2]))
    b = random_view(images, tf.constant([1, 2]))
    c = random_view(images, tf.constant([1, 3]))
    assert a.shape == images.shape and a.dtype == tf.float32
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)
    assert float(tf.reduce_min(a)) >= 0.0 and float(tf.reduce_max(a)) <= 1.0


def test_a_view_keeps_most_of_the_image():
    """A crop of >= 35 % of the area of a smooth image stays correlated with it."""
    y, x = np.mgrid[0:32, 0:32] / 31.0
    images = np.repeat((0.5 * (x + y))[None, :, :, None], 8, axis=0).astype(np.float32)
    views = random_view(images, tf.constant([0, 0]), noise=0.0).numpy()
    for v, im in zip(views, images, strict=False):
        assert np.corrcoef(v.ravel(), im.ravel())[0, 1] > 0.5
