"""The SVMax papers' pair-based losses on P x K batches: contrastive (K=4), N-pair and angular
(K=2), with the originals' pair layouts, epsilons and L2 terms.

Semantics of ahmdtaha/tf_retrieval_baseline (`ranking/contrastive.py`, `npair.py`,
`angular.py` and the pair construction in `train.py`), as used by the SVMax paper (seed `000`,
Sec. 4.1; dissertation `001`, Sec. 3.4.1). Batches are P classes x K consecutive rows.
"""

import math
import numbers

import numpy as np
from keras import ops

from tf_svmax import _backend, checks
from tf_svmax.losses import _common
from tf_svmax.losses._base import BatchPenaltyLoss
from tf_svmax.losses._registry import register

# Added under the square root of the pair distance, as in the original contrastive loss (its
# README: avoids NaN gradients at zero distance). Note 10e-6 = 1e-5.
CONTRASTIVE_EPSILON = 1e-5
# Within each group of two classes (8 rows, K=4), the originals pair rows (0,1), (4,3), (2,5),
# (6,7): two same-class pairs and two cross-class pairs, every image used once.
_CONTRASTIVE_ORDER = np.array([0, 1, 4, 3, 2, 5, 6, 7])


def _check_batch_k(batch_k, expected_k):
    """`batch_k`, raising ValueError unless it is the originals' `expected_k`."""
    if batch_k != expected_k:
        raise ValueError(
            checks.invalid("batch_k", f"{expected_k} (the originals' pair layout)", batch_k)
        )
    return batch_k


def _check_alpha(alpha):
    """`alpha` as a Python float, raising ValueError unless it is an angle in (0, 90) degrees
    (tan^2 is 0 at 0 and infinite at 90)."""
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not 0 < alpha < 90:
        raise ValueError(checks.invalid("alpha", "an angle in degrees in (0, 90)", alpha))
    return float(alpha)


def _check_pk(labels, x, batch_k, expected_k):
    """Validates a P x K layout; returns labels `[B]`."""
    _check_batch_k(batch_k, expected_k)
    labels = _common.flat_labels(labels, x, "labels", "embeddings")
    group = 2 * batch_k if expected_k == 4 else batch_k
    rows = x.shape[0]
    if rows is not None and rows % group:
        raise ValueError(
            f"Invalid value for argument `embeddings`. Expected a batch of P x K = "
            f"{'an even number of classes x ' if expected_k == 4 else ''}{batch_k} rows "
            f"(a multiple of {group}). Received: {rows} rows."
        )
    multiple_message = (
        f"Invalid value for argument `labels`: the batch must be a multiple of {group} "
        f"rows (P x K with K={batch_k}); a remainder batch is not one (batch with "
        "drop_remainder=True, or use data.pk_batches)."
    )
    layout_message = (
        f"Invalid value for argument `labels`: expected {batch_k} consecutive rows "
        "per class (a P x K batch)."
    )

    def layout_assertion(tf):
        multiple = tf.debugging.assert_equal(
            tf.shape(labels)[0] % group, 0, message=multiple_message
        )
        # The reshape runs only after the multiple check, so a remainder batch gets the message
        # above rather than a raw reshape error.
        with tf.control_dependencies([multiple]):
            blocks = tf.reshape(labels, [-1, batch_k])
        return tf.debugging.assert_equal(
            blocks, tf.tile(blocks[:, :1], [1, batch_k]), message=layout_message
        )

    # A TensorFlow graph checks when it runs; a static row count and known labels (eagerly,
    # PyTorch always) are checked here; unchecked under `jax.jit` (JAX has no run-time
    # assertion), as `checks.integer_floats`.
    labels = checks.checked_when_run(labels, layout_assertion)
    if labels.shape[0] is not None and labels.shape[0] % group:
        raise ValueError(multiple_message)
    known = _backend.concrete_values(labels)
    if known is not None:
        blocks = known.reshape(-1, batch_k)
        if not (blocks == blocks[:, :1]).all():
            raise ValueError(layout_message)
    return labels


@register(helper=True)
def pk_contrastive_pairs(labels, embeddings, *, batch_k=4):
    """The originals' contrastive pairs from a P x 4 batch.

    In every group of two classes A, B (rows A0..A3, B0..B3) the pairs are (A0, A1) similar,
    (B0, A3) dissimilar, (A2, B1) dissimilar, (B2, B3) similar: ``B / 2`` pairs, half similar.
    (At b = 144 that is 36 + 36 pairs; the papers' text says "72 positive and 72 negative".)

    Args:
      labels: `[B]` labels, K = 4 consecutive rows per class, an even number of classes.
      embeddings: `[B, D]`.
      batch_k: Must be 4.

    Returns:
      `(first [B/2, D], second [B/2, D], similar [B/2] float)`; `similar` is computed from the
      labels (the originals hard-code the pattern 1, 0, 0, 1).
    """
    x = checks.to_tensor(embeddings, "embeddings")
    labels = _check_pk(labels, x, batch_k, expected_k=4)
    groups = ops.shape(x)[0] // 8
    order = ops.reshape(
        ops.convert_to_tensor(_CONTRASTIVE_ORDER.astype(np.int32))[None, :]
        + 8 * ops.arange(groups, dtype="int32")[:, None],
        [-1, 2],
    )
    first, second = _backend.take(x, order[:, 0]), _backend.take(x, order[:, 1])
    similar = ops.equal(_backend.take(labels, order[:, 0]), _backend.take(labels, order[:, 1]))
    return first, second, ops.cast(similar, x.dtype)


def _clamp_at_zero(x):
    """``max(x, 0)`` with `tf.maximum`'s values and gradient; not `ops.maximum`, which Keras
    computes in float32 for float64 input on JAX/PyTorch."""
    return ops.where(x < 0.0, ops.zeros_like(x), x)


@register
def pk_contrastive_loss(labels, embeddings, *, margin=1.0, batch_k=4):
    """Per-pair contrastive loss of the SVMax experiments on a P x 4 batch.

    ``d = sqrt(||a - b||^2 + 1e-5)``; ``y d^2 + (1 - y) max(margin - d, 0)^2`` (no 1/2).

    Args:
      labels: `[B]` labels, K = 4 consecutive rows per class, an even number of classes.
      embeddings: `[B, D]`.
      margin: Margin of the dissimilar pairs, a float >= 0 (the SVMax experiments: 1.0).
      batch_k: Must be 4.

    Returns:
      `[B / 2]` pair losses (the originals average them).

    Example:
      >>> pk_contrastive_loss([0, 0, 0, 0, 1, 1, 1, 1], keras.ops.eye(8), margin=2.0)
      ... # pairs (0, 1), (4, 3), (2, 5), (6, 7): [2 + 1e-5, (2 - sqrt(2 + 1e-5))^2, the same,
      ... # 2 + 1e-5] = [2.00001, 0.343, 0.343, 2.00001]
    """
    margin = checks.check_non_negative_number(margin, "margin")
    x, dtype = _common.embeddings_matrix(embeddings, arg="embeddings")
    first, second, similar = pk_contrastive_pairs(labels, x, batch_k=batch_k)
    d = ops.sqrt(ops.sum(ops.square(first - second), axis=1) + CONTRASTIVE_EPSILON)
    loss = similar * ops.square(d) + (1.0 - similar) * ops.square(_clamp_at_zero(margin - d))
    return ops.cast(loss, dtype)


def _anchor_positive_halves(x, labels, dtype, rows=None):
    """``(anchors, positives, own_anchors, own_positives, targets, dtype)`` of a P x 2 batch
    (checked embeddings `x`, labels): even rows are anchors, odd rows their positives;
    ``own_*`` are the pairs whose anchor row is in ``rows = (start, count)`` (all pairs
    when None), `targets` their rows of the N-pair targets `[own, B/2]`."""
    labels = _check_pk(labels, x, 2, expected_k=2)
    pairs = ops.reshape(x, [-1, 2, ops.shape(x)[1]])
    anchor_labels = ops.reshape(labels, [-1, 2])[:, 0]
    first, last = _own_pairs(rows)
    own_labels = anchor_labels if rows is None else anchor_labels[first:last]
    same = ops.cast(ops.equal(own_labels[:, None], anchor_labels[None, :]), x.dtype)
    targets = same / ops.sum(same, axis=1, keepdims=True)
    anchors, positives = pairs[:, 0], pairs[:, 1]
    if rows is None:
        return anchors, positives, anchors, positives, targets, dtype
    return anchors, positives, anchors[first:last], positives[first:last], targets, dtype


def _own_pairs(rows):
    """``(first, last)``: the pairs ``first .. last - 1`` whose anchor (row ``2k``) lies in
    ``rows = (start, count)``; disjoint row ranges give disjoint pair ranges, whatever
    the parity of their bounds (a replica's shard may end inside a pair)."""
    if rows is None:
        return None, None
    start, count = rows
    return (start + 1) // 2, (start + count + 1) // 2


def _l2_term(anchors, positives, l2_reg):
    # 0.25 * l2_reg * (mean ||a||^2 + mean ||p||^2), the originals' constant factors.
    return (
        0.25
        * l2_reg
        * (
            ops.mean(ops.sum(ops.square(anchors), axis=1))
            + ops.mean(ops.sum(ops.square(positives), axis=1))
        )
    )


def _softmax_cross_entropy(targets, logits):
    """Per-row softmax cross-entropy: `tf.nn.softmax_cross_entropy_with_logits` on TensorFlow
    (Keras' `categorical_crossentropy` with logits calls it), log-softmax elsewhere."""
    return ops.categorical_crossentropy(targets, logits, from_logits=True)


def _batch(labels, embeddings):
    """``(x, labels, dtype)``: the checked batch, half precision promoted."""
    x, dtype = _common.embeddings_matrix(embeddings, arg="embeddings")
    return x, labels, dtype


@register
def pk_npair_loss(labels, embeddings, *, l2_reg=0.002):
    """Per-anchor N-pair loss (Sohn 2016) on a P x 2 batch, with the originals' L2 term.

    Even rows are anchors, odd rows their positives. ``softmax_xent(A P^T, T)`` per anchor with
    targets ``T`` uniform over anchors of the same class, plus
    ``0.25 * l2_reg * (mean ||a||^2 + mean ||p||^2)`` (paper: l2_reg = 0.002).

    Args:
      labels: `[B]` labels, 2 consecutive rows per class.
      embeddings: `[B, D]`.
      l2_reg: Weight of the L2 term, a float >= 0.

    Returns:
      `[B / 2]` values whose mean is the originals' loss.
    """
    l2_reg = checks.check_non_negative_number(l2_reg, "l2_reg")
    return _npair_values(*_batch(labels, embeddings), l2_reg=l2_reg)


def _npair_values(x, labels, dtype, *, l2_reg, rows=None):
    """`pk_npair_loss` of the anchors (even rows) in ``rows = (start, count)`` (all
    when None) against every positive of the batch (`[count/2, B/2]` logits)."""
    anchors, positives, own, _, targets, dtype = _anchor_positive_halves(x, labels, dtype, rows)
    logits = _backend.matmul(own, positives, transpose_b=True)
    xent = _softmax_cross_entropy(targets, logits)
    return ops.cast(xent + _l2_term(anchors, positives, l2_reg), dtype)


@register
def pk_angular_loss(labels, embeddings, *, alpha=45.0, l2_reg=0.002):
    """Per-anchor angular loss (Wang et al. 2017, the "angular-mc" form) on a P x 2 batch.

    With ``t = tan^2(alpha)``: ``f_ii = 2 (1 + t) a_i.p_i`` and, for ``j != i``,
    ``f_ij = 4 t (a_i + p_i).p_j``; softmax cross-entropy of each row against the same targets
    as N-pair, plus the same L2 term (``l2_reg = 0`` disables it). Paper: alpha = 45 degrees.

    Args:
      labels: `[B]` labels, 2 consecutive rows per class.
      embeddings: `[B, D]`.
      alpha: The angle in degrees, in (0, 90).
      l2_reg: Weight of the L2 term, a float >= 0.

    Returns:
      `[B / 2]` values whose mean is the originals' loss.
    """
    alpha = _check_alpha(alpha)
    l2_reg = checks.check_non_negative_number(l2_reg, "l2_reg")
    return _angular_values(*_batch(labels, embeddings), alpha=alpha, l2_reg=l2_reg)


def _angular_values(x, labels, dtype, *, alpha, l2_reg, rows=None):
    """`pk_angular_loss` of the anchors in ``rows`` (as `_npair_values`)."""
    anchors, positives, own, own_positives, targets, dtype = _anchor_positive_halves(
        x, labels, dtype, rows
    )
    t = math.tan(math.radians(alpha)) ** 2
    off_diagonal = 4.0 * t * _backend.matmul(own + own_positives, positives, transpose_b=True)
    diagonal = 2.0 * (1.0 + t) * ops.sum(own * own_positives, axis=1)
    if rows is None:
        logits = _backend.set_diagonal(off_diagonal, diagonal)
    else:
        # The own pairs' "diagonal" sits at column first + i of row i (a selection: the values
        # of `set_diagonal` when all pairs are own).
        first = _own_pairs(rows)[0]
        itself = ops.one_hot(ops.arange(ops.shape(own)[0]) + first, ops.shape(positives)[0]) > 0
        logits = ops.where(itself, diagonal[:, None], off_diagonal)
    xent = _softmax_cross_entropy(targets, logits)
    return ops.cast(xent + _l2_term(anchors, positives, l2_reg), dtype)


def _mean_of(values_fn):
    """The batch-level loss of a per-pair (per-anchor) function: the mean of its values, as
    the originals average them; in the ``(y_true, y_pred, **kwargs)`` form that
    `Loss` calls."""

    def mean(y_true, y_pred, **kwargs):
        return ops.mean(values_fn(y_true, y_pred, **kwargs))

    return mean


def _pair_parts(values_fn):
    """The ``parts_fn`` (`Loss`) of the N-pair and angular losses, split by
    pairs: the values (``values_fn(x, labels, dtype, rows=..., **kwargs)``) of the pairs whose
    anchor row is one of the rows `y_pred` (the reference rows ``ref_offset ..`` of the whole
    P x 2 batch, `ref_embeddings`), against every positive of the batch, and their number (the
    replicas' numbers add up to B / 2)."""

    def parts(y_true, y_pred, *, ref_labels, ref_embeddings, ref_offset=0, **kwargs):
        x, labels, rows, dtype = _common.anchors_and_references(
            y_true, y_pred, ref_labels, ref_embeddings, ref_offset, "labels", "embeddings"
        )
        values = values_fn(x, labels, dtype, rows=rows, **kwargs)
        first, last = _own_pairs(rows)
        return [_common.LossPart(ops.sum(values), last - first)], dtype

    return parts


@register
class PKContrastiveLoss(BatchPenaltyLoss):
    """Keras loss for `pk_contrastive_loss` (mean over the batch's pairs).

    The SVMax experiments: L2-normalized embeddings, margin 1.0, 36 x 4 batches, and
    ``RegularizedLoss(PKContrastiveLoss(), [SVMaxLoss(lambda_=1.0)])``.

    Not split over the replicas of a `tf.distribute` strategy (each evaluates the B / 2 pairs
    of the global batch): there is no B x B term, the pairs cost O(B D), as much as the
    gather of the embeddings that any split would still need.
    """

    class_block_rows = 4  # `batch_k`, which must be 4

    def __init__(self, margin=1.0, batch_k=4, name="pk_contrastive", **kwargs):
        fn_kwargs = dict(
            margin=checks.check_non_negative_number(margin, "margin"),
            batch_k=_check_batch_k(batch_k, 4),
        )
        super().__init__(_mean_of(pk_contrastive_loss), fn_kwargs, name=name, **kwargs)


@register
class PKNpairLoss(BatchPenaltyLoss):
    """Keras loss for `pk_npair_loss` (mean over anchors); 72 x 2 batches in the paper.

    Under a `tf.distribute` strategy each replica computes the anchors of its own rows against
    every positive of the global batch (`reference_parts`: the batch's pairs split by their
    anchor rows, not reference rows to mine, so `CrossBatchMemory` does not take it): the same
    value and gradients as one device, with 1/N of the logits.
    """

    splits_anchors = True
    class_block_rows = 2

    def __init__(self, l2_reg=0.002, name="pk_npair", **kwargs):
        fn_kwargs = dict(l2_reg=checks.check_non_negative_number(l2_reg, "l2_reg"))
        super().__init__(
            _mean_of(pk_npair_loss),
            fn_kwargs,
            parts_fn=_pair_parts(_npair_values),
            name=name,
            **kwargs,
        )


@register
class PKAngularLoss(BatchPenaltyLoss):
    """Keras loss for `pk_angular_loss` (mean over anchors); 72 x 2 batches in the paper.

    Split over the replicas of a `tf.distribute` strategy by anchors (`reference_parts`), as
    `PKNpairLoss`.
    """

    splits_anchors = True
    class_block_rows = 2

    def __init__(self, alpha=45.0, l2_reg=0.002, name="pk_angular", **kwargs):
        fn_kwargs = dict(
            alpha=_check_alpha(alpha),
            l2_reg=checks.check_non_negative_number(l2_reg, "l2_reg"),
        )
        super().__init__(
            _mean_of(pk_angular_loss),
            fn_kwargs,
            parts_fn=_pair_parts(_angular_values),
            name=name,
            **kwargs,
        )
