import numpy as np
import pytest
import tensorflow as tf

from tests.data import fake_trees
from tf_svmax import data


def test_default_resize_keeps_the_originals_ratio():
    assert data.default_resize_size(224) == 256
    assert data.default_resize_size(299) == 342


def test_decode_jpeg_and_png(tmp_path):
    for fmt in ("jpeg", "png"):
        path = str(tmp_path / f"x.{fmt}")
        fake_trees.write_image(path, 3, size=(12, 10), fmt=fmt)
        image = data.decode_image(path).numpy()
        assert image.shape == (12, 10, 3) and image.dtype == np.float32
        assert 0 <= image.min() and image.max() <= 255
    png = data.decode_image(str(tmp_path / "x.png")).numpy()
    expected = np.random.default_rng(3).integers(0, 256, size=(12, 10, 3), dtype=np.uint8)
    np.testing.assert_array_equal(png, expected)  # lossless: exact pixels


def test_test_transform_is_the_central_crop_of_the_resize(rng):
    image = tf.constant(rng.uniform(0, 255, size=(17, 23, 3)).astype(np.float32))
    out = data.test_transform(image, input_size=8, resize_size=12).numpy()
    resized = tf.image.resize(image, [12, 12]).numpy()
    np.testing.assert_array_equal(out, resized[2:10, 2:10])


def test_train_transform_is_a_window_of_the_resize_maybe_flipped(rng):
    image = tf.constant(rng.uniform(0, 255, size=(17, 23, 3)).astype(np.float32))
    resized = tf.image.resize(image, [12, 12]).numpy()
    windows = [
        w
        for i in range(5)
        for j in range(5)
        for w in (resized[i : i + 8, j : j + 8], resized[i : i + 8, j : j + 8][:, ::-1])
    ]
    flips = set()
    for _ in range(20):
        out = data.train_transform(image, input_size=8, resize_size=12).numpy()
        matches = [k for k, w in enumerate(windows) if np.array_equal(out, w)]
        assert matches
        flips.add(matches[0] % 2)
    assert flips == {0, 1}  # both flipped and unflipped crops occur


def test_bad_sizes():
    with pytest.raises(ValueError, match=r"argument `resize_size`.*>= input_size"):
        data.image_loader(training=True, input_size=224, resize_size=200)
    with pytest.raises(ValueError, match=r"argument `input_size`"):
        data.image_loader(training=False, input_size=0)


def test_pk_batches_from_a_fake_cub_tree(tmp_path):
    split = data.read_cub200(fake_trees.make_cub(str(tmp_path)))
    paths, labels = split["train"]
    loader = data.image_loader(training=True, input_size=8, resize_size=10)
    batches = data.pk_batches(paths, labels, batch_p=3, batch_k=2, seed=0, map_fn=loader)
    images, batch_labels = next(iter(batches))
    assert images.shape == (6, 8, 8, 3)
    assert set(batch_labels.numpy().tolist()) == {1, 2, 100}
    test = data.image_dataset(*split["test"], input_size=8, resize_size=10, batch_size=4)
    got = np.concatenate([y.numpy() for _, y in test])
    np.testing.assert_array_equal(got, split["test"][1])  # order kept for evaluation


def test_unreadable_images_names_corrupt_and_missing_files(tmp_path):
    good = tmp_path / "good.jpg"
    fake_trees.write_image(str(good), 0)
    corrupt = tmp_path / "corrupt.jpg"
    corrupt.write_bytes(good.read_bytes()[:30] + b"garbage" * 20)
    missing = tmp_path / "missing.png"
    paths = [str(good), str(corrupt), str(missing), str(good)]
    bad = data.unreadable_images(paths)
    assert [path for path, _ in bad] == [str(corrupt), str(missing)]
    assert data.unreadable_images(paths, limit=1) == bad[:1]
    assert data.unreadable_images([str(good)]) == []


def _windows(resized, input_size):
    """Every crop `random_crop_and_flip` can return from `resized`, flipped and not."""
    side = resized.shape[0] - input_size + 1
    return [
        w
        for i in range(side)
        for j in range(side)
        for w in (
            resized[i : i + input_size, j : j + input_size],
            resized[i : i + input_size, j : j + input_size][:, ::-1],
        )
    ]


def test_decoded_image_cache_rows_are_the_rounded_resized_images(tmp_path):
    split = data.read_cub200(fake_trees.make_cub(str(tmp_path)))
    paths = split["train"][0]
    cache = data.decoded_image_cache(paths, input_size=8, resize_size=10).numpy()
    assert cache.shape == (len(paths), 10, 10, 3) and cache.dtype == np.uint8
    for path, row in zip(paths, cache, strict=True):
        resized = tf.image.resize(data.decode_image(path), [10, 10]).numpy()
        np.testing.assert_array_equal(row, np.round(resized).astype(np.uint8))
        assert np.abs(row - resized).max() <= 0.5  # uint8 rounding only
    empty = data.decoded_image_cache([], input_size=8, resize_size=10)
    assert empty.shape == (0, 10, 10, 3)
    with pytest.raises(ValueError, match=r"argument `resize_size`"):
        data.decoded_image_cache(paths, input_size=8, resize_size=6)


@pytest.mark.parametrize("parallel", [1, tf.data.AUTOTUNE])
def test_cached_pipeline_matches_the_uncached_one(tmp_path, parallel):
    """Same seed: the same samples in the same order, and each image a crop + flip of the same
    resized image. The crop offsets and flips are drawn by unseeded ops in both pipelines, so
    the definition is the distribution: every image is one of the windows of its file's resized
    image (the cached one exactly of the uint8-rounded image), both flips occur."""
    split = data.read_cub200(fake_trees.make_cub(str(tmp_path), per_class=4))
    paths, labels = split["train"]
    cache = data.decoded_image_cache(paths, input_size=8, resize_size=10)
    kwargs = dict(batch_p=3, batch_k=2, seed=5, num_parallel_calls=parallel)
    # The uncached pipeline on file indices: which file each row came from.
    rows = data.pk_batches(np.arange(len(paths)), labels, **kwargs)
    uncached = data.pk_batches(
        paths,
        labels,
        map_fn=data.image_loader(training=True, input_size=8, resize_size=10),
        **kwargs,
    )
    cached = data.pk_batches(cache, labels, map_fn=data.cached_image_loader(input_size=8), **kwargs)
    resized = [tf.image.resize(data.decode_image(p), [10, 10]).numpy() for p in paths]
    flips = set()
    for (index, y0), (x1, y1), (x2, y2) in zip(
        rows.take(4), uncached.take(4), cached.take(4), strict=True
    ):
        np.testing.assert_array_equal(y0, y1)
        np.testing.assert_array_equal(y0, y2)
        assert x2.dtype == x1.dtype == tf.float32 and x2.shape == x1.shape == (6, 8, 8, 3)
        for i, a, b in zip(index.numpy(), x1.numpy(), x2.numpy(), strict=True):
            exact = _windows(resized[i], 8)
            rounded = _windows(np.round(resized[i]), 8)
            assert any(np.array_equal(a, w) for w in exact)
            matches = [k for k, w in enumerate(rounded) if np.array_equal(b, w)]
            assert matches
            flips.add(matches[0] % 2)
    assert flips == {0, 1}


def test_pk_batches_num_parallel_calls_keeps_the_order(tmp_path):
    split = data.read_cub200(fake_trees.make_cub(str(tmp_path)))
    paths, labels = split["train"]
    loader = data.image_loader(training=False, input_size=8, resize_size=10)  # deterministic
    runs = [
        [
            x.numpy()
            for x, _ in data.pk_batches(
                paths, labels, batch_p=3, batch_k=2, seed=0, map_fn=loader, num_parallel_calls=n
            ).take(3)
        ]
        for n in (1, 2, tf.data.AUTOTUNE)
    ]
    for run in runs[1:]:
        np.testing.assert_array_equal(np.stack(run), np.stack(runs[0]))
