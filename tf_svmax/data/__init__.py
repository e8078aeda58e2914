"""Input: P x K sampling, dataset readers, image preprocessing, the embedded sets (rendered
glyphs, a disjoint glyph pretraining set, digits as open- and closed-set splits), the 2-D
Gaussian ring.

On every backend, without TensorFlow: the embedded sets, the dataset readers (lists of files),
the subsets, and P x K batches from memory (`PKIndexSampler`, `PKBatches`, a
`keras.utils.PyDataset`). The tf.data pipelines (`pk_batches`, `pk_index_batches`, image
decoding and augmentation, the Gaussian ring's samplers) need TensorFlow installed; they work
beside any backend and import TensorFlow when one of their names is first read (where it is
not installed, reading one raises an ImportError naming the install command).
"""

import importlib
import typing

from tf_svmax import _backend
from tf_svmax.data.datasets import (
    DatasetFormatError,
    read_cars196,
    read_cub200,
    read_dataset,
    read_fgvr_lists,
    read_image_folder,
    read_sop,
)
from tf_svmax.data.digits import load_digits_closed_set, load_digits_open_set
from tf_svmax.data.glyphs import load_glyphs_open_set
from tf_svmax.data.glyphs_pretrain import load_glyph_pretraining
from tf_svmax.data.pk_sampler import PKBatches, PKIndexSampler
from tf_svmax.data.subsets import (
    cap_per_class,
    long_tail_fractions,
    long_tailed_subset,
    split_per_class,
)

if typing.TYPE_CHECKING:  # the tf.data names for static readers (the API docs): see __getattr__
    from tf_svmax.data.augment import random_view
    from tf_svmax.data.mixtures import (
        gaussian_ring,
        gaussian_ring_batch,
        random_mode_weights,
        sample_gaussian_ring,
    )
    from tf_svmax.data.preprocessing import (
        cached_image_loader,
        decode_image,
        decoded_image_cache,
        default_resize_size,
        image_dataset,
        image_loader,
        random_crop_and_flip,
        test_transform,
        train_transform,
        unreadable_images,
    )
    from tf_svmax.data.sampler import pk_batches, pk_index_batches

# The names whose modules compute with TensorFlow (tf.data, tf.image): module -> names.
_TF_DATA = {
    "augment": ("random_view",),
    "mixtures": (
        "gaussian_ring",
        "gaussian_ring_batch",
        "random_mode_weights",
        "sample_gaussian_ring",
    ),
    "preprocessing": (
        "cached_image_loader",
        "decode_image",
        "decoded_image_cache",
        "default_resize_size",
        "image_dataset",
        "image_loader",
        "random_crop_and_flip",
        "test_transform",
        "train_transform",
        "unreadable_images",
    ),
    "sampler": ("pk_batches", "pk_index_batches"),
}
_TF_OWNER = {name: module for module, names in _TF_DATA.items() for name in names}


def __getattr__(name):
    """Imports a tf.data name's module on first use (TensorFlow then), binding its names."""
    module = _TF_OWNER.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    _backend.require_tensorflow(f"tf_svmax.data.{name}")
    loaded = importlib.import_module(f"{__name__}.{module}")
    globals().update({n: getattr(loaded, n) for n in _TF_DATA[module]})
    return globals()[name]


__all__ = [
    "PKBatches",
    "PKIndexSampler",
    "DatasetFormatError",
    "cached_image_loader",
    "decoded_image_cache",
    "random_crop_and_flip",
    "cap_per_class",
    "long_tail_fractions",
    "long_tailed_subset",
    "split_per_class",
    "decode_image",
    "gaussian_ring",
    "gaussian_ring_batch",
    "default_resize_size",
    "image_dataset",
    "image_loader",
    "load_digits_closed_set",
    "load_digits_open_set",
    "load_glyph_pretraining",
    "load_glyphs_open_set",
    "pk_batches",
    "pk_index_batches",
    "random_view",
    "read_cars196",
    "read_cub200",
    "read_dataset",
    "read_fgvr_lists",
    "read_image_folder",
    "read_sop",
    "random_mode_weights",
    "sample_gaussian_ring",
    "test_transform",
    "train_transform",
    "unreadable_images",
]
