"""Batch-hard triplet loss as the SVMax retrieval experiments trained it (Hermans et al. 2017).

Semantics of ahmdtaha/tf_retrieval_baseline (`ranking/hard_triplet.py`, used by the SVMax
paper, seed `000` Sec. 4.1): per anchor, the farthest positive and the closest negative under
one of four metrics computed from explicit differences (`tf_svmax.ops.distances.cdist`), with a
float margin, a soft margin (softplus) or none. One value per anchor.

It differs from tensorflow-addons' `triplet_hard_loss` (Gram-expansion distances, mean only).
"""

import numbers

import keras
import numpy as np
import tensorflow as tf

from tf_svmax.losses import _common
from tf_svmax.losses._base import PerSampleLabelLoss
from tf_svmax.ops import _checks, distances

MARGIN_MODES = ("soft", "none")


def _check_margin(margin):
    if isinstance(margin, str):
        if margin not in MARGIN_MODES:
            raise ValueError(_checks.invalid("margin", "a float >= 0, 'soft' or 'none'", margin))
        return margin
    if isinstance(margin, bool) or not isinstance(margin, numbers.Real):
        raise ValueError(_checks.invalid("margin", "a float >= 0, 'soft' or 'none'", margin))
    # NaN compares False with everything, so `margin < 0` alone would let it through.
    return _checks.check_non_negative_number(margin, "margin")


def batch_hard_triplet_loss(labels, embeddings, *, margin=0.2, metric="euclidean"):
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
      metric: ``"euclidean"`` (with the originals' 1e-12 under the square root),
        ``"sqeuclidean"``, ``"cityblock"`` or ``"cosine"``.

    Returns:
      `[B]` losses in the embeddings' dtype (half precision computed in float32).
    """
    margin = _check_margin(margin)
    x, dtype = _common.embeddings_matrix(embeddings, arg="embeddings")
    labels = _common.flat_labels(labels, x.shape[0], arg="labels")
    labels = _common.same_batch(labels, x, arg="labels")
    dist = distances.cdist(x, x, metric)
    same, positives = _common.label_masks(labels)
    negatives = tf.logical_not(same)

    # Farthest positive (0 where there is none) and closest negative.
    farthest_positive = tf.reduce_max(dist * tf.cast(positives, dist.dtype), axis=1)
    has_negative = tf.reduce_any(negatives, axis=1)
    closest_negative = tf.reduce_min(
        tf.where(negatives, dist, tf.constant(np.inf, dist.dtype)), axis=1
    )
    # +inf for anchors without negatives; replaced before any arithmetic touches it.
    closest_negative = tf.where(has_negative, closest_negative, tf.zeros_like(closest_negative))
    diff = farthest_positive - closest_negative
    if margin == "soft":
        loss = tf.math.softplus(diff)
    elif margin == "none":
        loss = diff
    else:
        loss = tf.maximum(diff + margin, 0.0)
    loss = tf.where(has_negative, loss, tf.zeros_like(loss))
    return tf.cast(loss, dtype)


@keras.saving.register_keras_serializable(package="tf_svmax")
class BatchHardTripletLoss(PerSampleLabelLoss):
    """Keras loss for `batch_hard_triplet_loss` (mean over anchors by default).

    Example:
      >>> loss = RegularizedLoss(BatchHardTripletLoss(margin=0.2), [SVMaxLoss(lambda_=0.1)])
    """

    def __init__(self, margin=0.2, metric="euclidean", name="batch_hard_triplet", **kwargs):
        super().__init__(name=name, **kwargs)
        self.margin = _check_margin(margin)
        if metric not in distances.CDIST_METRICS:
            raise ValueError(_checks.invalid("metric", f"one of {distances.CDIST_METRICS}", metric))
        self.metric = metric

    def call(self, y_true, y_pred):
        return batch_hard_triplet_loss(y_true, y_pred, margin=self.margin, metric=self.metric)

    def get_config(self):
        return {**super().get_config(), "margin": self.margin, "metric": self.metric}
