"""k-means for the NMI metric: scikit-learn's greedy k-means++ seeding, computed in the data's
own precision, then scikit-learn's Lloyd iterations.

Why not `sklearn.cluster.KMeans(init="k-means++")` directly: its seeding evaluates
``2 + ln k`` candidate centres against every point for each of the k centres, and for float32
data it computes those distances in float64, converting the data chunk by chunk each time
(`sklearn.metrics.pairwise` upcasts float32 for accuracy). At Stanford Online Products' test size
(60,502 x 128, k = 11,316) that is about 3 minutes on a 2-core CPU. Here the same draws and the
same greedy choice run on one float32 matrix product per centre (candidates x data, with the
squared norms folded into the product), which is ~4x faster there. With float64 data the
selected centres are scikit-learn's own (tested); in float32 they follow the same distribution.

The seeding matters for NMI, the iteration count does not: on an SOP-shaped set greedy k-means++
gives NMI 0.924, random initial centres 0.883, and plain (one-candidate) k-means++ 0.884, while 5
or 300 Lloyd iterations from the same seeds give the same NMI (`benchmarks/retrieval_eval.py`).
"""

import numpy as np

from tf_svmax.ops import _checks

INITS = ("k-means++", "random")


def kmeans_plusplus(x, n_clusters, *, seed=0, n_local_trials=None):
    """Indices of `n_clusters` rows of `x` chosen by greedy k-means++ (Arthur & Vassilvitskii
    2007, with scikit-learn's ``2 + ln k`` local trials per centre).

    Draws the random numbers exactly as `sklearn.cluster.kmeans_plusplus(x, n_clusters,
    random_state=seed)` does, so with float64 input the indices equal scikit-learn's (up to
    rounding ties); float32 input is computed in float32.

    Args:
      x: `[n, d]` float32 or float64 array.
      n_clusters: Number of centres, 1 <= n_clusters <= n.
      seed: Seed of the `numpy.random.RandomState` the draws come from.
      n_local_trials: Candidates per centre; None: ``2 + int(ln n_clusters)``.

    Returns:
      `[n_clusters]` int64 array of row indices.
    """
    x = np.asarray(x)
    if x.ndim != 2 or x.dtype not in (np.float32, np.float64):
        raise ValueError(
            _checks.invalid("x", "a 2-D float32 or float64 array", f"{x.dtype} {x.shape}")
        )
    n, d = x.shape
    n_clusters = _checks.check_positive_int(n_clusters, "n_clusters")
    if n_clusters > n:
        raise ValueError(_checks.invalid("n_clusters", f"at most {n} (the rows of x)", n_clusters))
    if n_local_trials is None:
        n_local_trials = 2 + int(np.log(n_clusters))
    n_local_trials = _checks.check_positive_int(n_local_trials, "n_local_trials")
    rng = np.random.RandomState(seed)
    squared = np.einsum("ij,ij->i", x, x)
    # [x, |x|^2, 1] (transposed, contiguous: the faster operand layout for the product below) so
    # that [-2c, 1, |c|^2] . [x, |x|^2, 1] = |x - c|^2 in a single matrix product.
    augmented = np.empty((d + 2, n), x.dtype)
    augmented[:d] = x.T
    augmented[d] = squared
    augmented[d + 1] = 1.0
    candidates = np.empty((n_local_trials, d + 2), x.dtype)
    indices = np.empty(n_clusters, np.int64)
    # scikit-learn's first draw: choice() with uniform weights.
    indices[0] = rng.choice(n, p=np.full(n, 1.0 / n))
    # The expanded form can round slightly below zero: distances are clamped at 0 as
    # scikit-learn's euclidean_distances does.
    closest = np.maximum(squared - 2.0 * (x @ x[indices[0]]) + squared[indices[0]], 0)
    potential = closest.sum(dtype=np.float64)
    for c in range(1, n_clusters):
        draws = rng.uniform(size=n_local_trials) * potential
        ids = np.searchsorted(np.cumsum(closest, dtype=np.float64), draws)
        # A draw at the very top of the cumulative sum can land one past the end (rounding).
        np.minimum(ids, n - 1, out=ids)
        candidates[:, :d] = -2.0 * x[ids]
        candidates[:, d] = 1.0
        candidates[:, d + 1] = squared[ids]
        distances = candidates @ augmented
        np.maximum(distances, 0, out=distances)
        np.minimum(distances, closest, out=distances)
        potentials = distances.sum(axis=1, dtype=np.float64)
        best = int(np.argmin(potentials))
        potential = potentials[best]
        closest = distances[best].copy()
        indices[c] = ids[best]
    return indices


def kmeans(x, n_clusters, *, seed=0, init="k-means++", max_iter=300):
    """k-means clusters of the rows of `x` (scikit-learn's Lloyd iterations).

    Args:
      x: `[n, d]` float32 or float64 array.
      n_clusters: k.
      seed: Seeds the initial centres.
      init: ``"k-means++"`` (`kmeans_plusplus`) or ``"random"`` (k distinct rows drawn
        uniformly, scikit-learn's ``init="random"``).
      max_iter: At most this many Lloyd iterations.

    Returns:
      ``(labels, info)``: `[n]` cluster index per row, and ``{"kmeans_init", "kmeans_iterations",
      "kmeans_converged"}`` (converged: stopped before `max_iter`).
    """
    import threadpoolctl  # scikit-learn's own dependency
    from sklearn.cluster import KMeans

    if init not in INITS:
        raise ValueError(_checks.invalid("init", '"k-means++" or "random"', init))
    max_iter = _checks.check_positive_int(max_iter, "max_iter")
    x = np.asarray(x)
    if init == "k-means++":
        start = x[kmeans_plusplus(x, n_clusters, seed=seed)]
        model = KMeans(n_clusters=n_clusters, init=start, n_init=1, max_iter=max_iter)
    else:
        model = KMeans(
            n_clusters=n_clusters, init="random", n_init=1, max_iter=max_iter, random_state=seed
        )
    # One BLAS thread: scikit-learn's Lloyd iterations run their own OpenMP workers, each with
    # its own small matrix products; a second BLAS thread per worker only adds hand-off.
    with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
        model.fit(x)
    return model.labels_, {
        "kmeans_init": init,
        "kmeans_iterations": int(model.n_iter_),
        "kmeans_converged": bool(model.n_iter_ < max_iter),
    }
