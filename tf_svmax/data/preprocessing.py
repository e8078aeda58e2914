"""Image decoding and the originals' augmentation (ahmdtaha/tf_retrieval_baseline).

Training: resize to a square of `resize_size` (aspect ratio not kept, as in the originals),
random `input_size` crop, random horizontal flip. Test: the same resize, then the central
`input_size` crop. Output is float32 RGB in [0, 255]; the backbone's own normalisation
(`keras.applications.*.preprocess_input`) belongs to the model.

The originals use 256 -> 224 for 224-pixel backbones; `default_resize_size` keeps that ratio for
other input sizes (299 -> 342).

Decoded-image cache: decoding a JPEG costs about three times the resize, crop and flip after it
(`benchmarks/input_pipeline.py`), yet only the crop and the flip are random. `decoded_image_cache`
decodes and resizes a split once into a uint8 tensor (`resize_size**2 * 3` bytes per image:
1.15 GB for CUB-200's 5,864 training images at 256), and `cached_image_loader` then applies
`random_crop_and_flip` to its rows: the same transform on the same resized image, whose pixels
are rounded to the nearest integer (at most 0.5 grey levels from the uncached pipeline's).
"""

import numpy as np
import tensorflow as tf

from tf_svmax import checks


def default_resize_size(input_size):
    """The pre-crop size for a backbone input: 256 for 224 (the originals), same ratio else."""
    return int(round(checks.check_positive_int(input_size, "input_size") * 256 / 224))


def decode_image(path):
    """Reads an image file (JPEG, PNG, BMP, GIF) as `[h, w, 3]` float32 in [0, 255]."""
    image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
    return tf.cast(image, tf.float32)


def unreadable_images(paths, *, limit=5):
    """The first `limit` of `paths` that cannot be read and decoded as `decode_image` does,
    each as ``(path, reason)``. A corrupt file stops a `tf.data` pipeline with the decoder's
    message ("jpeg::Uncompress failed") and no file name; this finds the file (one eager
    decode per path: run it after such a failure, not before every run)."""
    limit = checks.check_positive_int(limit, "limit")
    bad = []
    for path in paths:
        path = path.decode() if isinstance(path, bytes) else str(path)
        try:
            decode_image(path)
        except (tf.errors.InvalidArgumentError, tf.errors.NotFoundError) as error:
            bad.append((path, str(error).strip().splitlines()[0][:200]))
            if len(bad) == limit:
                break
    return bad


def _sizes(input_size, resize_size):
    input_size = checks.check_positive_int(input_size, "input_size")
    if resize_size is None:
        resize_size = default_resize_size(input_size)
    resize_size = checks.check_positive_int(resize_size, "resize_size")
    if resize_size < input_size:
        raise ValueError(
            checks.invalid("resize_size", f"an int >= input_size ({input_size})", resize_size)
        )
    return input_size, resize_size


def random_crop_and_flip(image, *, input_size=224):
    """The random part of `train_transform`: an `input_size` square crop at a uniformly random
    offset, then a horizontal flip with probability 1/2."""
    input_size = checks.check_positive_int(input_size, "input_size")
    image = tf.image.random_crop(image, [input_size, input_size, 3])
    return tf.image.random_flip_left_right(image)


def train_transform(image, *, input_size=224, resize_size=None):
    """Resize to `resize_size` squared, random `input_size` crop, random horizontal flip."""
    input_size, resize_size = _sizes(input_size, resize_size)
    image = tf.image.resize(image, [resize_size, resize_size])
    return random_crop_and_flip(image, input_size=input_size)


def test_transform(image, *, input_size=224, resize_size=None):
    """Resize to `resize_size` squared, then the central `input_size` crop."""
    input_size, resize_size = _sizes(input_size, resize_size)
    image = tf.image.resize(image, [resize_size, resize_size])
    offset = (resize_size - input_size) // 2
    return tf.image.crop_to_bounding_box(image, offset, offset, input_size, input_size)


def image_loader(*, training, input_size=224, resize_size=None):
    """A `path -> image` function for `pk_batches(map_fn=...)` or `Dataset.map`."""
    input_size, resize_size = _sizes(input_size, resize_size)
    transform = train_transform if training else test_transform

    def load(path):
        return transform(decode_image(path), input_size=input_size, resize_size=resize_size)

    return load


def _resized_uint8(path, resize_size):
    image = tf.image.resize(decode_image(path), [resize_size, resize_size])
    # Bilinear resizing of [0, 255] values stays in [0, 255]; the clip only guards the cast,
    # and rounding (not truncation) keeps every pixel within 0.5 of the float image.
    return tf.cast(tf.round(tf.clip_by_value(image, 0.0, 255.0)), tf.uint8)


def decoded_image_cache(
    paths, *, input_size=224, resize_size=None, num_parallel_calls=tf.data.AUTOTUNE
):
    """Decodes and resizes `paths` once: a `[N, resize_size, resize_size, 3]` uint8 tensor.

    Row i is ``round(resize(decode_image(paths[i])))``, the image `train_transform` crops
    from; feed the rows to `pk_batches` with ``map_fn=cached_image_loader(...)``.

    Args:
      paths: `[N]` image file paths.
      input_size, resize_size: As in `train_transform` (`resize_size` defaults to
        `default_resize_size(input_size)`).
      num_parallel_calls: Parallel decodes while building (tf.data's).

    Returns:
      A uint8 `tf.Tensor` of `N * resize_size**2 * 3` bytes (twice that at the peak while
      building).
    """
    _, resize_size = _sizes(input_size, resize_size)
    paths = np.asarray(paths, dtype=str).reshape(-1)
    if not len(paths):
        return tf.zeros([0, resize_size, resize_size, 3], tf.uint8)
    images = tf.data.Dataset.from_tensor_slices(paths).map(
        lambda p: _resized_uint8(p, resize_size),
        num_parallel_calls=num_parallel_calls,
        deterministic=True,
    )
    # One concatenation of the batches (peak: twice the cache, while concatenating);
    # `tf.constant` of a filled NumPy array would hold two copies afterwards. On the host:
    # tf.data reads it there, and an accelerator's memory is for the model.
    with tf.device("/cpu:0"):
        return tf.concat(list(images.batch(256)), axis=0)


def cached_image_loader(*, input_size=224):
    """A `row -> image` function for `pk_batches(decoded_image_cache(...), map_fn=...)`: the
    float32 row, randomly cropped and flipped as `train_transform` does."""
    input_size = checks.check_positive_int(input_size, "input_size")

    def load(row):
        # uint8 -> float32: the dtype and range `train_transform` returns.
        return random_crop_and_flip(tf.cast(row, tf.float32), input_size=input_size)

    return load


def image_dataset(paths, labels, *, input_size=224, resize_size=None, batch_size=64):
    """Test-time `(image, label)` batches of `paths` in order (center crop, no shuffling)."""
    load = image_loader(training=False, input_size=input_size, resize_size=resize_size)
    data = tf.data.Dataset.from_tensor_slices((paths, labels))
    data = data.map(lambda p, y: (load(p), y), num_parallel_calls=tf.data.AUTOTUNE)
    return data.batch(checks.check_positive_int(batch_size, "batch_size")).prefetch(
        tf.data.AUTOTUNE
    )
