"""The embedded default data set: scikit-learn's bundled `load_digits` (1,797 real 8 x 8 images,
no download), as an open-set retrieval split (train on digits 0-4, test on 5-9) or as a
closed-set split of all 10 digits (the stand-in for MNIST in the SVMax paper's circle figure)."""

import numpy as np

from tf_svmax import checks
from tf_svmax.data.subsets import split_per_class


def _digits():
    """scikit-learn's digits as `[1797, 8, 8, 1]` float32 in [0, 1] and int64 labels."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.images.astype(np.float32) / 16.0)[..., np.newaxis]
    return images, digits.target.astype(np.int64)


def load_digits_open_set(train_classes=(0, 1, 2, 3, 4)):
    """Returns `{"train": (images, labels), "test": (images, labels)}`.

    Images are `[n, 8, 8, 1]` float32 in [0, 1] (scikit-learn's 0..16 grey levels / 16); labels
    are the digits. Test classes are disjoint from training classes (open-set retrieval).
    """
    images, labels = _digits()
    train = np.isin(labels, np.asarray(train_classes))
    return {"train": (images[train], labels[train]), "test": (images[~train], labels[~train])}


def load_digits_closed_set(*, test_fraction=0.2, seed=0, image_size=None):
    """Returns `{"train": (images, labels), "test": (images, labels)}` over all 10 digits.

    A closed-set split: every class is in both splits, each class's images shuffled with `seed`
    and ``round(test_fraction * n)`` of them held out for testing (`data.split_per_class`).
    The default gives 1,437 training and 360 test images (the SVMax original plots 320 test
    images of MNIST). Images are `[n, s, s, 1]` float32 in [0, 1] with s = 8, or, with
    `image_size`, bilinearly resized to `image_size x image_size` (28 gives MNIST's shape).
    """
    if image_size is not None:
        image_size = checks.check_positive_int(image_size, "image_size")
    images, labels = _digits()
    train, test = split_per_class(labels, test_fraction=test_fraction, seed=seed)
    if image_size is not None and image_size != images.shape[1]:
        import tensorflow as tf

        resized = tf.image.resize(images, (image_size, image_size), method="bilinear")
        # Bilinear weights are convex, so the result stays in [0, 1] up to float32 rounding;
        # the clip removes that rounding so the documented range holds exactly.
        images = np.clip(resized.numpy(), 0.0, 1.0).astype(np.float32)
    return {"train": (images[train], labels[train]), "test": (images[test], labels[test])}
