"""The losses' shared masks and masked reductions on every backend, against NumPy."""

import numpy as np
import pytest

from tests import backends
from tf_svmax.losses import _common

pytestmark = pytest.mark.all_backends

LABELS = np.array([3, 1, 3, 2, 1, 3], dtype="int32")


def _same(labels):
    return labels[:, None] == labels[None, :]


def test_label_and_anchor_masks():
    same, positives = (backends.to_numpy(m) for m in _common.label_masks(LABELS))
    expected = _same(LABELS)
    np.testing.assert_array_equal(same, expected)
    np.testing.assert_array_equal(positives, expected & ~np.eye(6, dtype=bool))
    positives, negatives = (backends.to_numpy(m) for m in _common.anchor_masks(LABELS, (2, 3)))
    rows = expected[2:5]
    itself = np.eye(6, dtype=bool)[2:5]
    np.testing.assert_array_equal(positives, rows & ~itself)
    np.testing.assert_array_equal(negatives, ~rows)


def test_positive_pair_count_is_sum_of_n_c_times_n_c_minus_one():
    count = backends.to_numpy(_common.positive_pair_count(LABELS, "float32"))
    assert count == 3 * 2 + 2 * 1 + 1 * 0


def test_masked_max_and_min_and_their_empty_rows(rng):
    data = rng.normal(size=(4, 5)).astype("float32")
    mask = rng.random((4, 5)) < 0.5
    mask[1] = False  # an empty row: the row's min (for max) and max (for min)
    got_max = backends.to_numpy(_common.masked_max(data, mask))[:, 0]
    got_min = backends.to_numpy(_common.masked_min(data, mask))[:, 0]
    for i in range(4):
        if mask[i].any():
            assert got_max[i] == pytest.approx(data[i][mask[i]].max(), abs=1e-6)
            assert got_min[i] == pytest.approx(data[i][mask[i]].min(), abs=1e-6)
        else:
            assert got_max[i] == pytest.approx(data[i].min(), abs=1e-6)
            assert got_min[i] == pytest.approx(data[i].max(), abs=1e-6)


def test_safe_mean_over_is_zero_with_a_zero_gradient_for_no_items():
    def fn(total):
        return _common.safe_mean_over(total, np.float32(0.0))

    value, (grad,) = backends.value_and_grad(fn, np.float32(2.5))
    assert value == 0.0 and grad == 0.0
    assert backends.to_numpy(_common.safe_mean_over(np.float32(3.0), 4)) == 0.75


def test_labels_that_are_not_numbers_are_refused():
    with pytest.raises(ValueError, match="y_true"):
        _common.flat_labels(np.zeros((3, 2), "int32"), np.zeros((3, 4), "float32"))
    with pytest.raises(ValueError, match="one label per row of `y_pred`"):
        _common.flat_labels(np.zeros(3, "int32"), np.zeros((4, 4), "float32"))


def test_the_counts_warn_on_no_backend():
    """Keras' PyTorch `count_nonzero` transposes its result (`Tensor.T`), which PyTorch
    deprecates on a 0-D tensor with a UserWarning at every call: a full count must not go
    through it (issue 59: the README's triplet example printed it)."""
    import warnings

    from tf_svmax import losses

    embeddings = np.random.default_rng(0).normal(size=(6, 4)).astype("float32")
    valid = np.array([True, False, True, True, True, True])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pairs = _common.positive_pair_count(LABELS, "float32")
        anchors = _common.anchor_count(LABELS, (1, 3), valid)
        for loss in (losses.triplet_semihard_loss, losses.lifted_struct_loss):
            loss(LABELS[:3], embeddings[:3], ref_labels=LABELS, ref_embeddings=embeddings)
            loss(LABELS, embeddings)
    assert backends.to_numpy(pairs) == 8 and backends.to_numpy(anchors) == 2
