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

import keras
import numpy as np
import tensorflow as tf

from tf_svmax.losses import _common
from tf_svmax.losses._base import BatchPenaltyLoss, LossFunctionWrapper, deserialize_callable
from tf_svmax.ops import _checks, distances


def _inputs(y_true, y_pred):
    """``(embeddings, labels, dtype)``: the checked inputs, half precision promoted."""
    embeddings, dtype = _common.embeddings_matrix(y_pred)
    return embeddings, _common.flat_labels(y_true, embeddings), dtype


def _anchor_distances(embeddings, labels, distance_metric, anchor_rows):
    """``(pdist, positives, negatives)``, each `[count, b]`: the rows of the anchors
    ``anchor_rows = (start, count)`` (all rows when None) against the whole batch."""
    pdist = distances.distance_matrix(embeddings, distance_metric, rows=anchor_rows)
    positives, negatives = _common.anchor_masks(labels, anchor_rows)
    return tf.cast(pdist, embeddings.dtype), positives, negatives


def triplet_semihard_loss(
    y_true, y_pred, margin=1.0, distance_metric="L2", *, anchor_rows=None, normalizer_rows=None
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
      distance_metric: "L2", "squared-L2", "angular" (tensorflow-addons'), a cdist name
        ("euclidean", "sqeuclidean", "cityblock", "cosine"; see
        `tf_svmax.ops.distances.METRICS`), or a callable mapping embeddings to a
        `[batch_size, batch_size]` distance matrix.
      anchor_rows: Optional ``(start, count)``: only the terms of those anchors, still divided
        by the whole batch's number of positive pairs, so that the values of disjoint anchor
        ranges covering the batch add up to the loss (each replica's share of a global batch).
      normalizer_rows: Optional ``(start, count)``: divide by the number of positive pairs
        ``(a, p)`` whose anchor ``a`` is one of those rows (``p`` anywhere in the batch) instead
        of the whole batch's; e.g. the batch rows of a batch + cross-batch-memory set
        (`tf_svmax.losses.CrossBatchMemory`), whose memory rows are references only.

    Returns:
      A scalar of the embeddings' dtype (float16/bfloat16 computed in float32). 0 when the
      batch has no positive pair.

    Example:
      >>> triplet_semihard_loss([0, 0], [[0.0, 1.0], [1.0, 0.0]])  # 2.4142137
    """
    embeddings, labels, dtype = _inputs(y_true, y_pred)
    count = _positive_pairs_of(labels, normalizer_rows, embeddings.dtype)

    def share(x, rows):
        """The anchors `rows`' sum of hinge terms."""
        pdist, positives, negatives = _anchor_distances(x, labels, distance_metric, rows)
        # The closest negative farther than the positive, where there is one.
        closest_farther, farther_exists = _closest_farther(pdist, negatives)
        # Fallback: the farthest negative of the anchor (its nearest point if it has none).
        farthest_negative = _common.masked_max(pdist, negatives)
        semi_hard = tf.where(farther_exists, closest_farther, farthest_negative)
        loss_matrix = margin + pdist - semi_hard
        positives_f = tf.cast(positives, pdist.dtype)
        return tf.reduce_sum(tf.maximum(loss_matrix * positives_f, 0.0))

    total = _sum_over_anchor_blocks(share, embeddings, anchor_rows)
    return tf.cast(_common.safe_mean_over(total, count), dtype)


# Elements (anchor rows x batch) of one block of `_sum_over_anchor_blocks`: its distance rows,
# masks, sort and gradient temporaries are some 20 such arrays, ~300 MB in float32
# (b = 4,096: blocks of 1,024 anchors).
_ROW_BLOCK_ELEMENTS = 1 << 22


def _sum_over_anchor_blocks(share, x, anchor_rows):
    """``sum_blocks share(x, (start, count))`` over blocks of the anchors `anchor_rows` (all
    rows when None), with its gradient w.r.t. `x`, in one block's memory.

    A batch of static size with at most `_ROW_BLOCK_ELEMENTS` distances is one block,
    differentiated as usual. Otherwise (a larger batch, or one whose size is known only when the
    step runs, as in Keras' `fit`) the shares are summed block by block without keeping anything
    for the gradient, and the gradient recomputes each block's share under its own tape (one
    more forward pass: the price of O(block) instead of O(b^2) autodiff state). Choosing between
    the two with `tf.cond` fails to differentiate under `tf.distribute` (nested in the base
    class's empty-batch `cond`, TF's cond gradient cannot resolve the captured gathered batch).
    Under XLA (static shapes) it is one block.
    """
    if _checks.in_xla_context():
        return share(x, anchor_rows)
    static_b = x.shape[0]
    if static_b is not None and static_b * static_b <= _ROW_BLOCK_ELEMENTS:
        return share(x, anchor_rows)
    b = tf.shape(x)[0]
    start, count = (0, b) if anchor_rows is None else anchor_rows
    rows = tf.maximum(1, _ROW_BLOCK_ELEMENTS // tf.maximum(b, 1))
    blocks = (count + rows - 1) // rows

    def block(i):
        first = start + i * rows
        return first, tf.minimum(rows, start + count - first)

    @tf.custom_gradient
    def blockwise(x):
        total = tf.while_loop(
            lambda i, _: i < blocks,
            lambda i, total: (i + 1, total + share(x, block(i))),
            (0, tf.zeros([], x.dtype)),
        )[1]

        def grad(upstream):
            def step(i, gradient):
                with tf.GradientTape() as tape:
                    tape.watch(x)
                    value = share(x, block(i))
                return i + 1, gradient + tape.gradient(value, x)

            gradient = tf.while_loop(lambda i, _: i < blocks, step, (0, tf.zeros_like(x)))[1]
            return upstream * gradient

        return total, grad

    return blockwise(x)


def _closest_farther(pdist, negatives):
    """``(value, exists)`` `[m, b]`: for anchor row a and column p, the smallest ``pdist[a, k]``
    over negatives k with ``pdist[a, k] > pdist[a, p]``, and whether there is one.

    Each row's negative distances are sorted once; a binary search of ``pdist[a, p]`` finds the
    first larger one: O(m b log b) time, O(m b) memory.

    The gradient is tensorflow-addons' `masked_minimum` over the `[a, p, k]` candidates,
    ``min_k((d_ak - h_a) mask_apk) + h_a`` with ``h_a`` the row's maximum, including how
    TensorFlow splits a min's or max's gradient equally among tied entries: the upstream
    gradient of (a, p) goes in equal parts to the negatives tied at the chosen distance. When
    the chosen distance is the row maximum, the candidates' shifted value 0 ties with the b -
    #candidates masked-out zeros: each candidate gets 1/b of it and the rest reaches ``h_a``
    (split among the row's maxima); with no candidate all of it does (the masked-out zeros are
    all tied). Tests: tests/losses/test_tfa_parity.py (exact ties included).
    """
    count, high, order, first, end, least = _search_rows(pdist, negatives)
    exists = first < count

    def grad(upstream):
        return _gradient_rows(pdist, upstream, count, high, order, first, end, least)

    return _with_gradient(pdist, least + high, grad), exists


def _search_rows(pdist, negatives):
    """Forward of `_closest_farther` on some anchor rows: ``(count, high, order, first, end,
    least)``: the row's number of negatives and maximum, the sort order of its negatives, the
    first sorted negative farther than each column, the end of its tie group, and its distance
    minus the row maximum (0 where there is none)."""
    b = tf.shape(pdist)[1]
    # Each row's negatives in increasing order, +inf after them.
    keys = tf.where(negatives, pdist, tf.constant(np.inf, pdist.dtype))
    order = tf.argsort(keys, axis=1, stable=True)
    ordered = tf.gather(keys, order, batch_dims=1)
    count = tf.reduce_sum(tf.cast(negatives, tf.int32), axis=1, keepdims=True)
    # The first negative strictly farther than the positive.
    first = tf.searchsorted(ordered, pdist, side="right")
    # TFA compares the candidates shifted by the row maximum, d - h: distances that differ
    # only below h's rounding step tie there, so the tie group is found among the shifted
    # values (sorted too: the shift is monotone), and the value is (d - h) + h as in TFA.
    high = tf.reduce_max(pdist, axis=1, keepdims=True)
    shifted = ordered - high
    least = tf.gather(shifted, tf.minimum(first, b - 1), batch_dims=1)
    # Never +inf, even where unused (no candidate).
    least = tf.where(first < count, least, tf.zeros_like(least))
    end = tf.searchsorted(shifted, least, side="right")
    return count, high, order, first, end, least


def _gradient_rows(pdist, upstream, count, high, order, first, end, least):
    """Backward of `_closest_farther` on some anchor rows (see its docstring)."""
    m, b = tf.shape(pdist)[0], tf.shape(pdist)[1]
    b_f = tf.cast(b, pdist.dtype)
    exists = first < count
    # At the row maximum (or with no candidate) the shifted min 0 ties with every entry.
    at_high = tf.logical_or(tf.logical_not(exists), tf.equal(least, 0.0))
    tied = tf.where(at_high, b_f, tf.cast(end - first, pdist.dtype))
    per_candidate = tf.where(exists, upstream / tied, tf.zeros_like(upstream))
    # Spread over the sorted positions first .. end - 1 (a difference array, then cumsum).
    rows = tf.range(m)[:, tf.newaxis] * (b + 1)
    spread = tf.math.unsorted_segment_sum(per_candidate, rows + first, m * (b + 1))
    spread -= tf.math.unsorted_segment_sum(per_candidate, rows + end, m * (b + 1))
    spread = tf.cumsum(tf.reshape(spread, [m, b + 1]), axis=1)[:, :b]
    # Back from sorted positions to columns.
    columns = tf.range(m)[:, tf.newaxis] * b + order
    direct = tf.reshape(tf.math.unsorted_segment_sum(spread, columns, m * b), [m, b])
    # What reaches the row maximum: 1 - (#candidates tied at it) / b of the upstream.
    candidates = tf.where(exists, tf.cast(count - first, pdist.dtype), tf.zeros_like(least))
    to_high = tf.where(at_high, upstream * (1.0 - candidates / b_f), tf.zeros_like(upstream))
    is_high = tf.cast(tf.equal(pdist, high), pdist.dtype)
    share = tf.reduce_sum(to_high, axis=1, keepdims=True) / tf.reduce_sum(
        is_high, axis=1, keepdims=True
    )
    return direct + share * is_high


def _with_gradient(x, value, grad):
    """`value` (computed from `x` without a gradient) with the gradient `grad` w.r.t. `x`."""

    @tf.custom_gradient
    def attach(x):
        return tf.identity(value), grad

    return attach(x)


def triplet_hard_loss(
    y_true,
    y_pred,
    margin=1.0,
    soft=False,
    distance_metric="L2",
    *,
    anchor_rows=None,
    normalizer_rows=None,
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
      anchor_rows: Optional ``(start, count)``: the sum over those anchors only, divided by the
        batch size (see `triplet_semihard_loss`).
      normalizer_rows: Optional ``(start, count)``: divide by ``count`` (those anchors' number)
        instead of the batch size (see `triplet_semihard_loss`).

    Returns:
      A scalar of the embeddings' dtype.
    """
    embeddings, labels, dtype = _inputs(y_true, y_pred)
    pdist, positives, negatives = _anchor_distances(
        embeddings, labels, distance_metric, anchor_rows
    )
    hard_negatives = _common.masked_min(pdist, negatives)
    hard_positives = _common.masked_max(pdist, positives)
    if soft:
        per_anchor = tf.math.softplus(hard_positives - hard_negatives)
    else:
        per_anchor = tf.maximum(hard_positives - hard_negatives + margin, 0.0)
    # Mean over the batch's anchors; 0 for an empty batch (an uneven last batch under
    # tf.distribute).
    total = tf.reduce_sum(per_anchor)
    anchors = tf.size(labels) if normalizer_rows is None else normalizer_rows[1]
    return tf.cast(_common.safe_mean_over(total, anchors), dtype)


def _positive_pairs_of(labels, anchor_rows, dtype):
    """Ordered positive pairs ``(a, p)``, ``p != a``, of the anchors ``anchor_rows = (start,
    count)`` against the whole batch (all anchors when None)."""
    if anchor_rows is None:
        return _common.positive_pair_count(labels, dtype)
    positives, _ = _common.anchor_masks(labels, anchor_rows)
    return tf.cast(tf.math.count_nonzero(positives), dtype)


@keras.saving.register_keras_serializable(package="tf_svmax")
class TripletSemiHardLoss(LossFunctionWrapper, BatchPenaltyLoss):
    """Keras loss for `triplet_semihard_loss` (drop-in for `tfa.losses.TripletSemiHardLoss`).

    `y_true`: `[batch_size]` integer labels; `y_pred`: `[batch_size, dim]` L2-normalized
    embeddings. Returns one scalar per batch (TFA's reduction "none").
    """

    splits_anchors = True

    def __init__(self, margin=1.0, distance_metric="L2", name="triplet_semihard_loss", **kwargs):
        fn_kwargs = dict(
            margin=_checks.check_finite_number(margin, "margin"),
            distance_metric=distances.check_metric(
                deserialize_callable(distance_metric), allow_callable=True
            ),
        )
        super().__init__(triplet_semihard_loss, fn_kwargs, name=name, **kwargs)


@keras.saving.register_keras_serializable(package="tf_svmax")
class TripletHardLoss(LossFunctionWrapper, BatchPenaltyLoss):
    """Keras loss for `triplet_hard_loss` (drop-in for `tfa.losses.TripletHardLoss`)."""

    splits_anchors = True

    def __init__(
        self, margin=1.0, soft=False, distance_metric="L2", name="triplet_hard_loss", **kwargs
    ):
        fn_kwargs = dict(
            margin=_checks.check_finite_number(margin, "margin"),
            soft=_checks.check_bool(soft, "soft"),
            distance_metric=distances.check_metric(
                deserialize_callable(distance_metric), allow_callable=True
            ),
        )
        super().__init__(triplet_hard_loss, fn_kwargs, name=name, **kwargs)
