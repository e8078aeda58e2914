import itertools

import keras
import numpy as np
import pytest

from tf_svmax import data, losses


def _batches(labels, p, k, seed, n):
    ds = data.pk_index_batches(labels, batch_p=p, batch_k=k, seed=seed)
    return [b.numpy() for b in itertools.islice(ds, n)]


LABELS = np.array([7] * 10 + [3] * 2 + [9] * 5 + [1] * 7 + [4] * 1 + [8] * 4)  # 6 classes


def test_batches_are_p_classes_of_k_consecutive_rows():
    for batch in _batches(LABELS, 2, 4, 0, 30):
        blocks = LABELS[batch].reshape(2, 4)
        assert np.all(blocks == blocks[:, :1])  # K consecutive rows of one class
        assert blocks[0, 0] != blocks[1, 0]  # P distinct classes


def test_each_pass_uses_distinct_classes_and_reshuffles():
    # 6 classes, P = 4: each pass uses floor(6 / 4) * 4 = 4 distinct classes in one batch.
    passes = [tuple(LABELS[b].reshape(4, 3)[:, 0]) for b in _batches(LABELS, 4, 3, 1, 40)]
    assert all(len(set(p)) == 4 for p in passes)
    assert len(set(passes)) > 5  # the class order changes between passes


def test_seeded_batches_are_reproducible_and_seeds_differ():
    a, b = _batches(LABELS, 2, 4, 5, 20), _batches(LABELS, 2, 4, 5, 20)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    c = _batches(LABELS, 2, 4, 6, 20)
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


def test_small_classes_repeat_every_sample_equally_often():
    for batch in _batches(LABELS, 2, 4, 2, 60):
        for block in batch.reshape(2, 4):
            label = LABELS[block[0]]
            size = int((LABELS == label).sum())
            _, counts = np.unique(block, return_counts=True)
            if size >= 4:
                assert counts.max() == 1  # K distinct samples
            else:
                # Tiled to ceil(K / size) * size and shuffled: no sample more than ceil(K/size).
                assert counts.max() <= -(-4 // size)
                if 4 % size == 0:
                    assert np.all(counts == 4 // size)


def test_samples_of_a_large_class_are_drawn_uniformly():
    labels = np.array([0] * 20 + [1] * 20)
    seen = np.zeros(40)
    for batch in _batches(labels, 2, 5, 3, 400):
        np.add.at(seen, batch, 1)
    expected = 400 * 5 / 20
    assert np.all(np.abs(seen - expected) < 6 * np.sqrt(expected))


def test_pk_batches_gather_features_and_apply_map_fn():
    features = np.arange(len(LABELS), dtype=np.float32)[:, None] * np.ones((1, 3), np.float32)
    x, y = next(iter(data.pk_batches(features, LABELS, batch_p=3, batch_k=2, seed=0)))
    np.testing.assert_array_equal(LABELS[x.numpy()[:, 0].astype(int)], y.numpy())
    x2, y2 = next(
        iter(
            data.pk_batches(
                features, LABELS, batch_p=3, batch_k=2, seed=0, map_fn=lambda f: f * 2.0
            )
        )
    )
    np.testing.assert_array_equal(x2.numpy(), x.numpy() * 2)
    np.testing.assert_array_equal(y2.numpy(), y.numpy())


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"argument `batch_p`.*number of classes \(6\)"):
        data.pk_index_batches(LABELS, batch_p=7, batch_k=2)
    with pytest.raises(ValueError, match=r"argument `batch_k`"):
        data.pk_index_batches(LABELS, batch_p=2, batch_k=0)
    with pytest.raises(ValueError, match=r"argument `seed`"):
        data.pk_index_batches(LABELS, batch_p=2, batch_k=2, seed=1.5)
    with pytest.raises(ValueError, match=r"argument `labels`.*one label per sample"):
        data.pk_batches(np.zeros((3, 2)), LABELS, batch_p=2, batch_k=2)


def test_digits_open_set_split():
    split = data.load_digits_open_set()
    (x_train, y_train), (x_test, y_test) = split["train"], split["test"]
    assert len(x_train) + len(x_test) == 1797
    assert x_train.shape[1:] == (8, 8, 1) and x_train.dtype == np.float32
    assert 0.0 <= x_train.min() and x_train.max() <= 1.0
    assert set(np.unique(y_train)) == {0, 1, 2, 3, 4} and set(np.unique(y_test)) == {5, 6, 7, 8, 9}


def test_pk_batches_feed_the_pk_losses_in_fit():
    (x, y) = data.load_digits_open_set()["train"]
    inputs = keras.Input((8, 8, 1))
    hidden = keras.layers.Dense(16)(keras.layers.Flatten()(inputs))
    model = keras.Model(inputs, keras.layers.UnitNormalization()(hidden))
    model.compile(
        "sgd",
        loss=losses.RegularizedLoss(losses.PKContrastiveLoss(), [losses.SVMaxLoss(lambda_=1.0)]),
    )
    batches = data.pk_batches(x, y, batch_p=4, batch_k=4, seed=0)
    history = model.fit(batches, steps_per_epoch=3, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def test_start_batch_continues_the_same_stream():
    pk_index_batches, pk_batches = data.pk_index_batches, data.pk_batches
    labels = np.repeat(np.arange(7), 3)
    full = [b.numpy() for b in pk_index_batches(labels, batch_p=3, batch_k=2, seed=5).take(9)]
    x = np.arange(len(labels))
    resumed = pk_batches(x, labels, batch_p=3, batch_k=2, seed=5, start_batch=4).take(5)
    for expected, (features, _) in zip(full[4:], resumed, strict=True):
        np.testing.assert_array_equal(features.numpy(), x[expected])
