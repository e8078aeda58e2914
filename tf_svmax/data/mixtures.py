"""The 2-D mixture of Gaussians on a circle: the unsupervised GAN benchmark of Metz et al. 2017
(unrolled GANs), VEEGAN (Srivastava et al. 2017) and the SVMax paper (seed `000`, Sec. 4.2):
`num_modes` isotropic Gaussians of standard deviation `std` whose means lie on a circle of
radius `radius`, the first at angle 0 (the public unrolled-GAN code's layout: 8 modes, radius 2,
std 0.02). The modes are equally weighted unless `weights` are given; the unrolled-GAN
notebook's active default draws them at random (`random_mode_weights`).
"""

import numpy as np
import tensorflow as tf

from tf_svmax import checks


def _check(num_modes, radius, std):
    num_modes = checks.check_positive_int(num_modes, "num_modes")
    radius = checks.check_non_negative_number(radius, "radius")
    std = checks.check_non_negative_number(std, "std")
    if radius == 0 or std == 0:
        name, value = ("radius", radius) if radius == 0 else ("std", std)
        raise ValueError(checks.invalid(name, "a float > 0", value))
    return num_modes, radius, std


# The validator lives in `tf_svmax.checks` (the NumPy-only metrics, `mode_coverage`, use it on
# every backend without importing this tf.data module).
check_weights = checks.mode_weights


def random_mode_weights(num_modes=8, *, seed=0):
    """Mode weights with the law of the unrolled-GAN notebook's `random_distribution()`: one
    U(0, 1) draw per mode, normalised to sum 1 (float64). The notebook never seeds its draw;
    here `seed` fixes it."""
    num_modes = checks.check_positive_int(num_modes, "num_modes")
    seed = checks.check_non_negative_int(seed, "seed")
    u = np.random.default_rng([seed, num_modes]).uniform(size=num_modes)
    return u / u.sum()


def gaussian_ring(num_modes=8, radius=2.0):
    """`[num_modes, 2]` float64 mode centres: ``radius * (cos, sin)(2 pi i / num_modes)``."""
    num_modes, radius, _ = _check(num_modes, radius, 1.0)
    angles = 2 * np.pi * np.arange(num_modes) / num_modes
    return radius * np.stack([np.cos(angles), np.sin(angles)], axis=1)


def sample_gaussian_ring(num_points, *, seed=0, num_modes=8, radius=2.0, std=0.02, weights=None):
    """``(points, modes)``: `[num_points, 2]` float32 draws of the mixture (modes uniform, or
    drawn with probabilities `weights`) and the `[num_points]` int64 mode each came from."""
    num_points = checks.check_positive_int(num_points, "num_points")
    num_modes, radius, std = _check(num_modes, radius, std)
    weights = check_weights(weights, num_modes)
    rng = np.random.default_rng(seed)
    if weights is None:  # kept as it was: unweighted samples replay bit for bit
        modes = rng.integers(0, num_modes, num_points)
    else:
        modes = rng.choice(num_modes, num_points, p=weights)
    points = gaussian_ring(num_modes, radius)[modes] + std * rng.standard_normal((num_points, 2))
    return points.astype(np.float32), modes.astype(np.int64)


def gaussian_ring_batch(batch_size, seed, *, num_modes=8, radius=2.0, std=0.02, weights=None):
    """One `[batch_size, 2]` float32 batch of the mixture (modes uniform, or drawn with
    probabilities `weights`) from a stateless `seed` (a `[2]` int tensor): the same seed gives
    the same batch, so a pipeline indexed by step resumes exactly. Usable inside `tf.data` and
    `tf.function`."""
    batch_size = checks.check_positive_int(batch_size, "batch_size")
    num_modes, radius, std = _check(num_modes, radius, std)
    weights = check_weights(weights, num_modes)
    centres = tf.constant(gaussian_ring(num_modes, radius), tf.float32)
    mode_seed, noise_seed = tf.unstack(
        tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), 2)
    )
    if weights is None:  # kept as it was: unweighted runs replay bit for bit
        modes = tf.random.stateless_uniform(
            [batch_size], mode_seed, minval=0, maxval=num_modes, dtype=tf.int32
        )
    else:
        # log(0) = -inf: a zero-weight mode is never drawn, as categorical sampling intends.
        with np.errstate(divide="ignore"):
            logits = tf.constant(np.log(weights)[None], tf.float32)
        modes = tf.random.stateless_categorical(logits, batch_size, mode_seed, dtype=tf.int32)[0]
    noise = tf.random.stateless_normal([batch_size, 2], noise_seed, stddev=std)
    return tf.gather(centres, modes) + noise
