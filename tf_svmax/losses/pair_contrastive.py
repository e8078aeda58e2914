"""All-pairs contrastive loss over labelled embeddings (Hadsell et al. 2006 in the form that
pytorch-metric-learning's `ContrastiveLoss` and the XBM paper use): every ordered pair of
distinct rows is a positive (same label) or a negative pair, with its own margin.

Unlike `ContrastiveLoss` (tensorflow-addons': given pairs and their distances) and
`PKContrastiveLoss` (the SVMax originals' fixed P x 4 pairing), its anchors can be mined
against separate reference rows (``ref_labels``, ``ref_embeddings``), so `CrossBatchMemory` can
wrap it.
"""

from keras import ops

from tf_svmax import _backend, checks
from tf_svmax.losses import _common
from tf_svmax.losses._base import BatchPenaltyLoss, refuses_renamed
from tf_svmax.losses._registry import register
from tf_svmax.ops import distances

# Both kinds of `tf_svmax.ops.distances.DISTANCES`: a similarity is pulled up for positives, a
# distance down.
KINDS = (distances.DISTANCE, distances.SIMILARITY)
# `distance=` was `metric=`, whose names were this loss' own: "cosine" (cosine similarity, the
# table's "cosine_similarity"), "dot" (the same in the table) and "euclidean"
# (pytorch-metric-learning's `LpDistance`: the table's "L2", exactly 0 at duplicates, not its
# cdist "euclidean", 1e-6 there).
RENAMED = {"metric": ("distance", {"cosine": "cosine_similarity", "dot": "dot", "euclidean": "L2"})}


def _check_distance(distance):
    return distances.check_distance(distance, kinds=KINDS)


def _pair_terms(x, labels, distance, pos_margin, neg_margin, rows, valid=None):
    """``(positive, negative)`` `[count, n]` pair terms of the anchors `rows` against every
    (`valid`) row, 0 outside the pairs of their kind (and at the anchor itself)."""
    matrix = distances.distance_matrix(x, distance, rows=rows)
    positives, negatives = _common.anchor_masks(labels, rows, valid)
    if distances.is_similarity(distance):
        positive, negative = pos_margin - matrix, matrix - neg_margin
    else:
        positive, negative = matrix - pos_margin, neg_margin - matrix
    zero = ops.zeros_like(matrix)
    return (
        ops.where(positives, ops.relu(positive), zero),
        ops.where(negatives, ops.relu(negative), zero),
    )


def _non_zero(terms):
    # Counted in int64: a float32 sum of ones stops being exact past 2**24 pairs (a batch of
    # 1,024 against a memory of 16,384 rows has that many).
    # (Keras' `ops.count_nonzero` counts in int32; JAX without 64-bit types has int32 only,
    # exact up to 2**31 pairs, asked for by name so that JAX warns of no truncation.)
    return ops.sum(ops.cast(terms > 0.0, "int32" if _backend.jax_without_x64() else "int64"))


@register
@refuses_renamed(RENAMED)
def all_pairs_contrastive_loss(
    y_true,
    y_pred,
    *,
    pos_margin=1.0,
    neg_margin=0.5,
    distance="cosine_similarity",
    ref_labels=None,
    ref_embeddings=None,
    ref_offset=0,
    ref_mask=None,
):
    """Contrastive loss over every ordered pair ``(a, r)`` of distinct rows, averaged over the
    non-zero pair terms (pytorch-metric-learning's `ContrastiveLoss` with its default
    `AvgNonZeroReducer`).

    With ``s`` the pair's similarity (``distance="cosine_similarity"`` or ``"dot"``) or ``d``
    its distance (``"L2"`` or any other distance), each pair term is::

        positive pair (same label, r != a):  relu(pos_margin - s)   or  relu(d - pos_margin)
        negative pair (other label):         relu(s - neg_margin)   or  relu(neg_margin - d)

    and the value is ``sum(positive terms) / count(positive terms > 0) + sum(negative terms) /
    count(negative terms > 0)``, each part 0 when it has no term above 0 (so a pair already
    past its margin weighs nothing, not even in the normalizer). Both orders of a pair count.

    The defaults are the XBM paper's (Wang et al., CVPR 2020: contrastive loss on cosine
    similarities, positives ``1 - s``, negatives above the margin 0.5). Its code
    (msight-tech/research-xbm) divides the sum of all the terms by the batch size instead of
    this average over non-zero terms, and takes ``s`` rather than ``s - 0.5`` as a negative's
    term (the same gradient). pytorch-metric-learning's defaults are the Euclidean distance
    with ``pos_margin=0, neg_margin=1`` on rows that its `LpDistance` L2-normalizes first:
    ``distance="L2", pos_margin=0.0, neg_margin=1.0`` on normalized rows.

    Args:
      y_true: `[batch_size]` (or `[batch_size, 1]`) class labels, compared in their own dtype
        (int64 labels above 2**24 stay distinct).
      y_pred: `[batch_size, dim]` embeddings.
      pos_margin: A positive pair's margin: its similarity is pulled up to it (or its distance
        down to it).
      neg_margin: A negative pair's margin: its similarity is pushed below it (or its distance
        above it).
      distance: A similarity or a distance of `tf_svmax.ops.distances.DISTANCES`:
        ``"cosine_similarity"`` (the rows are L2-normalized here), ``"dot"`` (dot product of
        the rows as given), ``"L2"`` (Euclidean distance of the rows as given, exactly 0 at
        duplicate rows: pytorch-metric-learning's `LpDistance`; the cdist ``"euclidean"``
        adds 1e-12 under the square root, as `BatchHardTripletLoss` does) or another distance
        of the table. Formerly ``metric``, whose ``"cosine"``, ``"dot"`` and ``"euclidean"``
        are ``"cosine_similarity"``, ``"dot"`` and ``"L2"`` here (the table's ``"cosine"`` is
        the cosine *distance* ``1 - a.b``); it is refused with a message naming this one.
      ref_labels: Optional `[m]` labels of reference rows (with `ref_embeddings`), which hold
        the anchors at rows ``ref_offset ..`` (as in `triplet_semihard_loss`): the pairs are
        then ``(a, r)`` with ``a`` an anchor and ``r`` any other reference, each part divided
        by its number of non-zero terms among them (pytorch-metric-learning's ``ref_emb``,
        ``ref_labels``; a batch against a cross-batch memory,
        `tf_svmax.losses.CrossBatchMemory`). The counts carry no gradient (as in
        pytorch-metric-learning).
      ref_embeddings: Optional `[m, dim]` reference embeddings (with `ref_labels`).
      ref_offset: The anchors' first row among the references (default 0).
      ref_mask: Optional bool `[m]`: the reference rows in use (default: all), as in
        `triplet_semihard_loss` (a False row is in no pair and in no count; a False at an
        anchor's own row drops that anchor's pairs).

    Differences from pytorch-metric-learning 2.9: ``"L2"`` does not L2-normalize (its
    `LpDistance` does by default; normalize the embeddings, e.g. with
    `keras.layers.UnitNormalization`); it returns 0 when the batch has at most one positive and
    at most one negative ordered pair (a batch has them in pairs, so this only concerns a
    reference set), while here those terms count; duplicate rows have distance exactly 0 with
    a zero gradient (as its `torch.cdist`).

    Returns:
      A scalar of the embeddings' dtype (float16/bfloat16 computed in float32). 0 when no pair
      term is above 0; NaN when a pair term is NaN (a NaN or infinite embedding). Memory:
      `[batch_size, m]` matrices (the anchors against the references; m = batch_size
      without them).

    Example:
      >>> all_pairs_contrastive_loss([0, 0, 1], [[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]])  # 0.7

      (positives ``1 - 0.6`` twice: mean 0.4; negatives ``0.8 - 0.5`` twice, the pairs of
      similarity 0 past the margin: mean 0.3.)
    """
    references = (ref_labels, ref_embeddings, ref_offset, ref_mask)
    parts, dtype = _contrastive_parts(y_true, y_pred, pos_margin, neg_margin, distance, *references)
    return ops.cast(_common.mean_of_parts(parts), dtype)


def _contrastive_parts(
    y_true,
    y_pred,
    pos_margin,
    neg_margin,
    distance,
    ref_labels,
    ref_embeddings,
    ref_offset,
    ref_mask=None,
):
    """``([positive, negative], dtype)``: two `LossPart` s, each the sum of the anchors' pair
    terms of that kind and the number of them above 0 (a NaN sum gives NaN: a NaN term fails
    ``> 0``, so a batch whose only terms above 0 are NaN would otherwise count none and give
    0)."""
    pos_margin = checks.check_finite_number(pos_margin, "pos_margin")
    neg_margin = checks.check_finite_number(neg_margin, "neg_margin")
    distance = _check_distance(distance)
    x, labels, rows, dtype = _common.anchors_and_references(
        y_true, y_pred, ref_labels, ref_embeddings, ref_offset
    )
    x, valid = _common.reference_mask(ref_mask, x, rows)
    positive, negative = _pair_terms(x, labels, distance, pos_margin, neg_margin, rows, valid)
    # The counts are of a comparison: no gradient flows through them.
    parts = [
        _common.LossPart(ops.sum(positive), _non_zero(positive), keep_nan=True),
        _common.LossPart(ops.sum(negative), _non_zero(negative), keep_nan=True),
    ]
    return parts, dtype


@register
class AllPairsContrastiveLoss(BatchPenaltyLoss):
    """Keras loss for `all_pairs_contrastive_loss` (pytorch-metric-learning's
    `ContrastiveLoss`; defaults: the XBM paper's cosine similarity, margins 1 and 0.5).

    `y_true`: `[batch_size]` integer labels; `y_pred`: `[batch_size, dim]` embeddings. One
    scalar per batch. `CrossBatchMemory` can wrap it (the XBM paper's pairing). A config saved
    with ``metric`` (the former name of ``distance``, its values mapped as in the function)
    loads as the same loss.

    Under a `tf.distribute` strategy each replica computes the pairs of its own anchors against
    the global batch (its reference rows; the replicas' counts of non-zero terms are summed,
    without gradient): the same value and gradients as one device.

    Example:
      >>> xbm = CrossBatchMemory(AllPairsContrastiveLoss(), memory_size=1024, start_step=100)
    """

    splits_anchors = True
    accepts_reference_rows = True
    accepts_ref_mask = True
    renamed_arguments = RENAMED

    def __init__(
        self,
        pos_margin=1.0,
        neg_margin=0.5,
        distance="cosine_similarity",
        name="all_pairs_contrastive",
        **kwargs,
    ):
        fn_kwargs = dict(
            pos_margin=checks.check_finite_number(pos_margin, "pos_margin"),
            neg_margin=checks.check_finite_number(neg_margin, "neg_margin"),
            distance=_check_distance(distance),
        )
        super().__init__(
            all_pairs_contrastive_loss, fn_kwargs, parts_fn=_contrastive_parts, name=name, **kwargs
        )
