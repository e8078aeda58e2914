"""Triplet losses with in-batch mining: semi-hard (Schroff et al. 2015) and batch-hard
(Hermans et al. 2017), with tensorflow-addons' names, signatures, defaults, values and gradients.

Differences from tensorflow-addons 0.23.0 (documented, tested):

* no positive pair in the batch (all singleton classes): the semi-hard loss is 0, not NaN;
* float64 embeddings are supported (TFA raises a TypeError);
* the classes accept `sample_weight` (scales the batch's loss by the weights' mean; TFA raises);
* the soft margin is `softplus`, finite where TFA's `log1p(exp(.))` overflows to inf (large
  unnormalized distances); equal elsewhere;
* an empty batch gives 0 (TFA: NaN);
* labels are never cast to float (TFA's Keras 2 classes compare float32 copies of them).
"""

import numpy as np
from keras import ops

from tf_svmax import _backend, checks
from tf_svmax.losses import _common
from tf_svmax.losses._base import BatchPenaltyLoss
from tf_svmax.losses._registry import register
from tf_svmax.ops import distances


def _anchor_distances(embeddings, labels, distance_metric, rows, valid=None):
    """``(pdist, positives, negatives)``, each `[count, b]`: the rows of the anchors
    ``rows = (start, count)`` (all rows when None) against the whole set (its `valid` columns,
    `_common.reference_mask`)."""
    # A distance (a similarity is refused) or TFA's callable.
    distance_metric = distances.check_distance(
        distance_metric, "distance_metric", allow_callable=True
    )
    pdist = distances.distance_matrix(embeddings, distance_metric, rows=rows)
    positives, negatives = _common.anchor_masks(labels, rows, valid)
    return ops.cast(pdist, embeddings.dtype), positives, negatives


@register(tfa=True)
def triplet_semihard_loss(
    y_true,
    y_pred,
    margin=1.0,
    distance_metric="L2",
    *,
    ref_labels=None,
    ref_embeddings=None,
    ref_offset=0,
    ref_mask=None,
):
    """Triplet loss with semi-hard negative mining (FaceNet), averaged over positive pairs.

    For every anchor ``a`` and positive ``p`` (same label, ``p != a``) the negative is the
    closest one farther from ``a`` than ``p``; if none is, the farthest negative::

        loss = sum_{a,p} max(margin + d(a, p) - d(a, n*(a, p)), 0) / #positive pairs

    Memory is O(b^2): each anchor's negatives are sorted once and the semi-hard negative of
    (a, p) is found by binary search (`_closest_farther`), where tensorflow-addons builds
    `[b, b, b]` tensors (4 b^3 bytes each: 275 GB at b = 4,096). Batches of more than 2,048
    rows are computed in blocks of anchors, the gradient recomputing each block
    (`_sum_over_anchor_blocks`): b = 4,096 fits in 2 GB.

    Args:
      y_true: `[batch_size]` (or `[batch_size, 1]`) class labels.
      y_pred: `[batch_size, dim]` embeddings (normally L2-normalized).
      margin: Margin term.
      distance_metric: tensorflow-addons' name for the other losses' ``distance``: "L2",
        "squared-L2", "angular" (tensorflow-addons'), a cdist name ("euclidean",
        "sqeuclidean", "cityblock", "cosine"), each a distance of
        `tf_svmax.ops.distances.DISTANCES` (a similarity is refused), or a callable mapping
        embeddings to a `[batch_size, batch_size]` distance matrix (with reference rows: the
        references' `[m, m]` matrix, of which the anchors' rows are taken).
      ref_labels: Optional `[m]` labels of reference rows (with `ref_embeddings`): the anchors
        `y_true`, `y_pred` are then mined against them, ``p`` and ``n`` ranging over the
        references, and the sum is divided by the anchors' number of positive pairs ``(a, p)``
        (a batch against a cross-batch memory, `tf_svmax.losses.CrossBatchMemory`).
      ref_embeddings: Optional `[m, dim]` reference embeddings (with `ref_labels`).
      ref_offset: The anchors' first row among the references (default 0): the anchors take
        the place of the reference rows ``ref_offset .. ref_offset + batch_size - 1`` (the
        references hold the anchors, as with Keras' `circle` ``remove_diagonal``), and an
        anchor is never its own positive.
      ref_mask: Optional bool `[m]` over the reference rows (with them; default: all True): a
        False row is no positive and no negative of any anchor, as if it were absent (the
        value and gradients of the references without it; its own gradient is 0), so a
        fixed-size reference set with a data-dependent number of rows in use compiles under
        XLA (`tf_svmax.losses.CrossBatchMemory`). A False at an anchor's own row drops that
        anchor (no term, not counted among the positive pairs, a zero gradient): the set
        against itself (``ref_labels=y_true, ref_embeddings=y_pred``) with a mask S is the
        loss on the rows of S alone (`tf_svmax.losses.XMLLoss`' class halves under XLA). A
        callable `distance_metric` gets all m rows, the masked ones zeroed.

    Returns:
      A scalar of the embeddings' dtype (float16/bfloat16 computed in float32). 0 when the
      batch has no positive pair; NaN when a distance is not finite (NaN, inf or overflowing
      embeddings), on every backend and under XLA.

    Example:
      >>> triplet_semihard_loss([0, 0], [[0.0, 1.0], [1.0, 0.0]])  # 2.4142137
    """
    parts, dtype = _semihard_parts(
        y_true, y_pred, margin, distance_metric, ref_labels, ref_embeddings, ref_offset, ref_mask
    )
    return ops.cast(_common.mean_of_parts(parts), dtype)


def _semihard_parts(
    y_true,
    y_pred,
    margin,
    distance_metric,
    ref_labels,
    ref_embeddings,
    ref_offset,
    ref_mask=None,
):
    """``([LossPart(sum of hinge terms, #positive pairs)], dtype)`` of `triplet_semihard_loss`'s
    anchors."""
    embeddings, labels, anchors, dtype = _common.anchors_and_references(
        y_true, y_pred, ref_labels, ref_embeddings, ref_offset
    )
    embeddings, valid = _common.reference_mask(ref_mask, embeddings, anchors)
    count = _positive_pairs_of(labels, anchors, embeddings.dtype, valid)
    columns = None if valid is None else valid[None, :]

    def share(x, rows):
        """The anchors `rows`' sum of hinge terms."""
        pdist, positives, negatives = _anchor_distances(x, labels, distance_metric, rows, valid)
        # The closest negative farther than the positive, where there is one.
        closest_farther, farther_exists = _closest_farther(pdist, negatives, columns)
        # Fallback: the farthest negative of the anchor (its nearest point if it has none).
        farthest_negative = _common.masked_max(pdist, negatives, valid=columns)
        semi_hard = ops.where(farther_exists, closest_farther, farthest_negative)
        loss_matrix = margin + pdist - semi_hard
        # Only the positive pairs (TFA multiplies by the mask: the same values and gradient); a
        # `where`, as a row with no column in use (an empty `ref_mask`) holds inf - inf there,
        # and the NaN of a non-finite distance is the guard's to give.
        pairs = ops.where(positives, loss_matrix, 0.0)
        # NaN where a distance is not finite (NaN, inf or overflowing embeddings).
        return _common.nan_unless_finite(ops.sum(_common.hinge(pairs)), pdist)

    total = _sum_over_anchor_blocks(share, embeddings, anchors)
    # keep_nan: a non-finite batch gives NaN even with no positive pair.
    return [_common.LossPart(total, count, keep_nan=True)], dtype


# Elements (anchor rows x batch) of one block of `_sum_over_anchor_blocks`: its distance rows,
# masks, sort and gradient temporaries are some 20 such arrays, ~300 MB in float32
# (b = 4,096: blocks of 1,024 anchors).
_ROW_BLOCK_ELEMENTS = 1 << 22


def _sum_over_anchor_blocks(share, x, rows):
    """``sum_blocks share(x, (start, count))`` over blocks of the anchors `rows` (all
    rows when None), with its gradient w.r.t. `x`, in one block's memory: the backend's
    `sum_over_row_blocks` with blocks of `_ROW_BLOCK_ELEMENTS` distances.

    A batch of static size with at most `_ROW_BLOCK_ELEMENTS` distances is one block,
    differentiated as usual; so is any batch under TensorFlow's `jit_compile`. Otherwise the
    shares are summed block by block and each block's share is recomputed for the gradient (one
    more forward pass: the price of O(block) instead of O(b^2) autodiff state) on TensorFlow
    (also for a batch size known only when the step runs) and on PyTorch (blocks of static
    size); JAX sums the blocks without recomputation, eagerly and under `jax.jit` (unrolled in
    the trace). `tf_svmax._backend`'s modules say why and what each costs.
    """
    return _backend.sum_over_row_blocks(share, x, rows, _ROW_BLOCK_ELEMENTS)


def _closest_farther(pdist, negatives, valid=None):
    """``(value, exists)`` `[m, b]`: for anchor row a and column p, the smallest ``pdist[a, k]``
    over negatives k with ``pdist[a, k] > pdist[a, p]``, and whether there is one. `valid`
    (bool `[1, b]`, `_common.reference_mask`): the columns that exist (b, the row maximum and
    its ties below are over those only; `negatives` holds none of the others).

    Each row's negative distances are sorted once; a binary search of ``pdist[a, p]`` finds the
    first larger one: O(m b log b) time, O(m b) memory.

    The gradient is tensorflow-addons' `masked_minimum` over the `[a, p, k]` candidates,
    ``min_k((d_ak - h_a) mask_apk) + h_a`` with ``h_a`` the row's maximum, including how
    TensorFlow splits a min's or max's gradient equally among tied entries: the upstream
    gradient of (a, p) goes in equal parts to the negatives tied at the chosen distance. When
    the chosen distance is the row maximum, the candidates' shifted value 0 ties with the b -
    #candidates masked-out zeros: each candidate gets 1/b of it and the rest reaches ``h_a``
    (split among the row's maxima); with no candidate all of it does (the masked-out zeros are
    all tied). The same gradient on every backend (JAX's and PyTorch's own min/max gradients
    split ties differently; this one is written out). Tests: tests/losses/test_tfa_parity.py
    (exact ties included), tests/losses/test_tfa_functions_backends.py.
    """
    # Whether a negative is farther: the row's farthest negative is (the same comparisons as
    # the search's, so the same booleans).
    # (Scalar fills here and below, broadcast by the select as the original wrote them: a
    # filled [m, b] tensor each would be one more array to write and read.)
    keys = ops.where(negatives, pdist, -np.inf)
    farthest = _backend.reduce_with_identity(ops.max, keys, 1, keepdims=True)  # no rows: -inf
    exists = ops.stop_gradient(farthest) > ops.stop_gradient(pdist)

    # Everything the gradient needs is computed inside the custom-gradient function from its
    # argument: JAX refuses a traced value closed over from outside it.
    @ops.custom_gradient
    def closest_farther(pdist):
        count, high, order, first, end, least = _search_rows(pdist, negatives, valid)

        def grad(*args, upstream=None):
            # TensorFlow and JAX pass the upstream gradient positionally, PyTorch by name.
            upstream = args[0] if upstream is None else upstream
            searched = (count, high, order, first, end, least)
            return _gradient_rows(pdist, upstream, *searched, valid=valid)

        return least + high, grad

    return closest_farther(pdist), exists


def _search_rows(pdist, negatives, valid=None):
    """Forward of `_closest_farther` on some anchor rows: ``(count, high, order, first, end,
    least)``: the row's number of negatives and maximum, the sort order of its negatives, the
    first sorted negative farther than each column, the end of its tie group, and its distance
    minus the row maximum (0 where there is none)."""
    b = ops.shape(pdist)[1]
    # Each row's negatives in increasing order, +inf after them.
    keys = ops.where(negatives, pdist, np.inf)
    order = ops.cast(_backend.stable_argsort_rows(keys), "int32")
    ordered = _backend.take_rows(keys, order)
    count = ops.sum(ops.cast(negatives, "int32"), axis=1, keepdims=True)
    # The first negative strictly farther than the positive.
    first = _backend.searchsorted_rows(ordered, pdist, side="right")
    # TFA compares the candidates shifted by the row maximum, d - h: distances that differ
    # only below h's rounding step tie there, so the tie group is found among the shifted
    # values (sorted too: the shift is monotone), and the value is (d - h) + h as in TFA.
    # (Over the valid columns only: a masked column is no point of the row.)
    rows_max = pdist if valid is None else ops.where(valid, pdist, -np.inf)
    high = _backend.reduce_with_identity(ops.max, rows_max, 1, keepdims=True)  # no rows: -inf
    shifted = ordered - high
    least = _backend.take_rows(shifted, ops.minimum(first, b - 1))
    # Never +inf, even where unused (no candidate).
    least = ops.where(first < count, least, 0.0)
    end = _backend.searchsorted_rows(shifted, least, side="right")
    return count, high, order, first, end, least


def _gradient_rows(pdist, upstream, count, high, order, first, end, least, valid=None):
    """Backward of `_closest_farther` on some anchor rows (see its docstring)."""
    m, b = ops.shape(pdist)[0], ops.shape(pdist)[1]
    if isinstance(m, int) and m == 0:
        # No anchor rows (an empty share of the anchors): nothing to spread, and PyTorch's
        # segment sum refuses empty data.
        return ops.zeros_like(pdist)
    # b: the row's number of points (TFA's batch size), the valid columns with a mask.
    b_f = ops.cast(b if valid is None else ops.sum(ops.cast(valid, "int32")), pdist.dtype)
    exists = first < count
    # At the row maximum (or with no candidate) the shifted min 0 ties with every entry.
    at_high = ops.logical_or(ops.logical_not(exists), ops.equal(least, 0.0))
    tied = ops.where(at_high, b_f, ops.cast(end - first, pdist.dtype))
    per_candidate = ops.where(exists, upstream / tied, 0.0)
    # Spread over the sorted positions first .. end - 1 (a difference array, then cumsum).
    rows = ops.arange(m, dtype="int32")[:, None] * (b + 1)
    flat = ops.reshape(per_candidate, [-1])

    def segment_sum(data, ids, segments):
        return ops.segment_sum(data, ops.reshape(ids, [-1]), num_segments=segments)

    spread = segment_sum(flat, rows + first, m * (b + 1))
    spread -= segment_sum(flat, rows + end, m * (b + 1))
    spread = ops.cumsum(ops.reshape(spread, [m, b + 1]), axis=1)[:, :b]
    # Back from sorted positions to columns.
    columns = ops.arange(m, dtype="int32")[:, None] * b + order
    direct = ops.reshape(segment_sum(ops.reshape(spread, [-1]), columns, m * b), [m, b])
    # What reaches the row maximum: 1 - (#candidates tied at it) / b of the upstream.
    candidates = ops.where(exists, ops.cast(count - first, pdist.dtype), 0.0)
    to_high = ops.where(at_high, upstream * (1.0 - candidates / b_f), 0.0)
    is_high = ops.equal(pdist, high)
    if valid is not None:
        is_high = ops.logical_and(is_high, valid)
    is_high = ops.cast(is_high, pdist.dtype)
    share = ops.sum(to_high, axis=1, keepdims=True) / ops.sum(is_high, axis=1, keepdims=True)
    return direct + share * is_high


@register(tfa=True)
def triplet_hard_loss(
    y_true,
    y_pred,
    margin=1.0,
    soft=False,
    distance_metric="L2",
    *,
    ref_labels=None,
    ref_embeddings=None,
    ref_offset=0,
    ref_mask=None,
):
    """Batch-hard triplet loss: hardest positive and hardest negative per anchor, averaged.

    ``max(d(a, p_hard) - d(a, n_hard) + margin, 0)``, or ``log(1 + exp(d_p - d_n))`` when
    `soft` (margin unused), averaged over all anchors. As in tensorflow-addons, an anchor with
    no positive uses its nearest point (itself, distance 0) and one with no negative its
    farthest point.

    Args:
      y_true: `[batch_size]` class labels.
      y_pred: `[batch_size, dim]` embeddings.
      margin: Margin term.
      soft: Use the soft (softplus) margin.
      distance_metric: As in `triplet_semihard_loss`.
      ref_labels, ref_embeddings, ref_offset, ref_mask: Optional reference rows (and which
        of them are in use), as in `triplet_semihard_loss`: each anchor's hardest positive and
        negative are among them (the nearest and farthest points of the fallbacks too), and
        the mean is over the anchors (those in use: a False `ref_mask` at an anchor's own row
        drops it).

    Returns:
      A scalar of the embeddings' dtype; NaN when a distance is not finite.
    """
    references = (ref_labels, ref_embeddings, ref_offset, ref_mask)
    parts, dtype = _hard_parts(y_true, y_pred, margin, soft, distance_metric, *references)
    return ops.cast(_common.mean_of_parts(parts), dtype)


def _hard_parts(
    y_true,
    y_pred,
    margin,
    soft,
    distance_metric,
    ref_labels,
    ref_embeddings,
    ref_offset,
    ref_mask=None,
):
    """``([LossPart(sum of the anchors' terms, #anchors)], dtype)`` of `triplet_hard_loss`."""
    embeddings, labels, rows, dtype = _common.anchors_and_references(
        y_true, y_pred, ref_labels, ref_embeddings, ref_offset
    )
    embeddings, valid = _common.reference_mask(ref_mask, embeddings, rows)
    pdist, positives, negatives = _anchor_distances(
        embeddings, labels, distance_metric, rows, valid
    )
    columns = None if valid is None else valid[None, :]
    hard_negatives = _common.masked_min(pdist, negatives, valid=columns)
    hard_positives = _common.masked_max(pdist, positives, valid=columns)
    if soft:
        per_anchor = ops.softplus(hard_positives - hard_negatives)
    else:
        per_anchor = _common.hinge(hard_positives - hard_negatives + margin)
    in_use = _common.anchors_in_use(rows, valid)
    if in_use is not None:
        # A dropped anchor (its own row masked) has no positive and no negative: no term.
        per_anchor = ops.where(in_use[:, None], per_anchor, ops.zeros_like(per_anchor))
    # Mean over the anchors (in use); 0 for none (an uneven last batch under tf.distribute).
    anchors = _common.anchor_count(labels, rows, valid)
    # NaN where a distance is not finite: XLA's max/min reductions on TensorFlow drop NaN.
    total = _common.nan_unless_finite(ops.sum(per_anchor), pdist)
    return [_common.LossPart(total, anchors, keep_nan=True)], dtype


def _positive_pairs_of(labels, rows, dtype, valid=None):
    """Ordered positive pairs ``(a, p)``, ``p != a``, of the anchors ``rows = (start, count)``
    against the whole set (all anchors when None; its `valid` rows only)."""
    if rows is None:
        return _common.positive_pair_count(labels, dtype)
    positives, _ = _common.anchor_masks(labels, rows, valid)
    return ops.cast(_common.count_true(positives), dtype)


@register(tfa=True)
class TripletSemiHardLoss(BatchPenaltyLoss):
    """Keras loss for `triplet_semihard_loss` (drop-in for `tfa.losses.TripletSemiHardLoss`).

    `y_true`: `[batch_size]` integer labels; `y_pred`: `[batch_size, dim]` L2-normalized
    embeddings. Returns one scalar per batch (TFA's reduction "none").
    """

    splits_anchors = True
    accepts_reference_rows = True
    accepts_ref_mask = True

    def __init__(self, margin=1.0, distance_metric="L2", name="triplet_semihard_loss", **kwargs):
        fn_kwargs = dict(
            margin=checks.check_finite_number(margin, "margin"),
            distance_metric=distances.check_distance(
                distance_metric, "distance_metric", allow_callable=True
            ),
        )
        super().__init__(
            triplet_semihard_loss, fn_kwargs, parts_fn=_semihard_parts, name=name, **kwargs
        )


@register(tfa=True)
class TripletHardLoss(BatchPenaltyLoss):
    """Keras loss for `triplet_hard_loss` (drop-in for `tfa.losses.TripletHardLoss`)."""

    splits_anchors = True
    accepts_reference_rows = True
    accepts_ref_mask = True

    def __init__(
        self, margin=1.0, soft=False, distance_metric="L2", name="triplet_hard_loss", **kwargs
    ):
        fn_kwargs = dict(
            margin=checks.check_finite_number(margin, "margin"),
            soft=checks.check_bool(soft, "soft"),
            distance_metric=distances.check_distance(
                distance_metric, "distance_metric", allow_callable=True
            ),
        )
        super().__init__(triplet_hard_loss, fn_kwargs, parts_fn=_hard_parts, name=name, **kwargs)
