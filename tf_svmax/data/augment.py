"""Stateless image augmentations for contrastive views (`tf.function`-safe; the same seed
gives the same view, so a resumed run sees the views it would have seen).

MoCo v2's recipe reduced to what small grey images keep: a random resized crop (area share in
[0.35, 1], aspect in [3/4, 4/3]), random brightness and contrast, and Gaussian pixel noise. No
flips: mirrored glyphs are other characters.
"""

import tensorflow as tf


def random_view(images, seed, *, min_area=0.35, noise=0.05):
    """One augmented view of a `[B, H, W, C]` float batch in [0, 1] from a stateless `[2]` seed."""
    images = tf.convert_to_tensor(images, tf.float32)
    b = tf.shape(images)[0]
    size = images.shape[1:3]
    s = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), 6)
    area = tf.random.stateless_uniform([b], s[0], min_area, 1.0)
    log_ratio = tf.random.stateless_uniform([b], s[1], tf.math.log(3 / 4), tf.math.log(4 / 3))
    ratio = tf.exp(log_ratio)
    h = tf.minimum(tf.sqrt(area / ratio), 1.0)
    w = tf.minimum(tf.sqrt(area * ratio), 1.0)
    y0 = tf.random.stateless_uniform([b], s[2]) * (1.0 - h)
    x0 = tf.random.stateless_uniform([b], s[3]) * (1.0 - w)
    boxes = tf.stack([y0, x0, y0 + h, x0 + w], axis=1)
    views = tf.image.crop_and_resize(images, boxes, tf.range(b), size)
    scale = tf.random.stateless_uniform([b, 1, 1, 1], s[4], 0.6, 1.4)  # contrast
    shift = tf.random.stateless_uniform([b, 1, 1, 1], s[5], -0.2, 0.2)  # brightness
    mean = tf.reduce_mean(views, axis=[1, 2, 3], keepdims=True)
    views = (views - mean) * scale + mean + shift
    views += noise * tf.random.stateless_normal(tf.shape(views), s[0] + 7)
    return tf.clip_by_value(views, 0.0, 1.0)
