"""The Gaussian ring against its closed form and the public unrolled-GAN layout."""

import numpy as np
import pytest
import tensorflow as tf

from tf_svmax.data import gaussian_ring, gaussian_ring_batch, sample_gaussian_ring


def test_centres_are_the_unrolled_gan_layout():
    # andrewliao11/unrolled-gans: radius * (cos, sin)(i * 2 pi / 8), i = 0..7.
    expected = [[2 * np.cos(i * np.pi / 4), 2 * np.sin(i * np.pi / 4)] for i in range(8)]
    np.testing.assert_allclose(gaussian_ring(8, 2.0), expected, atol=1e-15)


def test_numpy_samples_follow_the_mixture():
    points, modes = sample_gaussian_ring(40000, seed=1, std=0.05)
    assert points.dtype == np.float32 and points.shape == (40000, 2)
    np.testing.assert_allclose(np.bincount(modes) / 40000, np.full(8, 1 / 8), atol=0.01)
    offsets = points - gaussian_ring()[modes]
    np.testing.assert_allclose(offsets.std(axis=0), [0.05, 0.05], rtol=0.03)
    np.testing.assert_allclose(offsets.mean(axis=0), [0, 0], atol=1e-3)


def test_tf_batch_is_stateless_and_follows_the_mixture():
    a = gaussian_ring_batch(20000, tf.constant([3, 4]), std=0.05)
    b = gaussian_ring_batch(20000, tf.constant([3, 4]), std=0.05)
    c = gaussian_ring_batch(20000, tf.constant([3, 5]), std=0.05)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)
    centres = gaussian_ring()
    nearest = np.argmin(((a.numpy()[:, None] - centres[None]) ** 2).sum(-1), axis=1)
    np.testing.assert_allclose(np.bincount(nearest, minlength=8) / 20000, 1 / 8, atol=0.015)
    np.testing.assert_allclose((a.numpy() - centres[nearest]).std(axis=0), 0.05, rtol=0.05)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match=r"argument `radius`"):
        gaussian_ring(8, 0.0)
    with pytest.raises(ValueError, match=r"argument `num_modes`"):
        gaussian_ring(0)
    with pytest.raises(ValueError, match=r"argument `std`"):
        sample_gaussian_ring(10, std=0.0)
    with pytest.raises(ValueError, match=r"argument `batch_size`"):
        gaussian_ring_batch(0, tf.constant([0, 0]))
