"""Independent float64 NumPy references (full sorts, explicit loops) for the retrieval metrics:
neighbours, Recall@K and MAP@R, shared by the metric, callback and trainer tests."""

import numpy as np


def brute_neighbors(x, y):
    """Full sort of exact float64 distances, ties by smaller index, self excluded."""
    x = np.asarray(x, np.float64)
    d = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    out = []
    for i in range(len(x)):
        others = [j for j in range(len(x)) if j != i]
        out.append(sorted(others, key=lambda j: (d[i, j], j)))
    return np.array(out)


def brute_recall(x, y, k):
    nbrs = brute_neighbors(x, y)
    rows = [i for i in range(len(y)) if (y == y[i]).sum() > 1]
    return np.mean([np.any(y[nbrs[i, :k]] == y[i]) for i in rows])


def brute_map_at_r(x, y):
    nbrs = brute_neighbors(x, y)
    scores = []
    for i in range(len(y)):
        r = (y == y[i]).sum() - 1
        if r == 0:
            continue
        rel = y[nbrs[i, :r]] == y[i]
        precisions = [rel[: j + 1].sum() / (j + 1) for j in range(r) if rel[j]]
        scores.append(sum(precisions) / r)
    return np.mean(scores)
