"""Lifted structured loss (Oh Song et al. 2016), tensorflow-addons' semantics."""

import numpy as np
from keras import ops

from tf_svmax import _backend, checks
from tf_svmax.losses import _common
from tf_svmax.losses._base import BatchPenaltyLoss, refuses_renamed
from tf_svmax.losses._registry import register
from tf_svmax.ops import distances

# `distance=` was `squared=` (False: plain Euclidean distances, True: squared ones).
RENAMED = {"squared": ("distance", {False: "L2", True: "squared-L2"})}


@register(tfa=True)
@refuses_renamed(RENAMED)
def lifted_struct_loss(
    labels,
    embeddings,
    margin=1.0,
    *,
    distance="L2",
    ref_labels=None,
    ref_embeddings=None,
    ref_offset=0,
    ref_mask=None,
):
    """Lifted structured loss over all positive pairs of the batch.

    For each positive pair ``(i, j)``::

        J_ij = log( sum_{k in neg(i)} exp(margin - d_ik) + sum_{k in neg(j)} exp(margin - d_jk) )
               + d_ij
        loss = 0.25 * sum_{(i, j) ordered} max(J_ij, 0)^2 / #unordered positive pairs

    Args:
      labels: `[batch_size]` class labels.
      embeddings: `[batch_size, dim]` embeddings.
      margin: Margin term.
      distance: The distance ``d``, a name of `tf_svmax.ops.distances.DISTANCES` (a
        similarity is refused), e.g. ``"L2"`` (the default: tensorflow-addons, tf.contrib and
        tf_retrieval_baseline; exactly 0 at duplicate rows) or ``"squared-L2"`` (the SVMax
        repository's ``ranking/lifted_structured.py`` variant). Formerly ``squared`` (False:
        ``"L2"``, True: ``"squared-L2"``), which is refused with a message naming this one.
      ref_labels: Optional `[m]` labels of reference rows (with `ref_embeddings`), which hold
        the anchors at rows ``ref_offset ..`` (as in `triplet_semihard_loss`): the ordered
        pairs are then ``(i, j)`` with ``i`` an anchor and ``j`` a reference, ``J_ij``'s
        negative sums run over the references for both ``i`` and ``j``, and the sum is divided
        by half the number of such positive pairs (a batch against a cross-batch memory,
        `tf_svmax.losses.CrossBatchMemory`; a replica's anchors of a global batch). The
        distance rows computed are those of the smallest window of references holding the
        anchors and every reference of their classes (`_class_window`): the anchors plus the
        classes cut by their range's ends in a set of consecutive classes (P x K), up to all
        rows when the classes are scattered.
      ref_embeddings: Optional `[m, dim]` reference embeddings (with `ref_labels`).
      ref_offset: The anchors' first row among the references (default 0).
      ref_mask: Optional bool `[m]`: the reference rows in use (default: all), as in
        `tf_svmax.losses.triplet_semihard_loss` (a False row is in no pair and no negative
        sum, as if absent; a False at an anchor's own row drops that anchor's pairs).

    Returns:
      A scalar of the embeddings' dtype. 0 when the batch has no positive pair, and pairs with
      no negative at all contribute 0 (tensorflow-addons returns NaN in both cases); NaN when
      a distance is not finite (NaN, inf or overflowing embeddings). At exact
      ties between two rows' stabilizing shifts the gradient here is the true one, while
      tensorflow-addons' is not (it differentiates through the shift).
    """
    parts, dtype = _lifted_parts(
        labels, embeddings, margin, distance, ref_labels, ref_embeddings, ref_offset, ref_mask
    )
    return ops.cast(_common.mean_of_parts(parts), dtype)


def _lifted_parts(
    labels, embeddings, margin, distance, ref_labels, ref_embeddings, ref_offset, ref_mask=None
):
    """``([LossPart(0.25 * sum of squared hinges, #positive pairs / 2)], dtype)`` of
    `lifted_struct_loss`'s anchors."""
    distance = distances.check_distance(distance)
    x, labels, anchors, dtype = _common.anchors_and_references(
        labels, embeddings, ref_labels, ref_embeddings, ref_offset, "labels", "embeddings"
    )
    x, valid = _common.reference_mask(ref_mask, x, anchors)
    if anchors is None:
        window, own = None, None
    else:
        if _backend.slices_need_static_bounds():
            # Under `jax.jit` a slice's bounds must be static: every row (the same pairs, only
            # more distance rows computed).
            window = (0, labels.shape[0])
        else:
            window = _class_window(labels, anchors, valid)
        # The anchors' place in the window (they are its rows own .. own + count - 1).
        own = anchors[0] - window[0]
    pdist = distances.distance_matrix(x, distance, rows=window)  # [n, b]
    window_distances = pdist  # all of them enter the negative sums
    positives, negatives = _common.anchor_masks(labels, window, valid)
    shift, scaled = _negative_sums(margin, pdist, negatives, valid)  # [n, 1] each
    row_shift, column_shift = shift, ops.transpose(shift)
    row_scaled, column_scaled = scaled, ops.transpose(scaled)
    if window is not None:
        # Pairs (anchor, j) with j in the window: the anchors' positives all lie there.
        count, start, size = anchors[1], window[0], window[1]
        rows = slice(own, own + count)
        pdist = pdist[rows, start : start + size]
        positives = positives[rows, start : start + size]
        row_shift, row_scaled = shift[rows], scaled[rows]

    # log(S_i e^{r_i} + S_j e^{r_j}) = M + log(S_i e^{r_i - M} + S_j e^{r_j - M}), M = max(r_i, r_j)
    pair_shift = _backend.maximum(row_shift, column_shift)
    pair_sum = row_scaled * ops.exp(row_shift - pair_shift) + column_scaled * ops.exp(
        column_shift - pair_shift
    )
    has_negatives = pair_sum > 0.0
    # log(0) only where neither row has a negative; those pairs contribute max(-inf, 0) = 0.
    # The other branches are scalars, broadcast by the select (as the original wrote them): a
    # filled [n, b] tensor each would be one more array to write and read.
    log_sum = ops.where(has_negatives, ops.log(ops.where(has_negatives, pair_sum, 1.0)), -np.inf)
    objective = pair_shift + log_sum + pdist

    hinge = _common.hinge(ops.where(positives, objective, 0.0))
    # NaN where a distance is not finite (NaN, inf or overflowing embeddings).
    total = _common.nan_unless_finite(0.25 * ops.sum(ops.square(hinge)), window_distances)
    if anchors is None:
        num_pairs = _common.positive_pair_count(labels, x.dtype) / 2.0
    else:
        first_rows, _ = _common.anchor_masks(labels, anchors, valid)
        num_pairs = ops.cast(_common.count_true(first_rows), x.dtype) / 2.0
    # keep_nan: a non-finite batch gives NaN even with no positive pair.
    return [_common.LossPart(total, num_pairs, keep_nan=True)], dtype


def _class_window(labels, anchors, valid=None):
    """``(start, size)``: the smallest range of rows holding the rows ``anchors = (start,
    count)`` and every (`valid`) row of their classes (``(start, 0)`` for no anchors)."""
    start, count = anchors
    b = ops.shape(labels)[0]
    own_labels = labels[start : start + count]
    # Rows sharing a class with an anchor (the anchors among them): a [count, b] comparison.
    needed = ops.any(ops.equal(own_labels[:, None], labels[None, :]), axis=0)
    index = ops.arange(b, dtype="int32")
    if valid is not None:
        # The rows in use, and the anchors' own rows even when dropped (the window holds the
        # anchors: their rows are sliced from it; a dropped one has no pair there).
        own = ops.logical_and(index >= start, index < start + count)
        needed = ops.logical_and(needed, ops.logical_or(valid, own))
    first = ops.min(ops.where(needed, index, b))
    end = ops.max(ops.where(needed, index + 1, 0))
    has_anchors = count > 0
    return ops.where(has_anchors, first, start), ops.where(has_anchors, end - first, 0)


def _negative_sums(margin, pdist, negatives, valid=None):
    """Per row: ``sum_{k in neg} exp(margin - d_k)`` as ``(shift, scaled)``, each `[n, 1]`,
    the sum being ``scaled * exp(shift)`` (kept apart so that exp() stays in range); `valid`:
    the columns in use (None: all)."""
    diff = margin - pdist
    columns = None if valid is None else valid[None, :]
    # The shifts only keep exp() in range; the log-sum-exp is invariant to them, so they carry no
    # gradient (letting it flow breaks at ties between two rows' shifts, as it does in TFA).
    shift = ops.stop_gradient(_common.masked_max(diff, negatives, valid=columns))  # [n, 1]
    # The exponent is masked before exp: an unselected overflow would still poison the gradient.
    exponent = ops.where(negatives, diff - shift, 0.0)
    scaled = ops.sum(ops.where(negatives, ops.exp(exponent), 0.0), axis=1, keepdims=True)
    return shift, scaled


@register(tfa=True)
class LiftedStructLoss(BatchPenaltyLoss):
    """Keras loss for `lifted_struct_loss` (drop-in for `tfa.losses.LiftedStructLoss`;
    ``distance="squared-L2"`` is the SVMax repository's squared-distance variant; a config
    saved with ``squared``, its former name, loads as the same loss).

    Under a `tf.distribute` strategy each replica computes the pairs of its own anchors
    against the global batch (its reference rows, `lifted_struct_loss`): the distance rows of
    its anchors' classes, about `[b/N, b]` on P x K batches, with the same value and gradients
    as one device.
    """

    splits_anchors = True
    accepts_reference_rows = True
    accepts_ref_mask = True

    renamed_arguments = RENAMED

    def __init__(self, margin=1.0, distance="L2", name="lifted_struct_loss", **kwargs):
        fn_kwargs = dict(
            margin=checks.check_finite_number(margin, "margin"),
            distance=distances.check_distance(distance),
        )
        super().__init__(lifted_struct_loss, fn_kwargs, parts_fn=_lifted_parts, name=name, **kwargs)
