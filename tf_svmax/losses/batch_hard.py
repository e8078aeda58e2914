"""Batch-hard triplet loss as the SVMax retrieval experiments trained it (Hermans et al. 2017).

Semantics of ahmdtaha/tf_retrieval_baseline (`ranking/hard_triplet.py`, used by the SVMax
paper, seed `000` Sec. 4.1): per anchor, the farthest positive and the closest negative under
a distance of `tf_svmax.ops.distances.DISTANCES`, by default one of the originals' four
(`tf_svmax.ops.distances.cdist`, in O(b^2) memory where the originals broadcast `[b, b, d]`
differences), with a float margin, a soft margin (softplus) or none. One value per anchor.

It differs from tensorflow-addons' `triplet_hard_loss` (Gram-expansion distances, mean only).
"""

import numbers

from keras import ops

from tf_svmax import _backend, checks
from tf_svmax.losses import _common
from tf_svmax.losses._base import PerSampleLabelLoss, refuses_renamed
from tf_svmax.losses._registry import register
from tf_svmax.ops import distances

MARGIN_MODES = ("soft", "none")

# `distance=` was `metric=` (the same names, each with the same meaning).
RENAMED = {"metric": ("distance", {name: name for name in distances.DISTANCE_NAMES})}


def _check_margin(margin):
    if isinstance(margin, str):
        if margin not in MARGIN_MODES:
            raise ValueError(checks.invalid("margin", "a float >= 0, 'soft' or 'none'", margin))
        return margin
    if isinstance(margin, bool) or not isinstance(margin, numbers.Real):
        raise ValueError(checks.invalid("margin", "a float >= 0, 'soft' or 'none'", margin))
    # NaN compares False with everything, so `margin < 0` alone would let it through.
    return checks.check_non_negative_number(margin, "margin")


@register
@refuses_renamed(RENAMED)
def batch_hard_triplet_loss(
    labels,
    embeddings,
    *,
    margin=0.2,
    distance="euclidean",
    ref_labels=None,
    ref_embeddings=None,
    ref_offset=0,
    ref_mask=None,
):
    """Per-anchor batch-hard triplet loss.

    ``diff_a = max_{p: y_p = y_a, p != a} d(a, p) - min_{n: y_n != y_a} d(a, n)``, then
    ``max(diff + margin, 0)`` (float margin), ``softplus(diff)`` (``"soft"``) or ``diff``
    (``"none"``).

    Defined results for degenerate batches: an anchor without a positive uses 0 as its
    farthest-positive distance (the original's masked maximum); an anchor without any negative
    (a one-class batch) has loss 0 in every margin mode (the original would give +-inf).

    Args:
      labels: `[B]` class labels.
      embeddings: `[B, D]` embeddings (normally L2-normalized).
      margin: A float >= 0 (paper: 0.2), ``"soft"`` or ``"none"``.
      distance: ``"euclidean"`` (with the originals' 1e-12 under the square root),
        ``"sqeuclidean"``, ``"cityblock"`` or ``"cosine"`` (the originals' `cdist`), or
        tensorflow-addons' ``"L2"``, ``"squared-L2"`` or ``"angular"`` (see
        `tf_svmax.ops.distances.DISTANCES`: each name keeps its own definition; a similarity
        is refused). Formerly ``metric``, which is refused with a message naming this one.
      ref_labels: Optional `[m]` labels of reference rows (with `ref_embeddings`), which hold
        the anchors at rows ``ref_offset ..`` (as in `tf_svmax.losses.triplet_semihard_loss`):
        each anchor's farthest positive and closest negative are then among the references
        (a replica's anchors of a gathered global batch, a batch against a cross-batch memory).
      ref_embeddings: Optional `[m, D]` reference embeddings (with `ref_labels`).
      ref_offset: The anchors' first row among the references (default 0).
      ref_mask: Optional bool `[m]`: the reference rows in use (default: all), as in
        `tf_svmax.losses.triplet_semihard_loss` (a False row is no positive and no negative;
        an anchor whose own row is False is dropped: its value is 0, and the class'
        ``"sum_over_batch_size"`` counts only the anchors in use).

    Returns:
      `[B]` losses in the embeddings' dtype (half precision computed in float32); NaN for an
      anchor with a non-finite distance (NaN, inf or overflowing embeddings).
    """
    margin = _check_margin(margin)
    distance = distances.check_distance(distance)
    x, labels, rows, dtype = _common.anchors_and_references(
        labels, embeddings, ref_labels, ref_embeddings, ref_offset, "labels", "embeddings"
    )
    x, valid = _common.reference_mask(ref_mask, x, rows)
    dist = distances.distance_matrix(x, distance, rows=rows)
    positives, negatives = _common.anchor_masks(labels, rows, valid)

    # Farthest positive (0 where there is none) and closest negative.
    positive_dist = dist * ops.cast(positives, dist.dtype)
    if valid is not None:
        # A column not in use ties with no zero of the max (its gradient is split as without it).
        positive_dist = ops.where(valid[None, :], positive_dist, float("-inf"))
    farthest_positive = _backend.reduce_with_identity(ops.max, positive_dist, 1)
    has_negative = ops.any(negatives, axis=1)
    closest_negative = _backend.reduce_with_identity(
        ops.min, ops.where(negatives, dist, float("inf")), 1
    )
    # +inf for anchors without negatives; replaced before any arithmetic touches it.
    closest_negative = ops.where(has_negative, closest_negative, ops.zeros_like(closest_negative))
    diff = farthest_positive - closest_negative
    if margin == "soft":
        loss = ops.softplus(diff)
    elif margin == "none":
        loss = diff
    else:
        # `ops.where`, not `ops.maximum`: Keras promotes float64 to float32 there on JAX/PyTorch.
        shifted = diff + margin
        loss = ops.where(shifted < 0.0, ops.zeros_like(shifted), shifted)
    loss = ops.where(has_negative, loss, ops.zeros_like(loss))
    # NaN for an anchor with a non-finite distance (NaN, inf or overflowing embeddings): the
    # `where`s above, and XLA's max/min reductions on TensorFlow, would drop it.
    return ops.cast(_common.nan_unless_finite(loss, dist, axis=1), dtype)


@register
class BatchHardTripletLoss(PerSampleLabelLoss):
    """Keras loss for `batch_hard_triplet_loss` (mean over anchors by default). A config saved
    with ``metric`` (its former name for ``distance``) loads as the same loss.

    Example:
      >>> loss = RegularizedLoss(BatchHardTripletLoss(margin=0.2), [SVMaxLoss(lambda_=0.1)])
    """

    splits_anchors = True
    accepts_reference_rows = True
    accepts_ref_mask = True

    renamed_arguments = RENAMED

    def __init__(self, margin=0.2, distance="euclidean", name="batch_hard_triplet", **kwargs):
        fn_kwargs = {
            "margin": _check_margin(margin),
            "distance": distances.check_distance(distance),
        }
        super().__init__(batch_hard_triplet_loss, fn_kwargs, name=name, **kwargs)
