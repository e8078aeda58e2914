"""Pairwise distance and similarity matrices: the one table of the names the losses take
(`DISTANCES`, `check_distance`, `distance_matrix`), tensorflow-addons' matrices (values and
gradients) and the SVMax originals' `cdist`.

`pairwise_distance` expands ``||a - b||^2 = ||a||^2 + ||b||^2 - 2 a.b`` (one matrix product),
clamps the rounding negatives to zero, and gives exactly zero, with zero gradient, where the
squared distance is not positive (the diagonal, duplicates). The square root is taken of
``d^2 + 1e-16`` at those entries only, so its derivative never sees 0.
"""

import collections

from keras import ops

from tf_svmax import _backend, checks
from tf_svmax._backend.common import l2_normalize_rows

# Added under the square root where the squared distance is <= 0; the result is then masked to
# zero, so this only keeps the derivative of sqrt finite (sqrt'(0) = inf, and inf * 0 = NaN).
_SQRT_GUARD = 1e-16


def pairwise_distance(feature, squared=False, *, rows=None):
    """Euclidean distance matrix ``out[i, j] = ||feature[i] - feature[j]||_2``.

    Args:
      feature: `[n, d]` float tensor.
      squared: Return squared distances.
      rows: Optional ``(start, count)``: only the rows ``start .. start + count - 1`` of the
        matrix (`[count, n]`), each equal to that row of the full matrix. A replica computing
        its own anchors of a gathered batch needs no more.

    Returns:
      `[n, n]` (or `[count, n]`) tensor of the dtype of `feature` (float16/bfloat16 computed in
      float32), zero where a row meets itself.

    Example:
      >>> pairwise_distance([[0.0, 0.0], [3.0, 4.0]])  # [[0, 5], [5, 0]]
    """
    x, dtype = checks.float_matrix(feature, "feature")  # half precision computed in float32
    queries, start, count = _row_range(x, rows)
    # Row norms as a column plus column norms as a row, minus twice the Gram matrix. The same
    # sequence of operations as tensorflow-addons, so that the rounding, and hence the gradient
    # for near-duplicate rows (where the expansion cancels), matches it to the last bits.
    x_t = ops.transpose(x)
    d2 = ops.add(
        ops.sum(ops.square(queries), axis=1, keepdims=True),
        ops.sum(ops.square(x_t), axis=0, keepdims=True),
    ) - 2.0 * _backend.matmul(queries, x_t)
    # Rounding can make the expansion slightly negative; a distance is never negative.
    d2 = _backend.at_least(d2, 0.0)
    zero = d2 <= 0.0
    if squared:
        distances = d2
    else:
        distances = ops.sqrt(d2 + ops.cast(zero, x.dtype) * _SQRT_GUARD)
    distances = distances * ops.cast(ops.logical_not(zero), x.dtype)
    # The diagonal is exactly zero (the expansion leaves rounding noise there).
    return ops.cast(distances * _off_diagonal(x, start, count), dtype)


def _row_range(x, rows):
    """``(queries, start, count)``: the rows ``start .. start + count - 1`` of `x` (all rows
    when `rows` is None)."""
    if rows is None:
        return x, 0, ops.shape(x)[0]
    start, count = rows
    return x[start : start + count], start, count


def _off_diagonal(x, start, count):
    """`[count, n]` of ones with a zero where row ``start + i`` of `x` meets itself."""
    self_columns = ops.arange(count, dtype="int32") + start
    return 1.0 - ops.one_hot(self_columns, ops.shape(x)[0], dtype=x.dtype)


def angular_distance(feature, *, rows=None):
    """Angular (cosine) distance matrix ``out[i, j] = 1 - cos(feature[i], feature[j])``, >= 0.

    Args:
      feature: `[n, d]` float tensor (rows need not be normalized).
      rows: Optional ``(start, count)``: only those rows of the matrix (`pairwise_distance`).

    Returns:
      `[n, n]` (or `[count, n]`) tensor of the dtype of `feature`.
    """
    x, dtype = checks.float_matrix(feature, "feature")  # half precision computed in float32
    unit = l2_normalize_rows(x)
    queries, _, _ = _row_range(unit, rows)
    # Rounding can push 1 - cos slightly below zero for (near-)identical rows.
    distances = _backend.at_least(1.0 - _backend.matmul(queries, unit, transpose_b=True), 0.0)
    return ops.cast(distances, dtype)


# The one table of the names a loss's `distance=` (TFA's `distance_metric=`) accepts, each with
# one meaning wherever a loss accepts it (pinned against NumPy/SciPy in
# tests/ops/test_distances.py), and whether it is a distance (small for close rows) or a
# similarity (large for close rows). TFA's names keep TFA's definitions, the cdist names the SVMax
# originals' (`cdist`); the two families differ in the last bits and at zero distance, so a TFA
# name is never silently an alias of a cdist one:
#   "L2"                 distance   ||a - b||, TFA's Gram expansion, exactly 0 at a row itself and
#                                   duplicates (pytorch-metric-learning's `LpDistance` unnormalized)
#   "squared-L2"         distance   ||a - b||^2, the same expansion
#   "angular"            distance   1 - cos(a, b) of the L2-normalized rows, >= 0
#   "euclidean"          distance   sqrt(||a - b||^2 + 1e-12) (1e-6 at zero distance)
#   "sqeuclidean"        distance   ||a - b||^2 (float64 Gram expansion)
#   "cityblock"          distance   sum |a - b|
#   "cosine"             distance   1 - a.b of the rows as given (not normalized: the originals
#                                   assume unit rows)
#   "cosine_similarity"  similarity cos(a, b) of the L2-normalized rows (pytorch-metric-learning's
#                                   `CosineSimilarity`)
#   "dot"                similarity a.b of the rows as given (its `DotProductSimilarity`
#                                   unnormalized)
DISTANCE = "distance"
SIMILARITY = "similarity"


class Distance(collections.namedtuple("Distance", ["name", "kind", "matrix"])):
    """One entry of `DISTANCES`: its `name`, its `kind` (`DISTANCE`: small for close rows, or
    `SIMILARITY`: large for close rows) and ``matrix(feature, rows=None)``, the `[n, n]` matrix
    of the rows of `feature` (`[count, n]` for ``rows=(start, count)``) in `feature`'s dtype."""


def _tfa_l2(squared):
    return lambda feature, rows=None: pairwise_distance(feature, squared=squared, rows=rows)


def _cdist_rows(metric):
    def matrix(feature, rows=None):
        x, dtype = checks.float_matrix(feature, "feature")  # half precision computed in float32
        queries, _, _ = _row_range(x, rows)
        return ops.cast(cdist(queries, x, metric), dtype)

    return matrix


def _inner_products(normalize):
    def matrix(feature, rows=None):
        x, dtype = checks.float_matrix(feature, "feature")  # half precision computed in float32
        unit = l2_normalize_rows(x) if normalize else x
        queries, _, _ = _row_range(unit, rows)
        return ops.cast(_backend.matmul(queries, unit, transpose_b=True), dtype)

    return matrix


DISTANCES = {
    entry.name: entry
    for entry in (
        Distance("L2", DISTANCE, _tfa_l2(squared=False)),
        Distance("squared-L2", DISTANCE, _tfa_l2(squared=True)),
        Distance("angular", DISTANCE, angular_distance),
        Distance("euclidean", DISTANCE, _cdist_rows("euclidean")),
        Distance("sqeuclidean", DISTANCE, _cdist_rows("sqeuclidean")),
        Distance("cityblock", DISTANCE, _cdist_rows("cityblock")),
        Distance("cosine", DISTANCE, _cdist_rows("cosine")),
        Distance("cosine_similarity", SIMILARITY, _inner_products(normalize=True)),
        Distance("dot", SIMILARITY, _inner_products(normalize=False)),
    )
}
# The names of each kind, in the table's order.
DISTANCE_NAMES = tuple(name for name, entry in DISTANCES.items() if entry.kind == DISTANCE)
SIMILARITY_NAMES = tuple(name for name, entry in DISTANCES.items() if entry.kind == SIMILARITY)
CDIST_METRICS = ("euclidean", "sqeuclidean", "cityblock", "cosine")


def check_distance(distance, arg="distance", *, kinds=(DISTANCE,), allow_callable=False):
    """`distance` if it names an entry of `DISTANCES` of one of `kinds` (`DISTANCE`,
    `SIMILARITY`), or is a callable where `allow_callable` (TFA's custom distance: embeddings
    -> `[b, b]` distance matrix); else a ValueError naming `arg`, the names it accepts and the
    value received (a name of the other kind is refused as such: a similarity is never taken
    for a distance)."""
    if allow_callable and callable(distance):
        return distance
    accepted = [name for name, entry in DISTANCES.items() if entry.kind in kinds]
    entry = DISTANCES.get(distance) if isinstance(distance, str) else None
    if entry is not None and entry.kind in kinds:
        return distance
    expected = f"one of {accepted}" + (" or a callable" if allow_callable else "")
    if entry is not None:
        larger = "closer" if entry.kind == SIMILARITY else "farther"
        expected = (
            f"a {' or a '.join(kinds)} ({expected}); {distance!r} is a {entry.kind} (larger "
            f"for {larger} rows)"
        )
    raise ValueError(checks.invalid(arg, expected, distance))


def is_similarity(distance):
    """Whether `distance` (a name of `DISTANCES`, or a callable: a distance) is a similarity."""
    return isinstance(distance, str) and DISTANCES[distance].kind == SIMILARITY


def distance_matrix(embeddings, distance, *, rows=None):
    """The distances (or similarities) between the rows of `embeddings` under `distance`: a
    name of `DISTANCES` (each with its one meaning above) or a callable (a distance).

    `rows` (``(start, count)``) asks for those rows of the matrix only; a callable computes the
    whole matrix, of which the rows are taken.
    """
    distance = check_distance(distance, kinds=(DISTANCE, SIMILARITY), allow_callable=True)
    if callable(distance):
        full = distance(embeddings)
        return full if rows is None else full[rows[0] : rows[0] + rows[1]]
    return DISTANCES[distance].matrix(embeddings, rows=rows)


# Added inside the square root of the "euclidean" metric, as in the SVMax/retrieval originals
# (ahmdtaha/tf_retrieval_baseline `cdist`): keeps sqrt differentiable at zero distance, so the
# diagonal is 1e-6 rather than 0.
EUCLIDEAN_EPSILON = 1e-12


def cdist(a, b, metric="euclidean"):
    """All-pairs distances between the rows of `a` (`[n, d]`) and `b` (`[m, d]`), in O(n m)
    memory (never an `[n, m, d]` tensor).

    The originals' definitions: ``"euclidean"`` ``sqrt(sum (a - b)^2 + 1e-12)``,
    ``"sqeuclidean"`` ``sum (a - b)^2``, ``"cityblock"`` ``sum |a - b|``, ``"cosine"``
    ``1 - a.b`` (rows assumed L2-normalized, as in the originals; nothing is normalized here).

    The originals broadcast explicit differences (an `[n, m, d]` tensor: 8.6 GB at
    n = m = 4,096, d = 128 in float32). Here the squared distance is the Gram expansion
    ``|a|^2 + |b|^2 - 2 a.b`` computed in float64 (`_squared_distances`) and the city-block
    distance explicit differences in row blocks with their own gradient (`_cityblock`).

    Returns:
      `[n, m]` tensor of `a`'s dtype.
    """
    checks.check_choice(metric, "metric", CDIST_METRICS)
    a, b = ops.convert_to_tensor(a), ops.convert_to_tensor(b)
    if metric == "cosine":
        return 1.0 - _backend.matmul(a, b, transpose_b=True)
    if metric == "cityblock":
        return _cityblock(a, b)
    squared = _squared_distances(a, b)
    if metric == "sqeuclidean":
        return squared
    return ops.sqrt(squared + EUCLIDEAN_EPSILON)


def _squared_distances(a, b):
    """``sum (a - b)^2`` for all row pairs, from the Gram expansion in float64.

    Exactness: for float32 inputs every product of two coordinates is exact in float64, and the
    expansion's cancellation error is at most ~``2 d 2^-53 (|a|^2 + |b|^2)`` (3e-14 for unit
    rows at d = 128), below the float32 rounding of the explicit sum (``2^-24`` of the result)
    except for squared distances under ~1e-6 of the norms, and there below the 1e-12 the
    "euclidean" metric adds under its square root. So the result is the explicit float32 sum
    up to its own rounding. For float64 inputs the bound is the same absolute ~3e-14 (unit
    rows), which an explicit float64 sum would beat only for near-duplicate rows.

    JAX without 64-bit types (`jax_enable_x64` off, its default) has no float64 arrays outside
    `jax.enable_x64`, and a float32 expansion would cancel to ~``2^-24 |a|^2`` (a duplicate row
    3e-4 apart instead of 1e-6): there the same float64 expansion runs inside that context
    (`float64_squared` of `tf_svmax._backend`'s JAX module). Explicit differences, summed in row
    blocks as the originals did, were as exact and 70-80x slower (4,096 x 128 forward + backward
    under `jax.jit`: 14.5 s against 0.2 s, 2-core AMD EPYC).
    """
    return _backend.float64_squared(a, b, _unclamped_squared)


def _unclamped_squared(a, b):
    """``|a|^2 + |b|^2 - 2 a.b`` in the inputs' dtype (may round below zero)."""
    return (
        ops.sum(ops.square(a), axis=1, keepdims=True)
        + ops.expand_dims(ops.sum(ops.square(b), axis=1), 0)
        - 2.0 * _backend.matmul(a, b, transpose_b=True)
    )


# Elements of one block of explicit differences in `_blockwise` (rows x m x d): 64 MB in float32.
_BLOCK_ELEMENTS = 1 << 24


def _at_least_one(n):
    """``max(1, n)`` for a Python int or (TensorFlow graph, unknown size) a scalar tensor."""
    return max(1, n) if isinstance(n, int) else ops.maximum(1, n)


def _blockwise(term, term_grad):
    """``out[i, j] = sum_k term(a_ik - b_jk)`` for all row pairs of `a` (`[n, d]`) and `b`
    (`[m, d]`), in blocks of rows of `a` (padded to whole blocks) so that no more than
    `_BLOCK_ELEMENTS` differences exist at once; its gradient, ``term_grad(a_i - b_j)`` weighted
    by the upstream gradient, is accumulated block by block too (a custom gradient: autodiff of
    the loop would keep every block's differences)."""

    @ops.custom_gradient
    def distance(a, b):
        n, m, d = ops.shape(a)[0], ops.shape(b)[0], ops.shape(a)[1]
        block = _at_least_one(_BLOCK_ELEMENTS // _at_least_one(m * d))
        blocks = (n + block - 1) // block
        # Zero rows pad `a` to whole blocks; their outputs are cut off and get no gradient.
        pad = blocks * block - n
        padded = ops.reshape(ops.pad(a, [[0, pad], [0, 0]]), [blocks, block, d])

        def forward(rows):
            return ops.sum(term(rows[:, None] - b[None]), axis=-1)

        value = ops.reshape(ops.map(forward, padded), [blocks * block, m])[:n]

        def grad(*args, upstream=None):
            # PyTorch passes the upstream gradient by keyword, TensorFlow and JAX positionally.
            if upstream is None:
                (upstream,) = args
            weights = ops.reshape(ops.pad(upstream, [[0, pad], [0, 0]]), [blocks, block, m, 1])

            def step(i, carry):
                grad_a, grad_b = carry
                weighted = weights[i] * term_grad(padded[i][:, None] - b[None])  # [block, m, d]
                grad_a = ops.slice_update(
                    grad_a, [i, 0, 0], ops.expand_dims(ops.sum(weighted, axis=1), 0)
                )
                return grad_a, grad_b - ops.sum(weighted, axis=0)

            grad_a, grad_b = ops.fori_loop(
                0, blocks, step, (ops.zeros_like(padded), ops.zeros_like(b))
            )
            return ops.reshape(grad_a, [blocks * block, d])[:n], grad_b

        return value, grad

    return distance


# "cityblock": sum |a - b|, whose gradient is sign(a - b) (that of abs, 0 at equality).
_cityblock = _blockwise(ops.abs, ops.sign)
