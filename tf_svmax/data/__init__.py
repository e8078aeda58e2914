"""tf.data input: P x K sampling, dataset readers, image preprocessing, the embedded sets
(rendered glyphs, a disjoint glyph pretraining set, digits as open- and closed-set splits), the
2-D Gaussian ring."""

# tf.data works beside any backend, but needs TensorFlow installed.
from tf_svmax import _backend

_backend.require_tensorflow("tf_svmax.data")

from tf_svmax.data.augment import random_view
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
from tf_svmax.data.subsets import (
    cap_per_class,
    long_tail_fractions,
    long_tailed_subset,
    split_per_class,
)

__all__ = [
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
