"""P x K batches from memory (NumPy, any backend): the sampling rules of the originals'
`sample_k_fids_for_pid`, checked by counting, and the resume property (batch n depends only on
the seed and n)."""

import numpy as np
import pytest

from tf_svmax.data import PKBatches, PKIndexSampler

pytestmark = pytest.mark.all_backends

LABELS = np.array([7] * 10 + [3] * 2 + [9] * 5 + [1] * 7 + [4] * 1 + [8] * 4)  # 6 classes


def _batches(p, k, seed, n, labels=LABELS):
    sampler = PKIndexSampler(labels, batch_p=p, batch_k=k, seed=seed)
    return [sampler(i) for i in range(n)]


def test_batches_are_p_distinct_classes_of_k_consecutive_rows():
    for batch in _batches(2, 4, 0, 30):
        blocks = LABELS[batch].reshape(2, 4)
        assert np.all(blocks == blocks[:, :1]) and blocks[0, 0] != blocks[1, 0]


def test_each_pass_uses_floor_c_over_p_times_p_distinct_classes_and_reshuffles():
    # 6 classes, P = 2: a pass is 3 batches holding 6 distinct classes.
    batches = _batches(2, 3, 1, 60)
    passes = [
        tuple(np.concatenate([LABELS[b].reshape(2, 3)[:, 0] for b in batches[i : i + 3]]))
        for i in range(0, 60, 3)
    ]
    assert all(sorted(p) == [1, 3, 4, 7, 8, 9] for p in passes)
    assert len(set(passes)) > 5  # the class order changes between passes


def test_small_classes_repeat_every_sample_equally_often():
    for batch in _batches(2, 4, 2, 60):
        for block in batch.reshape(2, 4):
            size = int((LABELS == LABELS[block[0]]).sum())
            _, counts = np.unique(block, return_counts=True)
            if size >= 4:
                assert counts.max() == 1
            else:  # tiled to ceil(K / size) * size and shuffled
                assert counts.max() <= -(-4 // size)
                if 4 % size == 0:
                    assert np.all(counts == 4 // size)


def test_samples_of_a_large_class_are_drawn_uniformly():
    labels = np.array([0] * 20 + [1] * 20)
    seen = np.zeros(40)
    for batch in _batches(2, 5, 3, 400, labels):
        np.add.at(seen, batch, 1)
    expected = 400 * 5 / 20
    assert np.all(np.abs(seen - expected) < 6 * np.sqrt(expected))


def test_seeds_reproduce_and_differ():
    a, b, c = _batches(2, 4, 5, 20), _batches(2, 4, 5, 20), _batches(2, 4, 6, 20)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


def test_a_resumed_dataset_reads_the_batches_an_uninterrupted_one_would():
    features = np.arange(len(LABELS), dtype=np.float32)[:, None] * np.ones((1, 3), np.float32)
    whole = PKBatches(features, LABELS, batch_p=3, batch_k=2, seed=0)
    resumed = PKBatches(features, LABELS, batch_p=3, batch_k=2, seed=0, start_batch=7)
    for i in range(5):
        (x, y), (x2, y2) = whole[7 + i], resumed[i]
        np.testing.assert_array_equal(x, x2)
        np.testing.assert_array_equal(y, y2)
        np.testing.assert_array_equal(LABELS[x[:, 0].astype(int)], y)  # rows match labels
    assert whole.num_batches is None  # endless
    _, named = PKBatches(features, LABELS, batch_p=3, batch_k=2, seed=0, outputs=("a", "b"))[0]
    assert set(named) == {"a", "b"} and np.array_equal(named["a"], named["b"])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(batch_p=7, batch_k=2), r"argument `batch_p`.*number of classes \(6\)"),
        (dict(batch_p=0, batch_k=2), "argument `batch_p`"),
        (dict(batch_p=2, batch_k=2, seed=-1), "argument `seed`"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PKIndexSampler(LABELS, **kwargs)
