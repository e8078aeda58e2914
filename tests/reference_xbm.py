"""Float64 NumPy references of `tf_svmax.losses.CrossBatchMemory` and of the losses' reference
rows: the losses' values for the `b` anchors that are the rows ``offset .. offset + b - 1``
(default: the first `b`) of the reference set (x, labels), e.g. batch ∪ memory. Shared by
tests/losses/test_xbm.py (TensorFlow), tests/losses/test_xbm_backends.py and
tests/losses/test_reference_rows.py (every backend)."""

import math

import numpy as np

from tests import reference_ranking


def distances(x):
    x = np.asarray(x, np.float64)
    return np.sqrt(((x[:, None, :] - x[None, :, :]) ** 2).sum(-1))


def ref_semihard(labels, x, b, margin=1.0, offset=0):
    d, n = distances(x), len(x)
    terms, pairs = 0.0, 0
    for a in range(offset, offset + b):
        negatives = [d[a, k] for k in range(n) if labels[k] != labels[a]]
        for p in range(n):
            if p == a or labels[p] != labels[a]:
                continue
            pairs += 1
            farther = [v for v in negatives if v > d[a, p]]
            chosen = min(farther) if farther else max(negatives)
            terms += max(margin + d[a, p] - chosen, 0.0)
    return terms / pairs if pairs else 0.0


def ref_hard(labels, x, b, margin=1.0, offset=0):
    d, n = distances(x), len(x)
    out = []
    for a in range(offset, offset + b):
        positives = [d[a, p] for p in range(n) if p != a and labels[p] == labels[a]]
        negatives = [d[a, k] for k in range(n) if labels[k] != labels[a]]
        out.append(max((max(positives) if positives else 0.0) - min(negatives) + margin, 0.0))
    return float(np.mean(out))


def ref_lifted(labels, x, b, margin=1.0, offset=0):
    d, n = distances(x), len(x)

    def negative_sum(i):
        return sum(math.exp(margin - d[i, k]) for k in range(n) if labels[k] != labels[i])

    total, pairs = 0.0, 0
    for i in range(offset, offset + b):
        for j in range(n):
            if j == i or labels[j] != labels[i]:
                continue
            pairs += 1
            objective = math.log(negative_sum(i) + negative_sum(j)) + d[i, j]
            total += 0.25 * max(objective, 0.0) ** 2
    return total / (pairs / 2.0) if pairs else 0.0


def ref_batch_hard(labels, x, b, margin=0.2, offset=0):
    # Independent loops (tests/reference_ranking.py): anchors' values only depend on their rows.
    return float(
        reference_ranking.batch_hard(labels, x, margin, "euclidean")[offset : offset + b].mean()
    )


def ref_contrastive(labels, x, b, pos_margin=1.0, neg_margin=0.5, offset=0):
    # Cosine similarities; each kind's terms over the b anchors divided by its number above 0.
    x = np.asarray(x, np.float64)
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    value = 0.0
    for positive in (True, False):
        terms = [
            max(pos_margin - x[a] @ x[r] if positive else x[a] @ x[r] - neg_margin, 0.0)
            for a in range(offset, offset + b)
            for r in range(len(x))
            if r != a and (labels[r] == labels[a]) == positive
        ]
        above = [t for t in terms if t > 0]
        value += sum(above) / len(above) if above else 0.0
    return value


def random_batch(rng, b=6, dim=4, classes=3):
    """`b` unit rows of `dim` and their labels, with at least two classes (every anchor has a
    negative)."""
    x = rng.standard_normal((b, dim)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    y = rng.integers(0, classes, b).astype(np.int64)
    y[:2] = [0, 1]
    return x, y
