"""The Gaussian ring against its closed form and the public unrolled-GAN layout."""

import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

from tf_svmax.data import (
    gaussian_ring,
    gaussian_ring_batch,
    random_mode_weights,
    sample_gaussian_ring,
)


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


# The unrolled-GAN notebook's active data default: `dset.random_distribution()` draws one
# U(0, 1) weight per mode and normalises them (mixture_gaussian.py, random_distribution).
def test_random_mode_weights_have_the_notebooks_law():
    draws = np.stack([random_mode_weights(8, seed=s) for s in range(4000)])
    np.testing.assert_allclose(draws.sum(axis=1), 1.0, rtol=1e-12)
    assert (draws > 0).all()
    # The same law by Monte Carlo from numpy directly: U / sum(U).
    u = np.random.default_rng(123).uniform(size=(200000, 8))
    reference = u / u.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(draws.mean(axis=0), reference.mean(axis=0), atol=0.003)
    np.testing.assert_allclose(draws.std(axis=0).mean(), reference.std(axis=0).mean(), rtol=0.05)
    np.testing.assert_array_equal(random_mode_weights(8, seed=7), random_mode_weights(8, seed=7))
    assert not np.array_equal(random_mode_weights(8, seed=7), random_mode_weights(8, seed=8))


WEIGHTS = np.array([0.30, 0.02, 0.10, 0.05, 0.25, 0.08, 0.12, 0.08])


def _chi_square_p(counts, weights):
    return stats.chisquare(counts, np.sum(counts) * np.asarray(weights)).pvalue


def test_weighted_numpy_samples_follow_the_weights():
    _, modes = sample_gaussian_ring(200000, seed=2, weights=WEIGHTS)
    assert _chi_square_p(np.bincount(modes, minlength=8), WEIGHTS) > 1e-3
    _, uniform = sample_gaussian_ring(200000, seed=2, weights=np.full(8, 1 / 8))
    assert _chi_square_p(np.bincount(uniform, minlength=8), WEIGHTS) < 1e-12  # the test can fail


def test_weighted_tf_batch_follows_the_weights_and_is_stateless():
    a = gaussian_ring_batch(200000, tf.constant([3, 4]), weights=WEIGHTS).numpy()
    b = gaussian_ring_batch(200000, tf.constant([3, 4]), weights=WEIGHTS).numpy()
    np.testing.assert_array_equal(a, b)
    nearest = np.argmin(((a[:, None] - gaussian_ring()[None]) ** 2).sum(-1), axis=1)
    assert _chi_square_p(np.bincount(nearest, minlength=8), WEIGHTS) > 1e-3


def test_no_weights_keeps_the_uniform_draws_bit_for_bit():
    # Unweighted runs recorded before weights existed must replay: the draw is unchanged.
    seed = tf.constant([5, 6])
    centres = tf.constant(gaussian_ring(), tf.float32)
    mode_seed, noise_seed = tf.unstack(
        tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), 2)
    )
    modes = tf.random.stateless_uniform([64], mode_seed, minval=0, maxval=8, dtype=tf.int32)
    expected = tf.gather(centres, modes) + tf.random.stateless_normal(
        [64, 2], noise_seed, stddev=0.02
    )
    np.testing.assert_array_equal(gaussian_ring_batch(64, seed), expected)
    rng = np.random.default_rng(9)
    modes = rng.integers(0, 8, 64)
    points = gaussian_ring()[modes] + 0.02 * rng.standard_normal((64, 2))
    np.testing.assert_array_equal(sample_gaussian_ring(64, seed=9)[0], points.astype(np.float32))


@pytest.mark.parametrize(
    "weights, message",
    [
        (np.full(7, 1 / 7), r"`weights`. Expected 8 non-negative finite numbers"),
        (np.array([1, -1, 1, 1, 1, 1, 1, 1.0]), r"`weights`"),
        (np.array([1, np.nan, 1, 1, 1, 1, 1, 1.0]), r"`weights`"),
        (np.zeros(8), r"`weights`. Expected .* with a positive sum"),
    ],
)
def test_bad_weights_are_refused(weights, message):
    with pytest.raises(ValueError, match=message):
        sample_gaussian_ring(10, weights=weights)
    with pytest.raises(ValueError, match=message):
        gaussian_ring_batch(10, tf.constant([0, 0]), weights=weights)
