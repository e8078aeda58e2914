"""Per-class subsets, checked by counting members with numpy."""

import numpy as np
import pytest

from tf_svmax import data


def _counts(labels, indices):
    return np.bincount(np.asarray(labels)[indices], minlength=np.max(labels) + 1)


def test_split_per_class_holds_out_each_class_share_and_partitions():
    labels = np.repeat(np.arange(5), [4, 8, 12, 2, 40])
    train, test = data.split_per_class(labels, test_fraction=0.25, seed=3)
    assert not set(train) & set(test)
    assert sorted(np.concatenate([train, test])) == list(range(len(labels)))
    np.testing.assert_array_equal(_counts(labels, test), [1, 2, 3, 1, 10])
    # Another seed picks other members, the same counts.
    _, other = data.split_per_class(labels, test_fraction=0.25, seed=4)
    assert set(other) != set(test)
    np.testing.assert_array_equal(_counts(labels, other), [1, 2, 3, 1, 10])


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.1, float("nan")])
def test_split_per_class_refuses_fractions_outside_0_1(fraction):
    with pytest.raises(ValueError, match="test_fraction"):
        data.split_per_class(np.array([0, 0, 1, 1]), test_fraction=fraction)


def test_split_per_class_refuses_a_singleton_class_and_float_labels():
    with pytest.raises(ValueError, match="at least 2 members"):
        data.split_per_class(np.array([0, 0, 1]), test_fraction=0.5)
    with pytest.raises(ValueError, match="integer class labels"):
        data.split_per_class(np.array([0.0, 0.0, 1.0, 1.0]), test_fraction=0.5)


def test_cap_per_class_keeps_at_most_n_of_each():
    labels = np.repeat(np.arange(4), [1, 3, 5, 9])
    kept = data.cap_per_class(labels, images_per_class=3, seed=0)
    np.testing.assert_array_equal(_counts(labels, kept), [1, 3, 3, 3])
    assert len(set(kept)) == len(kept)


def test_long_tail_fractions_are_the_exponential_profile_of_a_permutation():
    shares = data.long_tail_fractions(5, imbalance_ratio=16.0, seed=1)
    np.testing.assert_allclose(sorted(shares), [1 / 16, 1 / 8, 1 / 4, 1 / 2, 1])
    np.testing.assert_allclose(data.long_tail_fractions(3, imbalance_ratio=1.0), [1, 1, 1])
    with pytest.raises(ValueError, match="imbalance_ratio"):
        data.long_tail_fractions(3, imbalance_ratio=0.5)


def test_long_tailed_subset_counts_with_floor():
    labels = np.repeat(np.arange(3), 40)
    kept = data.long_tailed_subset(labels, [1.0, 0.25, 0.01], min_per_class=2, seed=0)
    np.testing.assert_array_equal(_counts(labels, kept), [40, 10, 2])
    with pytest.raises(ValueError, match="fractions"):
        data.long_tailed_subset(labels, [1.0, 0.5], seed=0)


def test_empty_labels_are_refused_by_name():
    empty = np.array([], np.int64)
    with pytest.raises(ValueError, match=r"argument `labels`.*non-empty.*\(0,\)"):
        data.split_per_class(empty, test_fraction=0.5)
    with pytest.raises(ValueError, match=r"argument `labels`.*non-empty"):
        data.cap_per_class(empty, images_per_class=2)
    with pytest.raises(ValueError, match=r"argument `labels`.*non-empty"):
        data.long_tailed_subset(empty, [])
    with pytest.raises(ValueError, match=r"argument `labels`.*non-empty"):
        data.cap_per_class([], images_per_class=2)  # a float64 array to NumPy: still "empty"
