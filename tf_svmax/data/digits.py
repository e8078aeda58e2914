"""The embedded default data set: scikit-learn's bundled `load_digits` (1,797 real 8 x 8 images,
no download) as an open-set retrieval split: train on digits 0-4, test on 5-9."""

import numpy as np


def load_digits_open_set(train_classes=(0, 1, 2, 3, 4)):
    """Returns `{"train": (images, labels), "test": (images, labels)}`.

    Images are `[n, 8, 8, 1]` float32 in [0, 1] (scikit-learn's 0..16 grey levels / 16); labels
    are the digits. Test classes are disjoint from training classes (open-set retrieval).
    """
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.images.astype(np.float32) / 16.0)[..., np.newaxis]
    labels = digits.target.astype(np.int64)
    train = np.isin(labels, np.asarray(train_classes))
    return {"train": (images[train], labels[train]), "test": (images[~train], labels[~train])}
