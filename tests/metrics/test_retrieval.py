import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.metrics import normalized_mutual_info_score

from tf_svmax.metrics import retrieval


def _brute_neighbors(x, y):
    """Full sort of exact float64 distances, ties by smaller index, self excluded."""
    x = np.asarray(x, np.float64)
    d = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    out = []
    for i in range(len(x)):
        others = [j for j in range(len(x)) if j != i]
        out.append(sorted(others, key=lambda j: (d[i, j], j)))
    return np.array(out)


def _brute_recall(x, y, k):
    nbrs = _brute_neighbors(x, y)
    rows = [i for i in range(len(y)) if (y == y[i]).sum() > 1]
    return np.mean([np.any(y[nbrs[i, :k]] == y[i]) for i in rows])


def _brute_map_at_r(x, y):
    nbrs = _brute_neighbors(x, y)
    scores = []
    for i in range(len(y)):
        r = (y == y[i]).sum() - 1
        if r == 0:
            continue
        rel = y[nbrs[i, :r]] == y[i]
        precisions = [rel[: j + 1].sum() / (j + 1) for j in range(r) if rel[j]]
        scores.append(sum(precisions) / r)
    return np.mean(scores)


@pytest.mark.parametrize("block_size", [1, 7, 1024])
def test_recall_and_map_at_r_match_brute_force_with_ties_and_singletons(rng, block_size):
    # Integer grid coordinates give many tied distances; label 99 is a single-image class.
    x = rng.integers(-2, 3, size=(40, 3)).astype(np.float32)
    y = rng.integers(0, 6, size=40)
    y[0] = 99
    got = retrieval.recall_at_k(x, y, ks=(1, 2, 4, 8), block_size=block_size)
    for k in (1, 2, 4, 8):
        assert got[k] == pytest.approx(_brute_recall(x, y, k))
    assert retrieval.map_at_r(x, y, block_size=block_size) == pytest.approx(_brute_map_at_r(x, y))


def test_neighbors_match_brute_force_order(rng):
    x = rng.standard_normal((30, 4)).astype(np.float32)
    np.testing.assert_array_equal(
        retrieval.nearest_neighbors(x, 29, block_size=8), _brute_neighbors(x, None)
    )


def test_perfect_and_known_values():
    x = np.array([[0.0], [0.1], [5.0], [5.1]], np.float32)
    y = np.array([0, 0, 1, 1])
    assert retrieval.recall_at_k(x, y, ks=(1,)) == {1: 1.0}
    assert retrieval.map_at_r(x, y) == 1.0
    y_bad = np.array([0, 1, 0, 1])
    assert retrieval.recall_at_k(x, y_bad, ks=(1,)) == {1: 0.0}


def test_nmi_matches_sklearn_with_the_same_seed(rng):
    x = rng.standard_normal((60, 5)).astype(np.float32) + np.repeat(np.eye(5)[:3] * 4, 20, 0)
    y = np.repeat(np.arange(3), 20)
    clusters = KMeans(n_clusters=3, n_init=1, random_state=7).fit_predict(x)
    assert retrieval.nmi(x, y, seed=7) == pytest.approx(normalized_mutual_info_score(y, clusters))


def test_bad_input():
    with pytest.raises(ValueError, match=r"argument `labels`"):
        retrieval.recall_at_k(np.zeros((3, 2)), [0, 1])
    with pytest.raises(ValueError, match=r"argument `embeddings`.*finite"):
        retrieval.map_at_r(np.array([[np.nan, 0.0], [0.0, 0.0]]), [0, 0])
    with pytest.raises(ValueError, match=r"argument `ks`"):
        retrieval.recall_at_k(np.zeros((3, 2)), [0, 0, 1], ks=(0,))
