"""Per-class subsets of a labelled set, for the classification protocols of the two-head and
OLÉ experiments: a per-class train/test split of the same classes, a cap on training images
per class (scarce data, OLÉ paper Fig. 5) and a long-tailed subset (imbalanced data,
dissertation Sec. 5.4.2). Every function takes `[N]` labels and returns sorted int64 indices.
"""

import numpy as np

from tf_svmax import checks


def _classes(labels):
    labels = np.asarray(labels).reshape(-1)
    if not len(labels):
        # No class to take members from: a subset of nothing is an upstream mistake (an empty
        # split or a filter that kept nothing), refused by name rather than returned empty.
        raise ValueError(
            checks.invalid(
                "labels", "a non-empty array of integer class labels", f"<shape {labels.shape}>"
            )
        )
    if labels.dtype.kind not in "iu":
        raise ValueError(checks.invalid("labels", "integer class labels", labels.dtype))
    return labels, np.unique(labels)


def _check_fraction(fraction, arg):
    value = checks.check_non_negative_number(fraction, arg)
    if not 0 < value < 1:
        raise ValueError(checks.invalid(arg, "a float in (0, 1)", fraction))
    return value


def split_per_class(labels, *, test_fraction, seed=0):
    """`(train_indices, test_indices)`: each class's members, shuffled with `seed`, split so
    that ``round(test_fraction * n)`` of them (at least 1, and at least 1 left to train) test.

    Raises ValueError for a class with fewer than 2 members (it cannot be in both splits).
    """
    labels, classes = _classes(labels)
    fraction = _check_fraction(test_fraction, "test_fraction")
    rng = np.random.default_rng(checks.check_non_negative_int(seed, "seed"))
    train, test = [], []
    for c in classes:
        members = rng.permutation(np.flatnonzero(labels == c))
        if len(members) < 2:
            raise ValueError(
                checks.invalid("labels", "at least 2 members per class", f"class {c}: 1")
            )
        n_test = min(max(1, round(fraction * len(members))), len(members) - 1)
        test.append(members[:n_test])
        train.append(members[n_test:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


def cap_per_class(labels, *, images_per_class, seed=0):
    """Indices of at most `images_per_class` members of each class (a seeded random choice)."""
    labels, classes = _classes(labels)
    cap = checks.check_positive_int(images_per_class, "images_per_class")
    rng = np.random.default_rng(checks.check_non_negative_int(seed, "seed"))
    kept = [rng.permutation(np.flatnonzero(labels == c))[:cap] for c in classes]
    return np.sort(np.concatenate(kept))


def long_tail_fractions(num_classes, *, imbalance_ratio, seed=0):
    """The share of its members each class keeps in a long-tailed subset: the class at rank r
    of a seeded permutation keeps ``imbalance_ratio ** (-r / (num_classes - 1))``, an
    exponential profile from 1 (head) down to ``1 / imbalance_ratio`` (tail)."""
    num_classes = checks.check_positive_int(num_classes, "num_classes")
    ratio = checks.check_non_negative_number(imbalance_ratio, "imbalance_ratio")
    if ratio < 1:
        raise ValueError(checks.invalid("imbalance_ratio", "a float >= 1", imbalance_ratio))
    rank = np.random.default_rng(checks.check_non_negative_int(seed, "seed")).permutation(
        num_classes
    )
    return ratio ** (-rank / max(num_classes - 1, 1))


def long_tailed_subset(labels, fractions, *, min_per_class=1, seed=0):
    """Indices keeping ``max(min_per_class, round(fractions[i] * n_i))`` members of the i-th
    class (classes in sorted order; never more than it has), chosen with `seed`."""
    labels, classes = _classes(labels)
    fractions = np.asarray(fractions, dtype=np.float64).reshape(-1)
    if fractions.shape != classes.shape or not np.all((fractions > 0) & (fractions <= 1)):
        raise ValueError(
            checks.invalid(
                "fractions", f"{len(classes)} values in (0, 1], one per class", fractions
            )
        )
    floor = checks.check_positive_int(min_per_class, "min_per_class")
    rng = np.random.default_rng(checks.check_non_negative_int(seed, "seed"))
    kept = []
    for c, share in zip(classes, fractions, strict=True):
        members = rng.permutation(np.flatnonzero(labels == c))
        kept.append(members[: max(floor, round(share * len(members)))])
    return np.sort(np.concatenate(kept))
