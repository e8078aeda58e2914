"""The data a retrieval run reads: the split (in memory for the embedded sets, image paths for
the file datasets), the loaders of image files at the resolved side, and what the P x K sampler
draws from (the files, or with --decoded_cache their decoded, resized images)."""

from tf_svmax import data
from trainers.harness import runtime
from trainers.harness.config import dataset_refusals
from trainers.harness.image_data import file_loaders
from trainers.harness.loop import RunFailed, image_file_diagnosis
from trainers.retrieval.config import DATASETS


def read_split(config):
    """``(train, test)``, each ``(images, labels)`` of an embedded set or ``(paths, labels)`` of
    a file dataset. Reads only --dataset and --data_dir, which resolving leaves as they are, so
    a run reads its split before its P is settled with the split's training classes
    (`trainers.retrieval.config.with_training_classes`)."""
    dataset = DATASETS[config.dataset]
    if dataset.embedded:
        split = dataset.load()
    else:
        with dataset_refusals(config):
            split = data.read_dataset(config.dataset, config.data_dir)
    return split["train"], split["test"]


def with_loaders(config, train, test):
    """``(train, test, input_shape, loaders)`` of a resolved config's split: the embedded sets'
    own image shape and no loaders, or the resolved --input_size and `file_loaders` at it."""
    if DATASETS[config.dataset].embedded:
        return train, test, train[0].shape[1:], None
    size = config.input_size
    return train, test, (size, size, 3), file_loaders(size)


def load_split(config):
    """`with_loaders` of the resolved `config`'s `read_split`."""
    return with_loaders(config, *read_split(config))


def train_features(config, train_paths, input_shape, loaders):
    """What the P x K sampler draws from and its `map_fn`: the files and the decoding loader,
    or with --decoded_cache the decoded, resized images (built here, eagerly, once) and the
    crop-and-flip loader."""
    if not config.decoded_cache:
        return train_paths, loaders[0] if loaders else None
    try:
        cache = data.decoded_image_cache(train_paths, input_size=input_shape[0])
    except runtime.input_errors() as error:
        cause = image_file_diagnosis(train_paths)(error)
        if cause is None:
            raise
        raise RunFailed(f"{cause} (while building --decoded_cache)") from error
    return cache, data.cached_image_loader(input_size=input_shape[0])
