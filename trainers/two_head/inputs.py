"""The data a two-head run reads: each class's images split into train and test (the
embedded sets) or read from --data_dir, labels 0 .. C-1 shared by both splits, the long-tail and
scarce-data subsets, and the loaders of image files at the resolved side."""

import os

import numpy as np

from tf_svmax import data
from trainers.harness.config import ConfigError, dataset_refusals
from trainers.harness.image_data import file_loaders
from trainers.two_head.config import DATA_SEED, DATASETS


def _subsets(config, train_labels, test_labels):
    """Indices into the train and test splits after the long-tail and scarce-data options."""
    train_idx, test_idx = np.arange(len(train_labels)), np.arange(len(test_labels))
    if config.imbalance_ratio > 1:
        classes = np.unique(train_labels)
        shares = data.long_tail_fractions(
            len(classes), imbalance_ratio=config.imbalance_ratio, seed=config.seed
        )
        train_idx = data.long_tailed_subset(train_labels, shares, min_per_class=2, seed=config.seed)
        test_shares = shares[np.searchsorted(classes, np.unique(test_labels))]
        test_idx = data.long_tailed_subset(test_labels, test_shares, seed=config.seed)
    if config.train_images_per_class is not None:
        kept = data.cap_per_class(
            train_labels[train_idx],
            images_per_class=config.train_images_per_class,
            seed=config.seed,
        )
        train_idx = train_idx[kept]
    return train_idx, test_idx


def load_split(config):
    """``{"train": (x, y), "test": (x, y), "input_shape", "loaders", "class_names",
    "num_classes"}`` of a resolved config, with labels 0 .. C-1 shared by both splits; `x` arrays
    for the embedded sets, paths otherwise (loaded at the resolved --input_size).

    Raises:
      ConfigError: --data_dir unreadable, or classes the run cannot train on (`check_classes`).
    """
    dataset = DATASETS[config.dataset]
    if dataset.embedded:
        images, labels, names = dataset.load()
        train_idx, test_idx = data.split_per_class(
            labels, test_fraction=config.test_fraction, seed=DATA_SEED
        )
        train, test = (images[train_idx], labels[train_idx]), (images[test_idx], labels[test_idx])
        input_shape, loaders = images.shape[1:], None
    else:
        if config.dataset == "fgvr":
            with dataset_refusals(config):
                split = data.read_fgvr_lists(config.data_dir, image_dir=config.image_dir)
        else:
            # Without both, read_image_folder would split the classes (open set) instead.
            if not all(os.path.isdir(os.path.join(config.data_dir, s)) for s in ("train", "test")):
                raise ConfigError(
                    "--dataset=folder needs --data_dir/train/<class>/<image> and "
                    "--data_dir/test/<class>/<image> for classification (the same classes in "
                    f"both); {config.data_dir!r} lacks train/ or test/."
                )
            with dataset_refusals(config):
                split = data.read_image_folder(config.data_dir)
        train, test = split["train"], split["test"]
        input_shape = (config.input_size, config.input_size, 3)
        loaders = file_loaders(config.input_size)
        names = split.get("class_names")
    classes = np.unique(train[1])
    check_classes(config, classes, np.unique(test[1]))
    train_idx, test_idx = _subsets(config, train[1], test[1])
    train = (train[0][train_idx], np.searchsorted(classes, train[1][train_idx]))
    test = (test[0][test_idx], np.searchsorted(classes, test[1][test_idx]))
    if names is not None:
        names = [names[c] for c in classes]
    return {
        "train": train,
        "test": test,
        "input_shape": tuple(int(s) for s in input_shape),
        "loaders": loaders,
        "class_names": names,
        "num_classes": len(classes),
    }


def check_classes(config, train_classes, test_classes):
    """Raises ConfigError unless every test class has training images (classification needs
    the same classes in both splits) and P is at most the number of classes: the checks of a
    resolved config that need the data."""
    missing = np.setdiff1d(test_classes, train_classes)
    if len(missing):
        raise ConfigError(
            f"--dataset={config.dataset}: {len(missing)} test classes have no training image "
            f"(e.g. label {missing[0]}); classification needs the same classes in both splits."
        )
    if config.batch_p > len(train_classes):
        raise ConfigError(
            f"--batch_p={config.batch_p} exceeds the {len(train_classes)} classes of "
            f"--dataset={config.dataset}."
        )
