"""k-means for the NMI metric: greedy k-means++ seeding (scikit-learn's algorithm, ``2 + ln k``
candidates per centre, the one that lowers the potential most is kept), then scikit-learn's
Lloyd iterations.

Why not `sklearn.cluster.KMeans(init="k-means++")` directly: its seeding scores ``2 + ln k``
candidate centres against every point for each of the k centres: k sequential passes over the
data, each a skinny matrix product bound by memory bandwidth, in float64 for float32 data. At
Stanford Online Products' test size (60,502 x 128, k = 11,316) that is about 2.5 minutes on a
2-core CPU, 20x its Lloyd iterations.

The default seeding here (``draws="pooled"``) makes the same greedy choice between candidates
drawn from the same distribution, with two changes to how the work is done:

* Candidates are drawn ahead, a pool of a few hundred at a time, from the D^2 distribution of
  the moment; when a pooled candidate ``x`` is used after more centres were chosen it is kept
  with probability ``D_now(x)^2 / D_then(x)^2`` (rejection sampling), so every kept candidate
  is an exact draw from the current D^2 distribution. The pool's distance rows are one large
  matrix product (compute-bound) instead of one skinny product per centre.
* A candidate ``c`` can only lower the potential at points where ``|x - c|^2 < D(x)^2``, and
  ``D(x)`` only shrinks, so each row is stored sparsely: only the points it could still improve
  when it was computed (at SOP shape 75 of 60,502 on average when scored). A point drawn again
  reuses its row, so no point's distances are computed twice: the whole seeding costs at most
  one n x n distance matrix (``n^2 d`` multiply-adds, ~5 Lloyd iterations at SOP shape, where
  90 % of the points end up drawn) instead of ``(2 + ln k) n k d`` (~11 Lloyd iterations, as
  skinny memory-bound products).

The result follows greedy k-means++'s distribution exactly (tested against scikit-learn's over
seeds) but not scikit-learn's random stream: the seeds differ from
`sklearn.cluster.kmeans_plusplus`'s for the same seed, and so do the clusters and the NMI, by
sampling noise (SOP shape: NMI 0.9240 vs 0.9241 with scikit-learn's stream, scikit-learn's own
converged KMeans 0.9238). ``draws="sklearn"`` (``init="k-means++-sklearn"``) keeps that stream
(with float64 data the indices equal scikit-learn's; in float32 they follow the same
distribution), one data pass per centre. Timings: `benchmarks/retrieval_eval.py`.

The seeding matters for NMI, the iteration count does not: on an SOP-shaped set greedy k-means++
gives NMI 0.924, random initial centres 0.883, and plain (one-candidate) k-means++ 0.884, while 5
or 300 Lloyd iterations from the same seeds give the same NMI (`benchmarks/retrieval_eval.py`).
"""

import concurrent.futures
import os
import time

import numpy as np

from tf_svmax.ops import _checks

INITS = ("k-means++", "k-means++-sklearn", "random")
DRAWS = ("pooled", "sklearn")
# Candidates drawn ahead at a time by the pooled seeding: rows of one matrix product
# (pool x n float32: 124 MB at SOP's n), large enough to be compute-bound.
_POOL_SIZE = 512
# Stored rows longer than this are compacted when next evaluated.
_COMPACT_ABOVE = 256
# Rows of a distance block sparsified per task (64 x SOP's 60,502 float32: 15 MB, cache-sized).
_SPARSIFY_ROWS = 64


def kmeans_plusplus(x, n_clusters, *, seed=0, n_local_trials=None, draws="pooled"):
    """Indices of `n_clusters` rows of `x` chosen by greedy k-means++ (Arthur & Vassilvitskii
    2007, with scikit-learn's ``2 + ln k`` local trials per centre).

    Args:
      x: `[n, d]` finite float32 or float64 array (computed in its own precision, after
        scaling by a power of two when its values are far from 1: see `_rescaled`).
      n_clusters: Number of centres, 1 <= n_clusters <= n.
      seed: Seed of the `numpy.random.RandomState` the draws come from (0 to 2**32 - 1).
      n_local_trials: Candidates per centre; None: ``2 + int(ln n_clusters)``.
      draws: ``"pooled"``: candidates drawn a pool at a time and kept by rejection sampling,
        sparse cached distance rows (see the module docstring; same distribution, another
        random stream, several times faster at thousands of centres). ``"sklearn"``: the draws
        of `sklearn.cluster.kmeans_plusplus(x, n_clusters, random_state=seed)`, so that with
        float64 input the indices equal scikit-learn's (up to rounding ties).

    Returns:
      `[n_clusters]` int64 array of row indices.
    """
    x, n_clusters, seed = _check_data(x, n_clusters, seed)
    n = len(x)
    if n_local_trials is None:
        n_local_trials = 2 + int(np.log(n_clusters))
    n_local_trials = _checks.check_positive_int(n_local_trials, "n_local_trials")
    if draws not in DRAWS:
        raise ValueError(_checks.invalid("draws", '"pooled" or "sklearn"', draws))
    rng = np.random.RandomState(seed)
    data = _Data(x)
    indices = np.empty(n_clusters, np.int64)
    # scikit-learn's first draw: choice() with uniform weights.
    indices[0] = rng.choice(n, p=np.full(n, 1.0 / n))
    if draws == "sklearn":
        # The expanded form can round slightly below zero: clamped at 0 as scikit-learn's
        # euclidean_distances does.
        first = data.squared - 2.0 * (x @ x[indices[0]]) + data.squared[indices[0]]
        _sklearn_draws(data, np.maximum(first, 0), indices, n_local_trials, rng)
    else:
        _pooled_draws(data, data.squared_distances(indices[:1])[0], indices, n_local_trials, rng)
    return indices


def _check_data(x, n_clusters, seed):
    """`(x, n_clusters, seed)` checked for every init: a finite 2-D float32 or float64 `x`
    (rescaled, see `_rescaled`), 1 <= n_clusters <= n, a `RandomState` seed."""
    x = np.asarray(x)
    if x.ndim != 2 or x.dtype not in (np.float32, np.float64):
        raise ValueError(
            _checks.invalid("x", "a 2-D float32 or float64 array", f"{x.dtype} {x.shape}")
        )
    # A NaN row would be drawn as a centre (NaN compares false against every distance), and an
    # inf makes every distance to it inf: refused, there is no right answer to give.
    x = _checks.finite_matrix(x, "x", dtype=x.dtype)
    n_clusters = _checks.check_positive_int(n_clusters, "n_clusters")
    if n_clusters > len(x):
        raise ValueError(
            _checks.invalid("n_clusters", f"at most {len(x)} (the rows of x)", n_clusters)
        )
    return _rescaled(x), n_clusters, _check_seed(seed)


def _check_seed(seed):
    """An int seed in `numpy.random.RandomState`'s range (scikit-learn's `random_state` too)."""
    if (
        isinstance(seed, (bool, np.bool_))
        or not isinstance(seed, (int, np.integer))
        or not 0 <= seed < 2**32
    ):
        raise ValueError(_checks.invalid("seed", "an int in [0, 2**32 - 1]", seed))
    return int(seed)


def check_settings(seed, init, max_iter):
    """`(seed, init, max_iter)` of `kmeans`, checked (callers check them before long work)."""
    if init not in INITS:
        raise ValueError(_checks.invalid("init", " or ".join(f'"{i}"' for i in INITS), init))
    return _check_seed(seed), init, _checks.check_positive_int(max_iter, "max_iter")


# Data whose largest magnitude is within 2**+-_SAFE_EXPONENT are used as they are. Beyond it
# they are scaled by a power of two: float32 squared distances (up to 4 d max|x|^2) overflow
# from max|x| ~ 1e19 / sqrt(d), and underflow to 0 below max|x| ~ 1e-19 (every distance 0).
# 2**16 leaves a margin of over 2**90 on both sides for any d below 2**30.
_SAFE_EXPONENT = 16


def _rescaled(x):
    """`x` times a power of two that brings its largest magnitude into [0.5, 1) when it is far
    from 1. Multiplying by a power of two is exact (short of subnormals, entries below float
    resolution relative to the largest anyway), so every distance, potential and comparison
    is the unscaled one times a power of two: the same seeds, draws and clusters, without
    the overflow (float32 data around 1e20 gave duplicate centres, one cluster) or underflow.
    """
    peak = float(np.abs(x).max()) if x.size else 0.0
    if peak == 0:
        return x
    exponent = int(np.frexp(peak)[1])  # peak = m * 2**exponent, 0.5 <= m < 1
    if abs(exponent) <= _SAFE_EXPONENT:
        return x
    return np.ldexp(x, -exponent).astype(x.dtype, copy=False)


class _Data:
    """The points in the layout of one matrix product per block of candidates."""

    def __init__(self, x):
        n, d = x.shape
        self.x = x
        self.squared = np.einsum("ij,ij->i", x, x)
        # [x, |x|^2, 1] (transposed, contiguous: the faster operand layout for the product
        # below) so that [-2c, 1, |c|^2] . [x, |x|^2, 1] = |x - c|^2 in one matrix product.
        self.augmented = np.empty((d + 2, n), x.dtype)
        self.augmented[:d] = x.T
        self.augmented[d] = self.squared
        self.augmented[d + 1] = 1.0

    def squared_distances(self, ids, *, clamp=True):
        """`[len(ids), n]` squared distances from the points `ids` to every point (`clamp`:
        at 0, else the caller clamps what it keeps)."""
        d = self.x.shape[1]
        candidates = np.empty((len(ids), d + 2), self.x.dtype)
        candidates[:, :d] = -2.0 * self.x[ids]
        candidates[:, d] = 1.0
        candidates[:, d + 1] = self.squared[ids]
        distances = candidates @ self.augmented
        # The expanded form can round slightly below zero: clamped at 0 as scikit-learn's
        # euclidean_distances does; a point's distance to itself is exactly 0.
        if clamp:
            np.maximum(distances, 0, out=distances)
        distances[np.arange(len(ids)), ids] = 0
        return distances


def _sklearn_draws(data, closest, indices, n_local_trials, rng):
    """scikit-learn's loop: per centre, draw the candidates and score them on all points."""
    n, d = data.x.shape
    candidates = np.empty((n_local_trials, d + 2), data.x.dtype)
    potential = closest.sum(dtype=np.float64)
    for c in range(1, len(indices)):
        draws = rng.uniform(size=n_local_trials) * potential
        ids = np.searchsorted(np.cumsum(closest, dtype=np.float64), draws)
        # A draw at the very top of the cumulative sum can land one past the end (rounding).
        np.minimum(ids, n - 1, out=ids)
        candidates[:, :d] = -2.0 * data.x[ids]
        candidates[:, d] = 1.0
        candidates[:, d + 1] = data.squared[ids]
        distances = candidates @ data.augmented
        # Clamped at 0 as scikit-learn's euclidean_distances does (rounding).
        np.maximum(distances, 0, out=distances)
        np.minimum(distances, closest, out=distances)
        potentials = distances.sum(axis=1, dtype=np.float64)
        best = int(np.argmin(potentials))
        potential = potentials[best]
        closest = distances[best].copy()
        indices[c] = ids[best]


def _pooled_draws(data, closest, indices, n_local_trials, rng):
    """Greedy k-means++ with pooled draws (rejection sampling) and sparse cached rows."""
    with concurrent.futures.ThreadPoolExecutor(max(1, min(os.cpu_count() or 1, 8))) as threads:
        _pooled_loop(data, closest, indices, n_local_trials, rng, _SparseRows(data, threads))


def _pooled_loop(data, closest, indices, n_local_trials, rng, rows):
    pool = _Pool()
    for c in range(1, len(indices)):
        candidates = pool.accepted(n_local_trials, closest, rng, rows, size=_pool_size(c))
        if candidates is None:
            # Every point coincides with a chosen centre (potential 0): scikit-learn's draws all
            # land on row 0 then.
            indices[c:] = 0
            return
        gains = rows.gains(candidates, closest)
        best = candidates[int(np.argmax(gains))]  # the first of equal gains, as scikit-learn
        rows.choose(best, closest)
        indices[c] = best


def _pool_size(c):
    # Early on each new centre changes D^2 a lot (most pooled draws would be rejected): the
    # pool grows with the number of centres chosen, up to _POOL_SIZE.
    return min(_POOL_SIZE, 8 * c)


class _Pool:
    """Candidates drawn ahead from an earlier D^2 distribution, kept by rejection sampling."""

    def __init__(self):
        self.ids = np.empty(0, np.int64)
        self.weights = self.uniforms = np.empty(0)
        self.position = 0

    def refill(self, size, closest, rng, rows):
        cumulative = np.cumsum(closest, dtype=np.float64)
        if cumulative[-1] <= 0:
            return False
        draws = rng.uniform(size=size) * cumulative[-1]
        # A draw at the very top of the cumulative sum can land one past the end (rounding).
        self.ids = np.minimum(np.searchsorted(cumulative, draws), len(closest) - 1)
        self.weights = closest[self.ids].astype(np.float64)
        self.uniforms = rng.uniform(size=size)
        self.position = 0
        rows.compute(self.ids, closest)
        return True

    def accepted(self, count, closest, rng, rows, *, size):
        """`count` candidates, each an exact draw from the current D^2 distribution (None when
        the potential is 0)."""
        out = []
        while len(out) < count:
            if self.position >= len(self.ids) and not self.refill(size, closest, rng, rows):
                return None
            need = count - len(out)
            window = slice(self.position, min(len(self.ids), self.position + 2 * need + 4))
            ids = self.ids[window]
            # Drawn with weight D_then^2, kept with probability D_now^2 / D_then^2.
            keep = np.flatnonzero(self.uniforms[window] * self.weights[window] < closest[ids])
            keep = keep[:need]
            out.extend(ids[keep].tolist())
            self.position = self.position + int(keep[-1]) + 1 if len(keep) == need else window.stop
        return out


class _SparseRows:
    """Per point, the points its row could improve when computed (``|x - c|^2 < D(x)^2``) and
    those squared distances; D only shrinks, so the entries left out never matter again."""

    def __init__(self, data, pool):
        self.data = data
        self.pool = pool
        n = len(data.squared)
        self.columns = [None] * n
        self.values = [None] * n

    def compute(self, ids, closest):
        new = np.unique(ids)
        new = new[[self.columns[p] is None for p in new]]
        if not len(new):
            return
        distances = self.data.squared_distances(new, clamp=False)
        n = len(closest)

        def sparsify(start):
            block = distances[start : start + _SPARSIFY_ROWS]
            # 1-D nonzero over the block: far faster than a 2-D one or one per row.
            flat = np.flatnonzero(block < closest)
            # Clamped at 0 (rounding of the expanded form), only where kept.
            return flat, np.maximum(block.ravel()[flat], 0)

        # NumPy releases the GIL in these passes: blocks of rows go to the cores.
        starts = range(0, len(new), _SPARSIFY_ROWS)
        for start, (flat, values) in zip(starts, self.pool.map(sparsify, starts), strict=True):
            row, column = np.divmod(flat, n)
            column = column.astype(np.int32)
            bounds = np.searchsorted(row, np.arange(min(_SPARSIFY_ROWS, len(new) - start) + 1))
            for j in range(len(bounds) - 1):
                p = new[start + j]
                self.columns[p] = column[bounds[j] : bounds[j + 1]]
                self.values[p] = values[bounds[j] : bounds[j + 1]]

    def gains(self, candidates, closest):
        """How much choosing each candidate would lower the potential (one pass over their
        rows together: per-candidate NumPy calls would cost more than the arithmetic)."""
        columns = [self.columns[p] for p in candidates]
        values = [self.values[p] for p in candidates]
        lengths = np.array([len(c) for c in columns])
        gains = closest[np.concatenate(columns)] - np.concatenate(values)
        np.maximum(gains, 0, out=gains)
        # Rows are never empty here (a candidate's own entry, 0 < D(candidate)^2).
        starts = np.concatenate([[0], np.cumsum(lengths[:-1])])
        totals = np.add.reduceat(gains.astype(np.float64), starts)
        # Long rows (computed early, when D was large) shed the entries that can no longer
        # help, so that a candidate drawn again costs what its row is still worth.
        for j in np.flatnonzero(lengths > _COMPACT_ABOVE):
            keep = gains[starts[j] : starts[j] + lengths[j]] > 0
            p = candidates[j]
            self.columns[p], self.values[p] = columns[j][keep], values[j][keep]
        return totals

    def choose(self, p, closest):
        columns = self.columns[p]
        closest[columns] = np.minimum(closest[columns], self.values[p])
        # A chosen centre is never drawn again (D = 0): free its row.
        self.columns[p] = self.values[p] = np.empty(0)


def kmeans(x, n_clusters, *, seed=0, init="k-means++", max_iter=300):
    """k-means clusters of the rows of `x` (scikit-learn's Lloyd iterations).

    Args:
      x: `[n, d]` finite float32 or float64 array.
      n_clusters: k, 1 <= k <= n.
      seed: Seeds the initial centres (an int in [0, 2**32 - 1]).
      init: ``"k-means++"`` (`kmeans_plusplus`, pooled draws), ``"k-means++-sklearn"``
        (`kmeans_plusplus` with ``draws="sklearn"``: scikit-learn's seeds and clusters for the
        same seed, slower at thousands of clusters) or ``"random"`` (k distinct rows drawn
        uniformly, scikit-learn's ``init="random"``).
      max_iter: At most this many Lloyd iterations.

    Returns:
      ``(labels, info)``: `[n]` cluster index per row, and ``{"kmeans_init", "kmeans_iterations",
      "kmeans_converged", "seconds_kmeans_seeding", "seconds_kmeans_lloyd"}`` (converged:
      stopped before `max_iter`; the seconds are wall time, for benchmarks).
    """
    import threadpoolctl  # scikit-learn's own dependency
    from sklearn.cluster import KMeans

    seed, init, max_iter = check_settings(seed, init, max_iter)
    # Lloyd's iterations overflow as the seeding would: both see the rescaled data (the same
    # clusters, see `_rescaled`).
    x, n_clusters, seed = _check_data(x, n_clusters, seed)
    started = time.perf_counter()
    if init != "random":
        draws = "sklearn" if init == "k-means++-sklearn" else "pooled"
        start = x[kmeans_plusplus(x, n_clusters, seed=seed, draws=draws)]
        model = KMeans(n_clusters=n_clusters, init=start, n_init=1, max_iter=max_iter)
    else:
        model = KMeans(
            n_clusters=n_clusters, init="random", n_init=1, max_iter=max_iter, random_state=seed
        )
    seeded = time.perf_counter()
    # One BLAS thread: scikit-learn's Lloyd iterations run their own OpenMP workers, each with
    # its own small matrix products; a second BLAS thread per worker only adds hand-off.
    with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
        model.fit(x)
    return model.labels_, {
        "kmeans_init": init,
        "kmeans_iterations": int(model.n_iter_),
        "kmeans_converged": bool(model.n_iter_ < max_iter),
        # scikit-learn's init="random" draws its centres inside fit: counted as Lloyd time.
        "seconds_kmeans_seeding": seeded - started,
        "seconds_kmeans_lloyd": time.perf_counter() - seeded,
    }
