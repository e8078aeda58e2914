"""The 2-D mixture of Gaussians on a circle: the unsupervised GAN benchmark of Metz et al. 2017
(unrolled GANs), VEEGAN (Srivastava et al. 2017) and the SVMax paper (seed `000`, Sec. 4.2):
`num_modes` equally weighted isotropic Gaussians of standard deviation `std` whose means lie on
a circle of radius `radius`, the first at angle 0 (the public unrolled-GAN code's layout:
8 modes, radius 2, std 0.02).
"""

import numpy as np
import tensorflow as tf

from tf_svmax.ops import _checks


def _check(num_modes, radius, std):
    num_modes = _checks.check_positive_int(num_modes, "num_modes")
    radius = _checks.check_non_negative_number(radius, "radius")
    std = _checks.check_non_negative_number(std, "std")
    if radius == 0 or std == 0:
        name, value = ("radius", radius) if radius == 0 else ("std", std)
        raise ValueError(_checks.invalid(name, "a float > 0", value))
    return num_modes, radius, std


def gaussian_ring(num_modes=8, radius=2.0):
    """`[num_modes, 2]` float64 mode centres: ``radius * (cos, sin)(2 pi i / num_modes)``."""
    num_modes, radius, _ = _check(num_modes, radius, 1.0)
    angles = 2 * np.pi * np.arange(num_modes) / num_modes
    return radius * np.stack([np.cos(angles), np.sin(angles)], axis=1)


def sample_gaussian_ring(num_points, *, seed=0, num_modes=8, radius=2.0, std=0.02):
    """``(points, modes)``: `[num_points, 2]` float32 draws of the mixture (modes uniform) and the
    `[num_points]` int64 mode each came from."""
    num_points = _checks.check_positive_int(num_points, "num_points")
    num_modes, radius, std = _check(num_modes, radius, std)
    rng = np.random.default_rng(seed)
    modes = rng.integers(0, num_modes, num_points)
    points = gaussian_ring(num_modes, radius)[modes] + std * rng.standard_normal((num_points, 2))
    return points.astype(np.float32), modes.astype(np.int64)


def gaussian_ring_batch(batch_size, seed, *, num_modes=8, radius=2.0, std=0.02):
    """One `[batch_size, 2]` float32 batch of the mixture from a stateless `seed` (a `[2]` int
    tensor): the same seed gives the same batch, so a pipeline indexed by step resumes exactly.
    Usable inside `tf.data` and `tf.function`."""
    batch_size = _checks.check_positive_int(batch_size, "batch_size")
    num_modes, radius, std = _check(num_modes, radius, std)
    centres = tf.constant(gaussian_ring(num_modes, radius), tf.float32)
    mode_seed, noise_seed = tf.unstack(
        tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), 2)
    )
    modes = tf.random.stateless_uniform(
        [batch_size], mode_seed, minval=0, maxval=num_modes, dtype=tf.int32
    )
    noise = tf.random.stateless_normal([batch_size, 2], noise_seed, stddev=std)
    return tf.gather(centres, modes) + noise
