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

Given a `NeighborLists` (each point's neighbours up to a radius, which a k-NN scan has
computed anyway: `tf_svmax.metrics.retrieval.evaluate_retrieval` hands its own over), a
candidate's row needs no product where its list is complete: a candidate c can only lower D(x)
where ``|x - c|^2 < D(x)^2``, so its list (every x closer than its radius) is all it needs over
the points whose D^2 is below the radius, and the few points above it are scored against the
listed candidates directly. The same draws and choices (with float64 data the same indices,
tested); at SOP shape 95 % of the rows then come from the lists.

The result follows greedy k-means++'s distribution exactly (tested against scikit-learn's over
seeds) but not scikit-learn's random stream: the seeds differ from
`sklearn.cluster.kmeans_plusplus`'s for the same seed, and so do the clusters and the NMI, by
sampling noise (SOP shape: NMI 0.9240 vs 0.9241 with scikit-learn's stream, scikit-learn's own
converged KMeans 0.9238). ``draws="sklearn"`` (``init="k-means++-sklearn"``) keeps that stream
(with float64 data the indices equal scikit-learn's; in float32 they follow the same
distribution), one data pass per centre. Timings: `benchmarks/retrieval_eval.py`.

The seeding also hands `kmeans` each point's nearest seed, Lloyd's first assignment step, so
that scikit-learn's iterations start from the first iteration's means (one pass over the
n x k distances fewer: 1.5 s at SOP shape; the same clusters).

The seeding matters for NMI, the iteration count does not: on an SOP-shaped set greedy k-means++
gives NMI 0.924, random initial centres 0.883, and plain (one-candidate) k-means++ 0.884, while 5
or 300 Lloyd iterations from the same seeds give the same NMI (`benchmarks/retrieval_eval.py`).
"""

import concurrent.futures
import os
import time

import numpy as np

from tf_svmax import checks
from tf_svmax._args import KMEANS_INITS as INITS  # one table: the trainers' flags read it

DRAWS = ("pooled", "sklearn")
# Candidates drawn ahead at a time by the pooled seeding: rows of one matrix product
# (pool x n float32: 124 MB at SOP's n), large enough to be compute-bound.
_POOL_SIZE = 512
# Stored rows longer than this are compacted when next evaluated.
_COMPACT_ABOVE = 256
# Rows of a distance block sparsified per task (64 x SOP's 60,502 float32: 15 MB, cache-sized).
_SPARSIFY_ROWS = 64
# With neighbour lists, a candidate's row is its list plus a product with the points whose D^2
# exceeds its list's radius, used while those are at most 1 / _SCORED_APART of the points
# (beyond that, the full row costs little more).
_SCORED_APART = 8


class NeighborLists:
    """Every row's nearby points up to a radius, all of them: what a k-NN scan, which computes
    every pairwise distance anyway, hands to `kmeans_plusplus` so that its seeding need not
    compute them again (`tf_svmax.metrics.retrieval.neighbor_lists` builds one; so does
    `evaluate_retrieval`'s scan for its NMI).

    Row i lists the points ``indices[indptr[i]:indptr[i + 1]]`` (distinct, none of them i) and
    their squared distances to x_i, ``squared_distances[indptr[i]:indptr[i + 1]]``, and promises
    that **every point j != i not listed is at squared distance >= radii[i]** (as the same
    computation rounds it; the seeding allows for the rounding between that computation and its
    own). Distances are in the units of the rows given to the seeding, computed in float32 or
    better. A radius may be inf (everything listed) or below 0 (nothing promised).

    Args:
      indptr: `[n + 1]` non-decreasing ints from 0 to ``len(indices)``.
      indices: `[nnz]` ints in [0, n).
      squared_distances: `[nnz]` float32 or float64.
      radii: `[n]` float32 or float64, no NaN.
    """

    def __init__(self, indptr, indices, squared_distances, radii):
        self.indptr = np.asarray(indptr)
        self.indices = np.asarray(indices)
        self.squared_distances = np.asarray(squared_distances)
        self.radii = np.asarray(radii)
        n = len(self.radii)
        nnz = len(self.indices) if self.indices.ndim == 1 else -1
        expectations = (
            ("radii", self.radii, "a 1-D float32 or float64 array without NaN", "f", n),
            ("indptr", self.indptr, f"{n + 1} non-decreasing ints from 0 to {nnz}", "iu", n + 1),
            ("indices", self.indices, f"a 1-D int array of values in [0, {n})", "iu", nnz),
            ("squared_distances", self.squared_distances, f"{nnz} float32/64 values", "f", nnz),
        )
        for arg, array, expected, kinds, length in expectations:
            if array.ndim != 1 or array.dtype.kind not in kinds or len(array) != length:
                received = f"<{array.dtype} array of shape {array.shape}>"
                raise ValueError(checks.invalid(arg, expected, received))
        if np.isnan(self.radii).any():
            raise ValueError(checks.invalid("radii", expectations[0][2], "<array with NaN>"))
        if self.indptr[0] != 0 or self.indptr[-1] != nnz or np.any(np.diff(self.indptr) < 0):
            raise ValueError(checks.invalid("indptr", expectations[1][2], "<other values>"))
        if nnz and (self.indices.min() < 0 or self.indices.max() >= n):
            raise ValueError(checks.invalid("indices", expectations[2][2], "<values out of range>"))

    @property
    def num_rows(self):
        return len(self.radii)

    def __repr__(self):
        return f"NeighborLists({self.num_rows} rows, {len(self.indices)} entries)"


def kmeans_plusplus(
    x, n_clusters, *, seed=0, n_local_trials=None, draws="pooled", neighbors=None, stats=None
):
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
      neighbors: None, or a `NeighborLists` of x's rows (a k-NN scan's by-product, e.g.
        `tf_svmax.metrics.retrieval.neighbor_lists`), for the pooled draws: a candidate's row
        then comes from its list where that is provably complete (see `NeighborLists`), not
        from a new product. The same algorithm and random stream: with float64 data the
        indices equal those without lists; listed distances are the scan's, so in float32
        a near-tie between candidates may go the other way. Ignored by ``draws="sklearn"``
        and when x is rescaled (`_rescaled`).
      stats: None, or a dict that receives ``rows_computed`` (candidates' distance rows
        computed here), ``rows_from_neighbors`` (rows taken from `neighbors`) and, for the
        pooled draws, ``nearest_centre``: `[n]` each point's nearest centre (a position in the
        returned indices; by the seeding's own distances, ties to the earlier centre), the
        assignment step of Lloyd's first iteration.

    Returns:
      `[n_clusters]` int64 array of row indices.
    """
    x, n_clusters, seed, rescaled = _check_data(x, n_clusters, seed)
    n = len(x)
    if neighbors is not None:
        if not isinstance(neighbors, NeighborLists) or neighbors.num_rows != n:
            raise ValueError(
                checks.invalid("neighbors", f"None or a NeighborLists of {n} rows", neighbors)
            )
        if rescaled:
            # Its distances are in the units of the unscaled data (and may have overflowed or
            # underflowed there): the seeding computes its own rows instead.
            neighbors = None
    if n_local_trials is None:
        n_local_trials = 2 + int(np.log(n_clusters))
    n_local_trials = checks.check_positive_int(n_local_trials, "n_local_trials")
    if draws not in DRAWS:
        raise ValueError(checks.invalid("draws", '"pooled" or "sklearn"', draws))
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
        counts = {"rows_computed": n_clusters, "rows_from_neighbors": 0}
    else:
        closest = data.squared_distances(indices[:1])[0]
        counts = _pooled_draws(data, closest, indices, n_local_trials, rng, neighbors)
    if stats is not None:
        stats.update(counts)
    return indices


def _check_data(x, n_clusters, seed):
    """`(x, n_clusters, seed, rescaled)` checked for every init: a finite 2-D float32 or float64
    `x` (`rescaled`: scaled by a power of two, see `_rescaled`), 1 <= n_clusters <= n, a
    `RandomState` seed."""
    x = np.asarray(x)
    if x.ndim != 2 or x.dtype not in (np.float32, np.float64):
        raise ValueError(
            checks.invalid("x", "a 2-D float32 or float64 array", f"{x.dtype} {x.shape}")
        )
    # A NaN row would be drawn as a centre (NaN compares false against every distance), and an
    # inf makes every distance to it inf: refused, there is no right answer to give.
    x = checks.finite_matrix(x, "x", dtype=x.dtype)
    n_clusters = checks.check_positive_int(n_clusters, "n_clusters")
    if n_clusters > len(x):
        raise ValueError(
            checks.invalid("n_clusters", f"at most {len(x)} (the rows of x)", n_clusters)
        )
    scaled = _rescaled(x)
    return scaled, n_clusters, _check_seed(seed), scaled is not x


def _check_seed(seed):
    """An int seed in `numpy.random.RandomState`'s range (scikit-learn's `random_state` too)."""
    if (
        isinstance(seed, (bool, np.bool_))
        or not isinstance(seed, (int, np.integer))
        or not 0 <= seed < 2**32
    ):
        raise ValueError(checks.invalid("seed", "an int in [0, 2**32 - 1]", seed))
    return int(seed)


def check_settings(seed, init, max_iter):
    """`(seed, init, max_iter)` of `kmeans`, checked (callers check them before long work)."""
    if init not in INITS:
        raise ValueError(checks.invalid("init", " or ".join(f'"{i}"' for i in INITS), init))
    return _check_seed(seed), init, checks.check_positive_int(max_iter, "max_iter")


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


def _pooled_draws(data, closest, indices, n_local_trials, rng, neighbors):
    """Greedy k-means++ with pooled draws (rejection sampling) and sparse cached rows; returns
    the row counts (`kmeans_plusplus`'s `stats`)."""
    with concurrent.futures.ThreadPoolExecutor(max(1, min(os.cpu_count() or 1, 8))) as threads:
        rows = _SparseRows(data, threads, neighbors)
        nearest = np.zeros(len(closest), np.int64)  # every point's nearest is centre 0 first
        _pooled_loop(data, closest, indices, n_local_trials, rng, rows, nearest)
    return {
        "rows_computed": rows.computed,
        "rows_from_neighbors": rows.from_neighbors,
        "nearest_centre": nearest,
    }


def _pooled_loop(data, closest, indices, n_local_trials, rng, rows, nearest):
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
        rows.choose(best, closest, nearest, c)
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

    def __init__(self, data, pool, neighbors=None):
        self.data = data
        self.pool = pool
        n = len(data.squared)
        self.columns = [None] * n
        self.values = [None] * n
        self.neighbors = neighbors
        self.computed = self.from_neighbors = 0
        if neighbors is not None:
            # A listed distance and the one this seeding would compute are two roundings of the
            # same expanded form |x|^2 + |c|^2 - 2 x.c, each off by at most (d + 2) u (|x| +
            # |c|)^2 <= 4 (d + 2) u max|x|^2 (u = eps / 2, the unit roundoff; the standard dot
            # product bound): a list is trusted only for points whose D^2 is below its radius
            # by twice their sum, so a point left out of it could not have been kept here.
            eps = max(np.finfo(data.x.dtype).eps, np.finfo(neighbors.squared_distances.dtype).eps)
            self.margin = 8.0 * (data.x.shape[1] + 2) * eps * float(data.squared.max())
            self.trusted = neighbors.radii.astype(np.float64) - self.margin

    def compute(self, ids, closest):
        new = np.unique(ids)
        new = new[[self.columns[p] is None for p in new]]
        if len(new) and self.neighbors is not None:
            new = self._from_lists(new, closest)
        if not len(new):
            return
        self.computed += len(new)
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

    def _from_lists(self, new, closest):
        """Stores the rows of the points `new` whose neighbour lists are complete enough; returns
        the others (their rows are computed in full).

        A point c's list holds every x with ``|x - c|^2 < radius(c)``; c can only lower D(x)
        where ``|x - c|^2 < D(x)^2``. So the list is all c needs over the points with
        ``D(x)^2 <= radius(c)`` (less the rounding margin), and the few points whose D^2 is
        larger (the set S below, at most n / _SCORED_APART of them) are scored against the
        listed candidates directly, one product of ``len(listed) x |S|``.
        """
        n = len(closest)
        limit = max(1, n // _SCORED_APART)
        # Points with D^2 above `floor` number at most `limit` (ties aside).
        floor = float(np.partition(closest, n - limit)[n - limit]) if limit < n else -np.inf
        trusted = self.trusted[new]
        use = trusted >= floor
        if not use.any():
            return new
        listed = new[use]
        tau = float(trusted[use].min())
        apart = np.flatnonzero(closest > tau)
        nb = self.neighbors
        starts, stops = nb.indptr[listed], nb.indptr[listed + 1]
        lengths = stops - starts
        owner = np.repeat(np.arange(len(listed)), lengths)
        # Positions of every listed candidate's entries, concatenated.
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        position = np.arange(int(lengths.sum())) + np.repeat(starts - offsets, lengths)
        columns = nb.indices[position]
        values = nb.squared_distances[position].astype(closest.dtype)
        current = closest[columns]
        # S's points are scored below; a list holding its own row is not trusted for it.
        keep = (values < current) & (current <= tau) & (columns != listed[owner])
        parts = [(owner[keep], columns[keep], values[keep])]
        # Each candidate's own entry, 0, kept where it lowers D (as in a computed row); those
        # in S get it from the product.
        mine = np.flatnonzero((closest[listed] <= tau) & (closest[listed] > 0))
        parts.append((mine, listed[mine], np.zeros(len(mine))))
        if len(apart):
            d = self.data.x.shape[1]
            candidates = np.empty((len(listed), d + 2), self.data.x.dtype)
            candidates[:, :d] = -2.0 * self.data.x[listed]
            candidates[:, d] = 1.0
            candidates[:, d + 1] = self.data.squared[listed]
            block = candidates @ self.data.augmented[:, apart]
            flat = np.flatnonzero(block < closest[apart])
            row, column = np.divmod(flat, len(apart))
            # Clamped at 0 (rounding of the expanded form); a candidate's distance to itself is
            # exactly 0.
            found = np.maximum(block.ravel()[flat], 0)
            found[apart[column] == listed[row]] = 0
            parts.append((row, apart[column], found))
        owner, columns, values = (np.concatenate(p) for p in zip(*parts, strict=True))
        order = np.argsort(owner, kind="stable")
        owner, columns, values = owner[order], columns[order].astype(np.int32), values[order]
        bounds = np.searchsorted(owner, np.arange(len(listed) + 1))
        for j, p in enumerate(listed):
            self.columns[p] = columns[bounds[j] : bounds[j + 1]]
            self.values[p] = values[bounds[j] : bounds[j + 1]].astype(closest.dtype)
        self.from_neighbors += len(listed)
        return new[~use]

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

    def choose(self, p, closest, nearest, centre):
        """Makes `p` the centre number `centre`: lowers D^2 (`closest`) where its row is closer
        and records it as those points' `nearest` centre (on a tie the earlier centre stays,
        as argmin's first index)."""
        columns, values = self.columns[p], self.values[p]
        better = values < closest[columns]
        closest[columns[better]] = values[better]
        nearest[columns[better]] = centre
        # A chosen centre is never drawn again (D = 0): free its row.
        self.columns[p] = self.values[p] = np.empty(0)


def _first_iteration(x, seeds, nearest):
    """Lloyd's first iteration from the seeds, whose assignment step the pooled seeding has
    done (`nearest`): ``(centres, 1)``, the means of the points nearest each seed; or
    ``(seeds, 0)`` where scikit-learn's iteration would do more than that (a seed nearest to
    no point: duplicate seeds, whose empty cluster it relocates) or stop there (the centres
    moved less than its tolerance, ``1e-4`` times the mean variance, where it would run its
    last assignment step and report 1 iteration)."""
    sizes = np.bincount(nearest, minlength=len(seeds))
    if not sizes.all():
        return seeds, 0
    order = np.argsort(nearest, kind="stable")
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    # Summed in float64 (scikit-learn sums in the data's precision: the same means up to
    # rounding).
    sums = np.add.reduceat(x[order].astype(np.float64), starts, axis=0)
    centres = (sums / sizes[:, None]).astype(x.dtype)
    tolerance = 1e-4 * float(np.mean(np.var(x, axis=0, dtype=np.float64)))
    if float(((centres - seeds).astype(np.float64) ** 2).sum()) <= tolerance:
        return seeds, 0
    return centres, 1


def kmeans(x, n_clusters, *, seed=0, init="k-means++", max_iter=300, neighbors=None):
    """k-means clusters of the rows of `x` (scikit-learn's Lloyd iterations).

    With ``init="k-means++"`` the seeding has already assigned every point to its nearest seed
    (Lloyd's first assignment step, from distances it computed anyway): the first iteration's
    means are taken from it and scikit-learn runs the others, one pass over the n x k distances
    fewer. The clusters and iteration count are those of scikit-learn's `KMeans` from the same
    seeds (tested; where the first iteration's labels are already final, scikit-learn stops on
    unchanged labels there and on its tolerance here, the centres having not moved: the same
    count and clusters), up to the rounding of the means (summed in float64 here).

    Args:
      x: `[n, d]` finite float32 or float64 array.
      n_clusters: k, 1 <= k <= n.
      seed: Seeds the initial centres (an int in [0, 2**32 - 1]).
      init: ``"k-means++"`` (`kmeans_plusplus`, pooled draws), ``"k-means++-sklearn"``
        (`kmeans_plusplus` with ``draws="sklearn"``: scikit-learn's seeds and clusters for the
        same seed, slower at thousands of clusters) or ``"random"`` (k distinct rows drawn
        uniformly, scikit-learn's ``init="random"``).
      max_iter: At most this many Lloyd iterations.
      neighbors: None, or a `NeighborLists` of x's rows for the ``"k-means++"`` seeding
        (`kmeans_plusplus`; the same seeding, fewer distances computed); ignored by the other
        inits.

    Returns:
      ``(labels, info)``: `[n]` cluster index per row, and ``{"kmeans_init", "kmeans_iterations",
      "kmeans_converged", "seconds_kmeans_seeding", "seconds_kmeans_lloyd"}`` (converged:
      stopped before `max_iter`; the seconds are wall time, for benchmarks), with
      ``kmeans_seeding_rows_computed`` and ``kmeans_seeding_rows_from_neighbors`` (see
      `kmeans_plusplus`'s `stats`) for the k-means++ inits.
    """
    import threadpoolctl  # scikit-learn's own dependency
    from sklearn.cluster import KMeans

    seed, init, max_iter = check_settings(seed, init, max_iter)
    # Lloyd's iterations overflow as the seeding would: both see the rescaled data (the same
    # clusters, see `_rescaled`).
    x, n_clusters, seed, rescaled = _check_data(x, n_clusters, seed)
    if rescaled and neighbors is not None:
        if not isinstance(neighbors, NeighborLists):
            raise ValueError(checks.invalid("neighbors", "None or a NeighborLists", neighbors))
        # In the unscaled data's units: see `kmeans_plusplus`.
        neighbors = None
    started = time.perf_counter()
    counts, done = {}, 0  # done: Lloyd iterations done here (`_first_iteration`)
    if init != "random":
        draws = "sklearn" if init == "k-means++-sklearn" else "pooled"
        seeds = kmeans_plusplus(
            x, n_clusters, seed=seed, draws=draws, neighbors=neighbors, stats=counts
        )
        start = x[seeds]
        nearest = counts.pop("nearest_centre", None)
        if nearest is not None and max_iter > 1:
            start, done = _first_iteration(x, start, nearest)
        model = KMeans(n_clusters=n_clusters, init=start, n_init=1, max_iter=max_iter - done)
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
        "kmeans_iterations": int(model.n_iter_) + done,
        "kmeans_converged": bool(model.n_iter_ < max_iter - done),
        # scikit-learn's init="random" draws its centres inside fit: counted as Lloyd time.
        "seconds_kmeans_seeding": seeded - started,
        "seconds_kmeans_lloyd": time.perf_counter() - seeded,
        **{f"kmeans_seeding_{k}": v for k, v in counts.items()},
    }
