"""Retrieval evaluation: Recall@K, MAP@R, NMI and the spectrum of a test embedding.

Every item of the test set is a query against all the others (the query is never its own
neighbour). Neighbours are ranked by exact Euclidean distance in float32; ties in distance go to
the smaller index, so results are deterministic. Queries whose class has no other member cannot
retrieve a positive: they are left out of Recall@K and MAP@R and kept for NMI.

Scale. The N x N distance matrix is never stored: queries are processed in blocks of
`block_size` rows (one reused ``block_size x N`` float32 buffer). No query needs a sorted
neighbour list:

* Recall@K for every K follows from one number per query, the rank of its nearest positive
  (how many items come before it), which is a count of the items closer than that positive.
* MAP@R needs only the first R neighbours (R = other members of the query's class). An upper
  bound of the R-th smallest distance is read from a fixed subset of columns; the few items under
  it are sorted exactly.
* Both questions are about a query's nearest items. The scan lists, per query, every item
  below a radius (about `neighbor_list_size`, 512 by default, `kmeans.NeighborLists`); a count
  or a candidate set up to a limit below the radius comes from those few hundred entries
  instead of another pass over the N columns (the same numbers: the list holds every item up
  to the limit). `evaluate_retrieval` keeps the lists for its NMI: the k-means++ seeding takes
  its candidates' distances from them instead of computing them again.

Stanford Online Products' test split (60,502 x 128) takes about 20 s this way on a 2-core CPU
(see `benchmarks/retrieval_eval.py`).
"""

import collections.abc
import concurrent.futures
import os
import time

import numpy as np

from tf_svmax import checks
from tf_svmax.metrics import kmeans

# Columns read to bound each query's R-th nearest distance for MAP@R. More columns make the
# bound tighter (fewer candidates to sort) at the cost of a larger partial sort.
_BOUND_COLUMNS = 2048
# Neighbours listed per point by the scan for the k-means++ seeding (`kmeans.NeighborLists`;
# 8 bytes each: 250 MB at SOP's 60,502 points) and the most a crowded row may list.
# At SOP shape a list's radius then exceeds the largest D^2 left after the first few hundred
# centres, so most candidates' rows come from their lists (`benchmarks/retrieval_eval.py`).
_LIST_SIZE = 512
_LIST_CAP_FACTOR = 4
# Sampled columns below a list's radius: few (its count then varies by about 1 / sqrt of this
# from row to row, which the cap bounds), so that finding the radius costs little.
_LIST_RADIUS_RANK = 6
# A block's questions about its nearest keys are answered from its neighbour lists when the
# lists cover more than this fraction of its rows (a pass over the rest), else by one pass.
_LISTS_WORTH_IT = 0.5
# Seconds between two plain progress lines (verbose=2, or 1 off a terminal).
_PROGRESS_SECONDS = 10.0


def _check_inputs(embeddings, labels):
    x = checks.finite_matrix(embeddings, "embeddings", dtype=np.float32, min_rows=2)
    # Class ids (`checks.class_labels`): no NaN (np.unique would merge every NaN into one
    # class), no None (np.unique cannot order it), no list mixing 1 and "1" (NumPy would turn
    # both into "1", one class).
    y = checks.class_labels(labels, "labels")
    if len(y) != len(x):
        raise ValueError(
            f"Invalid value for argument `labels`. Expected one label per embedding "
            f"({len(x)}). Received: {len(y)} labels."
        )
    if not np.all(np.isfinite(np.einsum("ij,ij->i", x, x))):
        raise ValueError(
            checks.invalid(
                "embeddings", "squared norms that fit in float32 (< 3.4e38)", "<huge values>"
            )
        )
    return x, y


def _check_ks(ks):
    """Sorted distinct K values; each must be an int >= 1 (1.5, "a" or NaN are refused, never
    truncated)."""
    values = list(np.atleast_1d(ks)) if np.size(ks) else []
    if not values:
        raise ValueError(checks.invalid("ks", "a non-empty list of ints >= 1", ks))
    for k in values:
        if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(checks.invalid("ks", "a non-empty list of ints >= 1", ks))
    return sorted({int(k) for k in values})


def nearest_neighbors(embeddings, k, *, block_size=1024):
    """Indices `[n, k]` of each row's k nearest other rows (Euclidean), nearest first.

    Ties go to the smaller index. Each block of rows is fully sorted (O(n log n) per row): use it
    to inspect neighbours; the metrics below do not need sorted lists.
    """
    x = checks.finite_matrix(embeddings, "embeddings", dtype=np.float32, min_rows=2)
    n = len(x)
    k = min(checks.check_positive_int(k, "k"), n - 1)
    block_size = checks.check_positive_int(block_size, "block_size")
    squared = np.einsum("ij,ij->i", x, x)
    out = np.empty((n, k), dtype=np.int64)
    for start in range(0, n, block_size):
        stop = min(start + block_size, n)
        d = _ranking_keys(x[start:stop], x.T, squared)
        d[np.arange(stop - start), np.arange(start, stop)] = np.inf  # never the query itself
        out[start:stop] = np.argsort(d, axis=1, kind="stable")[:, :k]
    return out


def neighbor_lists(embeddings, *, size=_LIST_SIZE, block_size=1024):
    """Every row's neighbours up to a radius, for `tf_svmax.metrics.kmeans.kmeans_plusplus`
    (`kmeans.NeighborLists`): row i lists about `size` points (at most `_LIST_CAP_FACTOR` times
    that) and a radius below which every other point is listed. `evaluate_retrieval` builds
    these in its scan for its NMI; this builds them alone (one scan, blocks of `block_size`).
    """
    x = checks.finite_matrix(embeddings, "embeddings", dtype=np.float32, min_rows=2)
    size = checks.check_positive_int(size, "size")
    block_size = checks.check_positive_int(block_size, "block_size")
    return _scan(x, None, need_map=False, block_size=block_size, list_size=size, keep_lists=True)[2]


def _ranking_keys(queries, x_t, squared, out=None):
    """``|x_j|^2 - 2 q.x_j``: the squared distance minus the per-query constant ``|q|^2``,
    which leaves each query's ranking unchanged and saves a pass over the block."""
    out = np.matmul(-2.0 * queries, x_t, out=out)
    out += squared[np.newaxis, :]
    return out


class _ClassIndex:
    """Class membership tables: members of class c are ``order[starts[c]:starts[c]+sizes[c]]``."""

    def __init__(self, labels):
        _, self.codes = np.unique(labels, return_inverse=True)
        self.codes = self.codes.reshape(-1)
        self.order = np.argsort(self.codes, kind="stable")
        self.sizes = np.bincount(self.codes)
        self.starts = np.concatenate([[0], np.cumsum(self.sizes)[:-1]])
        self.others = self.sizes[self.codes] - 1  # R of each query: positives it can retrieve

    def members(self, rows):
        """`[m, max_size]` member indices of each row's class, padded by repeating the last
        member, and the mask of the real (non-padding) entries."""
        codes = self.codes[rows]
        slots = np.arange(self.sizes.max())
        valid = slots[np.newaxis, :] < self.sizes[codes][:, np.newaxis]
        offsets = np.minimum(slots, self.sizes[codes][:, np.newaxis] - 1)
        return self.order[self.starts[codes][:, np.newaxis] + offsets], valid


def _block_statistics(d, rows, classes, stride, need_map, near=None):
    """Nearest-positive rank and AP@R of the queries `rows`, whose keys are the rows of `d`
    (`near`: the block's neighbour lists, `_Near`, which spare full passes over `d`)."""
    members, valid = classes.members(rows)
    member_d = np.take_along_axis(d, members, axis=1)  # the query itself is +inf here
    rank = _first_positive_rank(d, members, valid, member_d, near)
    if not need_map:
        return rank, None
    # The R-th nearest is no farther than the farthest of the R positives.
    is_positive = valid & (members != rows[:, np.newaxis])
    farthest_positive = np.where(is_positive, member_d, -np.inf).max(axis=1)
    return rank, _average_precision_at_r(d, rows, classes, stride, farthest_positive, near)


def _count(mask):
    # Summing the bytes into int32 (exact: a row has fewer than 2**31 columns) is 1.7x as fast
    # as into int64, and twice as fast as np.count_nonzero(axis=1).
    return mask.view(np.uint8).sum(axis=1, dtype=np.int32).astype(np.int64)


class _Near:
    """The keys of a block below each row's radius, every one of them (the scan's neighbour
    lists): a question about the keys up to a limit below a row's radius is answered from its
    few hundred listed keys instead of a pass over all n."""

    def __init__(self, d, flat, counts, key_radius):
        m, n = d.shape
        self.row = np.repeat(np.arange(m), counts)
        self.column = flat - self.row * n
        self.key = d.ravel()[flat]
        self.radius = key_radius

    def covers(self, limit):
        """Rows whose keys up to `limit` are all listed (listed: key < radius)."""
        return limit < self.radius


def _count_below(d, limit, near, *, inclusive):
    """Per row of `d`, how many keys are below `limit` (or equal to it, `inclusive`)."""
    compare = np.less_equal if inclusive else np.less
    if near is None:
        return _count(compare(d, limit[:, None]))
    covered = near.covers(limit)
    counts = np.bincount(
        near.row, weights=compare(near.key, limit[near.row]), minlength=len(d)
    ).astype(np.int64)
    rest = np.flatnonzero(~covered)
    if len(rest):
        counts[rest] = _count(compare(d[rest], limit[rest, None]))
    return counts


def _first_positive_rank(d, members, valid, member_d, near=None):
    """Number of items ranked before each query's nearest positive (ties: smaller index)."""
    nearest = member_d.min(axis=1)
    n = d.shape[1]
    # The nearest positive: the smallest index among positives at the nearest distance.
    first = np.where(member_d == nearest[:, None], members, n).min(axis=1)
    if near is not None and not near.covers(nearest).mean() > _LISTS_WORTH_IT:
        near = None  # most rows need a full pass anyway: one over the whole block
    closer = _count_below(d, nearest, near, inclusive=False)  # only negatives can be closer
    at_most = _count_below(d, nearest, near, inclusive=True)
    positives_at = np.count_nonzero((member_d == nearest[:, None]) & valid, axis=1)
    rank = closer
    # Negatives at exactly the nearest positive's distance come first if their index is smaller.
    for i in np.flatnonzero(at_most - closer > positives_at):
        rank[i] += np.count_nonzero(d[i, : first[i]] == nearest[i])
    return rank


def _average_precision_at_r(d, rows, classes, stride, farthest_positive, near=None):
    """AP@R of each query: ``(1/R) sum_{i<=R} P(i) rel(i)`` over its first R neighbours."""
    m, n = d.shape
    r = classes.others[rows]
    r_max = int(r.max())
    if r_max == 0:
        return np.zeros(m)
    # A second upper bound of each query's R-th smallest key: the R-th smallest of every
    # `stride`-th column (tight when the positives are far away).
    sampled = np.partition(d[:, ::stride], r_max - 1, axis=1)[:, :r_max]
    sampled_bound = np.sort(sampled, axis=1)[np.arange(m), np.maximum(r, 1) - 1]
    bound = np.where(r > 0, np.minimum(sampled_bound, farthest_positive), -np.inf)
    if near is not None and near.covers(bound).mean() > _LISTS_WORTH_IT:
        # Every key up to a covered row's bound is listed: its candidates come from the list,
        # the other rows' from a pass over theirs.
        covered = near.covers(bound)
        take = covered[near.row] & (near.key <= bound[near.row])
        rest = np.flatnonzero(~covered)
        rest_rows, rest_cols = _candidates(d[rest], bound[rest], r[rest], r_max)
        cand_rows = np.concatenate([near.row[take], rest[rest_rows]])
        cand_cols = np.concatenate([near.column[take], rest_cols])
    else:
        cand_rows, cand_cols = _candidates(d, bound, r, r_max)
    return _ap_of_candidates(d, rows, classes, r, cand_rows, cand_cols)


def _candidates(d, bound, r, r_max):
    """`(rows, columns)` of every key up to each row's bound (each row's R nearest at least)."""
    n = d.shape[1]
    mask = d <= bound[:, None]
    # Rows with very many keys under the bound (a collapsed embedding: everything tied) take
    # an exact per-row selection instead, so memory stays O(block), not O(block x n).
    crowded = np.flatnonzero(_count(mask) > max(4096, 32 * r_max))
    mask[crowded] = False
    flat = np.flatnonzero(mask)  # 1-D nonzero: far faster than 2-D
    cand_rows, cand_cols = np.divmod(flat, n)
    extra_rows, extra_cols = [cand_rows], [cand_cols]
    for i in crowded:
        kth = np.partition(d[i], r[i] - 1)[r[i] - 1]
        below = np.flatnonzero(d[i] < kth)
        cols = np.concatenate([below, np.flatnonzero(d[i] == kth)[: r[i] - len(below)]])
        extra_rows.append(np.full(len(cols), i))
        extra_cols.append(cols)
    return np.concatenate(extra_rows), np.concatenate(extra_cols)


def _ap_of_candidates(d, rows, classes, r, cand_rows, cand_cols):
    """AP@R from candidate keys that include each query's first R neighbours."""
    m = len(d)
    cand_d = d[cand_rows, cand_cols]
    # Exact order by (query, distance, index); each query's first R candidates are its first R
    # neighbours because everything up to the bound is a candidate.
    order = np.lexsort((cand_cols, cand_d, cand_rows))
    cand_rows, cand_cols = cand_rows[order], cand_cols[order]
    position = np.arange(len(cand_rows)) - np.searchsorted(cand_rows, cand_rows, side="left")
    keep = position < r[cand_rows]
    cand_rows, cand_cols, position = cand_rows[keep], cand_cols[keep], position[keep]
    relevant = classes.codes[cand_cols] == classes.codes[rows[cand_rows]]
    hits = np.cumsum(relevant)
    row_start = np.searchsorted(cand_rows, cand_rows, side="left")
    hits_before_row = np.concatenate([[0], hits])[row_start]
    precision = (hits - hits_before_row) / (position + 1.0)
    totals = np.bincount(cand_rows, weights=precision * relevant, minlength=m)
    return np.where(r > 0, totals / np.maximum(r, 1), 0.0)


class _ListCollector:
    """Per block of queries, every point whose squared distance is below the query's radius
    (`kmeans.NeighborLists`): about `size` per query, at most `_LIST_CAP_FACTOR` times that."""

    def __init__(self, n, size, query_squared, *, keep):
        self.keep = keep  # False: each block's lists serve its own statistics, then go
        self.size = min(size, n - 1)
        self.cap = max(1, min(n - 1, _LIST_CAP_FACTOR * self.size))
        # The radius is each query's `rank`-th smallest key among every `stride`-th column,
        # with `rank` about _LIST_RADIUS_RANK: about `size` points fall below it.
        self.stride = max(1, self.size // _LIST_RADIUS_RANK)
        sampled = len(range(0, n, self.stride))
        self.rank = max(1, min(sampled, round(self.size * sampled / n)))
        self.query_squared = query_squared
        self.blocks = {}

    def __call__(self, d, rows):
        """`d`: the keys ``|x_j|^2 - 2 q.x_j`` of the queries `rows` (+inf at the query)."""
        m, n = d.shape
        key_radius = np.partition(d[:, :: self.stride], self.rank - 1, axis=1)[:, self.rank - 1]
        flat = np.flatnonzero(d < key_radius[:, None])  # 1-D nonzero: far faster than 2-D
        counts = np.diff(np.searchsorted(flat, np.arange(m + 1) * n))
        crowded = np.flatnonzero(counts > self.cap)
        if len(crowded):
            # A crowded row (many points within the sampled radius: duplicates, a collapsed
            # embedding) gets the radius of its cap-th nearest instead (fewer than cap points
            # below it), so memory stays bounded.
            key_radius[crowded] = np.partition(d[crowded], self.cap - 1, axis=1)[:, self.cap - 1]
            flat = np.flatnonzero(d < key_radius[:, None])
            counts = np.diff(np.searchsorted(flat, np.arange(m + 1) * n))
        near = _Near(d, flat, counts, key_radius)
        if self.keep:
            # Squared distances: the key plus |q|^2 (a rounding the seeding allows for),
            # clamped at 0 as the seeding clamps its own (the expanded form can round below 0).
            values = near.key + self.query_squared[rows][near.row]
            np.maximum(values, 0, out=values)
            radii = key_radius + self.query_squared[rows]
            self.blocks[int(rows[0])] = (counts, near.column.astype(np.int32), values, radii)
        return near

    def lists(self):
        if not self.keep:
            return None
        starts = sorted(self.blocks)
        counts = np.concatenate([self.blocks[start][0] for start in starts])
        radii = np.concatenate([self.blocks[start][3] for start in starts])
        indptr = np.concatenate([[0], np.cumsum(counts)])
        columns = np.empty(indptr[-1], np.int32)
        values = np.empty(indptr[-1], radii.dtype)
        # Block by block, each freed once copied: the lists are never held twice.
        for start in starts:
            _, block_columns, block_values, _ = self.blocks.pop(start)
            columns[indptr[start] : indptr[start] + len(block_columns)] = block_columns
            values[indptr[start] : indptr[start] + len(block_values)] = block_values
        return kmeans.NeighborLists(indptr, columns, values, radii)


def _scan(x, classes, *, need_map, block_size, progress=None, list_size=None, keep_lists=False):
    """Nearest-positive ranks and AP@R of every query, block by block (`classes` None: none),
    and each point's neighbour lists (`_ListCollector`, about `list_size` each, None: none),
    which answer most of the block's questions about its nearest keys (`_Near`) and, with
    `keep_lists`, are returned for the k-means++ seeding (else None)."""
    n = len(x)
    x_t = np.ascontiguousarray(x.T)
    squared = np.einsum("ij,ij->i", x, x)
    collector = None
    if list_size:
        collector = _ListCollector(n, list_size, squared, keep=keep_lists)
    # At least 2R + 1 sampled columns, so that R of them are finite (one may be the query).
    r_max = 0 if classes is None else int(classes.others.max())
    stride = max(1, n // max(_BOUND_COLUMNS, 2 * r_max + 1))
    # Identical rows must get identical keys, but BLAS rounds differently by position in the
    # product: compute keys for the distinct rows only and copy them to their duplicates.
    distinct, inverse = np.unique(x, axis=0, return_inverse=True)
    duplicates = len(distinct) < n
    if duplicates:
        x_t = np.ascontiguousarray(distinct.T)
        squared = np.einsum("ij,ij->i", distinct, distinct)
        keys = np.empty((min(block_size, n), len(distinct)), dtype=np.float32)
    rank = np.zeros(n, dtype=np.int64)
    ap = np.zeros(n)
    buffer = np.empty((min(block_size, n), n), dtype=np.float32)
    workers = max(1, min(os.cpu_count() or 1, 8))

    def stats(d, rows):
        d[np.arange(len(rows)), rows] = np.inf  # never the query itself
        near = None if collector is None else collector(d, rows)
        if classes is None:
            return
        rank[rows], block_ap = _block_statistics(d, rows, classes, stride, need_map, near)
        if need_map:
            ap[rows] = block_ap

    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for start in range(0, n, block_size):
            stop = min(start + block_size, n)
            if duplicates:
                part = _ranking_keys(x[start:stop], x_t, squared, out=keys[: stop - start])
                d = np.take(part, inverse.reshape(-1), axis=1, out=buffer[: stop - start])
            else:
                d = _ranking_keys(x[start:stop], x_t, squared, out=buffer[: stop - start])
            # NumPy releases the GIL in these array passes: split the rows over the cores.
            chunks = np.array_split(np.arange(start, stop), workers)
            futures = [
                pool.submit(stats, d[c[0] - start : c[-1] + 1 - start], c) for c in chunks if len(c)
            ]
            for future in futures:
                future.result()
            if progress is not None:
                progress(stop)
    return rank, ap, None if collector is None else collector.lists()


class _PlainProgress:
    """Progress as plain lines, for a log: one every `_PROGRESS_SECONDS` and one at the end."""

    def __init__(self, total):
        self.total = total
        self.started = self.printed = time.perf_counter()

    def __call__(self, done):
        now = time.perf_counter()
        if done >= self.total or now - self.printed >= _PROGRESS_SECONDS:
            self.printed = now
            print(
                f"retrieval: {done}/{self.total} queries ({now - self.started:.0f} s)", flush=True
            )


def _checked_scan(
    embeddings, labels, block_size, *, need_map, verbose=0, list_size=_LIST_SIZE, keep_lists=False
):
    """Checks the inputs, then one `_scan` (`verbose`, resolved by
    `checks.progress_verbosity`: 1 a progress bar, 2 plain lines):
    ``(x, y, classes, ranks, average precisions, neighbour lists or None)``."""
    x, y = _check_inputs(embeddings, labels)
    block_size = checks.check_positive_int(block_size, "block_size")
    classes = _ClassIndex(y)
    progress = None
    if verbose == 1:
        import keras

        progress = keras.utils.Progbar(len(x), unit_name="query").update
    elif verbose == 2:
        progress = _PlainProgress(len(x))
    rank, ap, lists = _scan(
        x,
        classes,
        need_map=need_map,
        block_size=block_size,
        progress=progress,
        list_size=list_size,
        keep_lists=keep_lists,
    )
    return x, y, classes, rank, ap, lists


def first_positive_ranks(embeddings, labels, *, block_size=1024):
    """`[n]` int64: how many items rank before each query's nearest same-class item.

    Recall@K is ``mean(ranks < K)`` over queries with a positive; ``-1`` marks a query whose
    class has no other member.
    """
    _, _, classes, rank, _, _ = _checked_scan(embeddings, labels, block_size, need_map=False)
    return np.where(classes.others > 0, rank, -1)


def recall_at_k(embeddings, labels, ks=(1, 2, 4, 8), *, block_size=1024):
    """{k: fraction of queries with a same-class item among their k nearest neighbours}."""
    ks = _check_ks(ks)
    _, _, classes, rank, _, _ = _checked_scan(embeddings, labels, block_size, need_map=False)
    return _recalls(rank, classes, ks)


def _recalls(rank, classes, ks):
    valid = classes.others > 0
    if not valid.any():
        return {k: 0.0 for k in ks}
    return {k: float(np.mean(rank[valid] < k)) for k in ks}


def map_at_r(embeddings, labels, *, block_size=1024):
    """MAP@R (Musgrave et al., 2020): R = number of other members of the query's class;
    ``(1/R) sum_{i<=R} P(i) * rel(i)`` averaged over queries that have a positive."""
    _, _, classes, _, ap, _ = _checked_scan(embeddings, labels, block_size, need_map=True)
    return _mean_ap(ap, classes)


def _mean_ap(ap, classes):
    valid = classes.others > 0
    return float(ap[valid].mean()) if valid.any() else 0.0


def nmi(embeddings, labels, *, seed=0, max_iter=300, init="k-means++"):
    """NMI between the labels and k-means clusters, k = number of classes (scikit-learn).

    ``NMI = I(labels, clusters) / sqrt(H(labels) H(clusters))`` (dissertation Sec. 5.4.3, after
    Song et al. 2016): the geometric normalisation, not scikit-learn's default arithmetic one.

    Args:
      seed, max_iter, init: k-means settings (`tf_svmax.metrics.kmeans.kmeans`). With
        thousands of classes (Stanford Online Products: 11,316) each Lloyd iteration costs
        ``n * k * d`` multiply-adds (1-2 s on 2 CPU cores). The default greedy k-means++
        seeding (pooled draws) costs at most one ``n x n`` distance matrix, about 5 Lloyd
        iterations there; ``init="k-means++-sklearn"`` reproduces scikit-learn's seeds for the
        same seed at ``(2 + ln k) * n * k * d`` (several minutes there); ``init="random"``
        skips the seeding but gives a lower NMI (0.88 vs 0.92 on an SOP-shaped set): report
        which was used.

    Returns:
      The NMI, a float in [0, 1].
    """
    x, y = _check_inputs(embeddings, labels)
    return _nmi(x, y, seed=seed, max_iter=max_iter, init=init)[0]


def _nmi(x, y, *, seed, max_iter, init, neighbors=None):
    from sklearn.metrics import normalized_mutual_info_score

    clusters, info = kmeans.kmeans(
        x, len(np.unique(y)), seed=seed, init=init, max_iter=max_iter, neighbors=neighbors
    )
    score = normalized_mutual_info_score(y, clusters, average_method="geometric")
    return float(score), info


def evaluate_retrieval(
    embeddings,
    labels,
    *,
    ks=(1, 2, 4, 8),
    compute_nmi=True,
    compute_map_at_r=True,
    compute_spectrum=True,
    seed=0,
    kmeans_init="k-means++",
    kmeans_max_iter=300,
    block_size=1024,
    neighbor_list_size=_LIST_SIZE,
    verbose=0,
):
    """All retrieval metrics of a test embedding in one call.

    Args:
      embeddings: `[n, d]` finite real array, n >= 2 (the test split's embeddings).
      labels: `[n]` class ids: numbers (exact values) or strings, one kind; no NaN or None.
      ks: The K of Recall@K.
      compute_nmi, compute_map_at_r, compute_spectrum: Which extra metrics to compute.
      seed, kmeans_init, kmeans_max_iter: k-means settings for NMI (see `nmi`), checked
        even when `compute_nmi` is False.
      block_size: Queries per block (memory: ``block_size x n`` float32).
      neighbor_list_size: Neighbours the scan lists per point, about (at most 4x; each
        point's list holds every point below a radius, `kmeans.NeighborLists`): they answer
        most rank and MAP@R questions without another pass over the block, and the default
        k-means++ seeding takes its candidates' distances from them instead of computing
        them again (the same seeds: see `kmeans.kmeans_plusplus`). Memory: 8 bytes each, for
        every point while the seeding runs (250 MB at SOP's 60,502 points); 0: no lists.
      verbose: 0 silent; 1 a progress bar on a terminal, and plain lines (as 2) when stdout
        is not one (a log file: the bar's carriage returns and colour codes would pile up
        there); 2 a plain line per interval and per stage.

    Returns:
      A dict with ``recall_at_<k>`` for each k, ``map_at_r``, ``nmi`` (with
      ``kmeans_init``, ``kmeans_iterations``, ``kmeans_converged``, for the k-means++ inits
      ``kmeans_seeding_rows_computed`` and ``kmeans_seeding_rows_from_neighbors`` (candidates'
      distance rows computed by the seeding or taken from the scan's lists) and the stage
      times ``seconds_nmi``, ``seconds_kmeans_seeding``, ``seconds_kmeans_lloyd``), ``s_mu``
      with its bounds ``s_mu_lower`` and ``s_mu_upper`` (mean singular value of the embedding
      matrix, the bounds assuming unit-norm rows), ``num_queries`` (queries with a positive),
      ``num_embeddings``, ``num_classes`` and ``seconds``.

    Example:
      >>> evaluate_retrieval(embeddings, labels, ks=(1, 10, 100, 1000))["recall_at_1"]
    """
    started = time.perf_counter()
    ks = _check_ks(ks)
    for arg, value in (
        ("compute_nmi", compute_nmi),
        ("compute_map_at_r", compute_map_at_r),
        ("compute_spectrum", compute_spectrum),
    ):
        checks.check_bool(value, arg)
    verbose = checks.progress_verbosity(verbose)
    # Checked now, not after the scan (minutes at scale) that comes before k-means.
    seed, kmeans_init, kmeans_max_iter = kmeans.check_settings(seed, kmeans_init, kmeans_max_iter)
    # The scan computes every pairwise distance: it keeps each point's nearest ones for the
    # k-means++ seeding, which then need not compute most of them again (the same seeds).
    neighbor_list_size = checks.check_non_negative_int(neighbor_list_size, "neighbor_list_size")
    x, y, classes, rank, ap, lists = _checked_scan(
        embeddings,
        labels,
        block_size,
        need_map=compute_map_at_r,
        verbose=verbose,
        list_size=neighbor_list_size,
        keep_lists=compute_nmi and kmeans_init == "k-means++",
    )
    results = {f"recall_at_{k}": v for k, v in _recalls(rank, classes, ks).items()}
    if compute_map_at_r:
        results["map_at_r"] = _mean_ap(ap, classes)
    results["seconds_neighbors"] = time.perf_counter() - started
    if compute_nmi:
        if verbose:
            print(
                f"NMI: k-means with {len(classes.sizes)} clusters on {len(x)} points "
                f"(init={kmeans_init}, max_iter={kmeans_max_iter}) ...",
                flush=True,
            )
        stage = time.perf_counter()
        results["nmi"], info = _nmi(
            x, y, seed=seed, max_iter=kmeans_max_iter, init=kmeans_init, neighbors=lists
        )
        del lists  # 250 MB at SOP shape: freed before the spectrum
        results.update(info, seconds_nmi=time.perf_counter() - stage)
    if compute_spectrum:
        results.update(_spectrum(x))
    results.update(
        num_queries=int(np.count_nonzero(classes.others > 0)),
        num_embeddings=len(x),
        num_classes=len(classes.sizes),
        seconds=time.perf_counter() - started,
    )
    return results


# The entries of an `evaluate_retrieval` result that are metrics; the others are bookkeeping
# (counts, k-means details, stage times).
_METRIC_PREFIXES = ("recall_at_", "map_at_r", "nmi", "s_mu")


def split_retrieval_results(results):
    """``{"metrics": ..., "info": ...}`` of an `evaluate_retrieval` result: the metrics
    (``recall_at_<k>``, ``map_at_r``, ``nmi``, ``s_mu`` and its bounds), logged and printed,
    apart from the bookkeeping (``num_*``, ``kmeans_*``, ``seconds*``).

    Raises:
      TypeError: `results` is not a mapping with str keys (metric names).

    Example:
      >>> split_retrieval_results(evaluate_retrieval(embeddings, labels))["metrics"]
    """
    expected = "a mapping of metric names (str) to values, as evaluate_retrieval returns"
    if not isinstance(results, collections.abc.Mapping):
        raise TypeError(checks.invalid("results", expected, f"<{type(results).__name__}>"))
    key = next((k for k in results if not isinstance(k, str)), None)
    if key is not None:
        raise TypeError(
            checks.invalid(
                "results", expected, f"<mapping with the {type(key).__name__} key {key!r}>"
            )
        )
    metrics = {k: v for k, v in results.items() if k.startswith(_METRIC_PREFIXES)}
    return {"metrics": metrics, "info": {k: v for k, v in results.items() if k not in metrics}}


def _spectrum(x):
    """The test embedding's mean singular value and its SVMax bounds, in float64 NumPy (LAPACK's
    singular values): the same number on every backend, where JAX would compute a float64
    backend tensor in float32 (no `jax_enable_x64`)."""
    from tf_svmax.ops import spectral  # noqa: PLC0415 (the bounds only: Python floats)

    lower, upper = spectral.svmax_bounds(x.shape[0], x.shape[1])
    x = x.astype(np.float64)
    # Singular values from the smaller Gram matrix (d x d for a test split's b >> d): 4x faster
    # than an SVD at Stanford Online Products' 60,502 x 128, equal to 1e-15 relative there.
    gram = x.T @ x if x.shape[0] >= x.shape[1] else x @ x.T
    # Rounding leaves eigenvalues of a rank-deficient Gram matrix at -1e-16, not 0: clamped.
    singular = np.sqrt(np.clip(np.linalg.eigvalsh(gram), 0.0, None))
    s_mu = float(singular.sum() / min(x.shape))  # SVMax paper Eq. 1: mean over min(b, d) values
    return {"s_mu": s_mu, "s_mu_lower": lower, "s_mu_upper": upper}
