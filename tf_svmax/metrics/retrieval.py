"""Retrieval evaluation: Recall@K, MAP@R and NMI of a test embedding (NumPy / scikit-learn).

Exact nearest neighbours are computed block by block (`block_size` queries against all
references), so memory stays at ``block_size x N`` distances, never ``N x N``. The query itself
is never its own neighbour. Ties in distance are broken by the smaller index (deterministic).

Queries whose class has no other member in the set cannot retrieve a positive: they are left
out of Recall@K and MAP@R and kept for NMI.
"""

import numpy as np

from tf_svmax.ops import _checks


def _check_inputs(embeddings, labels):
    x = np.asarray(embeddings, dtype=np.float32)
    y = np.asarray(labels).reshape(-1)
    if x.ndim != 2:
        raise ValueError(_checks.invalid("embeddings", "a [n, d] array", f"<shape {x.shape}>"))
    if len(y) != len(x):
        raise ValueError(
            f"Invalid value for argument `labels`. Expected one label per embedding "
            f"({len(x)}). Received: {len(y)} labels."
        )
    if not np.all(np.isfinite(x)):
        raise ValueError(_checks.invalid("embeddings", "finite values", "<array with NaN/inf>"))
    return x, y


def nearest_neighbors(embeddings, k, *, block_size=1024):
    """Indices `[n, k]` of each row's k nearest other rows (Euclidean), nearest first.

    A stable sort of each block's distances breaks ties by the smaller index. (Sorting whole
    rows is O(n log n) per query; the partial selection needed at Stanford Online Products scale
    is future work.)
    """
    x = np.asarray(embeddings, dtype=np.float32)
    n = len(x)
    k = min(int(k), n - 1)
    squared = np.einsum("ij,ij->i", x, x)
    out = np.empty((n, k), dtype=np.int64)
    for start in range(0, n, block_size):
        stop = min(start + block_size, n)
        # Squared distances up to the per-query constant |q|^2 (the ranking is unchanged).
        d = squared[np.newaxis, :] - 2.0 * (x[start:stop] @ x.T)
        d[np.arange(stop - start), np.arange(start, stop)] = np.inf  # never the query itself
        out[start:stop] = np.argsort(d, axis=1, kind="stable")[:, :k]
    return out


def recall_at_k(embeddings, labels, ks=(1, 2, 4, 8), *, block_size=1024):
    """{k: fraction of queries with a same-class item among their k nearest neighbours}."""
    x, y = _check_inputs(embeddings, labels)
    ks = sorted({int(k) for k in ks})
    if not ks or ks[0] < 1:
        raise ValueError(_checks.invalid("ks", "positive ints", ks))
    neighbors = nearest_neighbors(x, max(ks), block_size=block_size)
    hits = y[neighbors] == y[:, np.newaxis]
    has_positive = _class_sizes(y) > 1
    return {k: float(hits[has_positive, :k].any(axis=1).mean()) for k in ks}


def _class_sizes(y):
    _, inverse, counts = np.unique(y, return_inverse=True, return_counts=True)
    return counts[inverse]


def map_at_r(embeddings, labels, *, block_size=1024):
    """MAP@R (Musgrave et al. 2020): R = number of other members of the query's class;
    ``(1/R) sum_{i<=R} P(i) * rel(i)`` averaged over queries that have a positive."""
    x, y = _check_inputs(embeddings, labels)
    r = _class_sizes(y) - 1
    keep = r > 0
    if not keep.any():
        return 0.0
    neighbors = nearest_neighbors(x, int(r.max()), block_size=block_size)
    relevant = (y[neighbors] == y[:, np.newaxis])[keep]
    r_kept = r[keep]
    ranks = np.arange(1, relevant.shape[1] + 1)
    within_r = ranks[np.newaxis, :] <= r_kept[:, np.newaxis]
    relevant = relevant & within_r
    precision = np.cumsum(relevant, axis=1) / ranks[np.newaxis, :]
    return float(((precision * relevant).sum(axis=1) / r_kept).mean())


def nmi(embeddings, labels, *, seed=0, n_init=1):
    """NMI between the labels and k-means clusters (k = number of classes, scikit-learn)."""
    from sklearn.cluster import KMeans
    from sklearn.metrics import normalized_mutual_info_score

    x, y = _check_inputs(embeddings, labels)
    k = len(np.unique(y))
    clusters = KMeans(n_clusters=k, n_init=n_init, random_state=seed).fit_predict(x)
    return float(normalized_mutual_info_score(y, clusters))
