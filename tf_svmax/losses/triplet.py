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
from tf_svmax.losses._base import BatchPenaltyLoss
from tf_svmax.ops import _checks, distances


def _prepare(y_true, y_pred, distance_metric):
    embeddings, dtype = _common.embeddings_matrix(y_pred)
    labels = _common.flat_labels(y_true, embeddings.shape[0])
    labels = _common.same_batch(labels, embeddings)
    pdist = tf.cast(distances.distance_matrix(embeddings, distance_metric), embeddings.dtype)
    return labels, pdist, dtype


def triplet_semihard_loss(y_true, y_pred, margin=1.0, distance_metric="L2"):
    """Triplet loss with semi-hard negative mining (FaceNet), averaged over positive pairs.

    For every anchor ``a`` and positive ``p`` (same label, ``p != a``) the negative is the
    closest one farther from ``a`` than ``p``; if none is, the farthest negative::

        loss = sum_{a,p} max(margin + d(a, p) - d(a, n*(a, p)), 0) / #positive pairs

    Args:
      y_true: `[batch_size]` (or `[batch_size, 1]`) class labels.
      y_pred: `[batch_size, dim]` embeddings (normally L2-normalized).
      margin: Margin term.
      distance_metric: "L2", "squared-L2", "angular", or a callable mapping embeddings to a
        `[batch_size, batch_size]` distance matrix.

    Returns:
      A scalar of the embeddings' dtype (float16/bfloat16 computed in float32). 0 when the
      batch has no positive pair.

    Example:
      >>> triplet_semihard_loss([0, 0], [[0.0, 1.0], [1.0, 0.0]])  # 2.4142137
    """
    labels, pdist, dtype = _prepare(y_true, y_pred, distance_metric)
    same, positives = _common.label_masks(labels)
    negatives = tf.logical_not(same)

    # Candidates: negatives k of anchor a farther than the positive p. [a, p, k]
    farther = tf.logical_and(
        negatives[:, tf.newaxis, :], pdist[:, tf.newaxis, :] > pdist[:, :, tf.newaxis]
    )
    closest_farther = _common.masked_min(pdist[:, tf.newaxis, :], farther, axis=2)[:, :, 0]
    # Fallback: the farthest negative of the anchor (its nearest point if it has none).
    farthest_negative = _common.masked_max(pdist, negatives)
    semi_hard = tf.where(tf.reduce_any(farther, axis=2), closest_farther, farthest_negative)

    loss_matrix = margin + pdist - semi_hard
    positives_f = tf.cast(positives, pdist.dtype)
    total = tf.reduce_sum(tf.maximum(loss_matrix * positives_f, 0.0))
    return tf.cast(_common.safe_mean_over(total, tf.reduce_sum(positives_f)), dtype)


def triplet_hard_loss(y_true, y_pred, margin=1.0, soft=False, distance_metric="L2"):
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
      distance_metric: "L2", "squared-L2", "angular", or a callable.

    Returns:
      A scalar of the embeddings' dtype.
    """
    labels, pdist, dtype = _prepare(y_true, y_pred, distance_metric)
    same, positives = _common.label_masks(labels)
    hard_negatives = _common.masked_min(pdist, tf.logical_not(same))
    hard_positives = _common.masked_max(pdist, positives)
    if soft:
        per_anchor = tf.math.softplus(hard_positives - hard_negatives)
    else:
        per_anchor = tf.maximum(hard_positives - hard_negatives + margin, 0.0)
    # Mean over anchors; 0 for an empty batch (an uneven last batch under tf.distribute).
    total = tf.reduce_sum(per_anchor)
    return tf.cast(_common.safe_mean_over(total, tf.size(per_anchor)), dtype)


def _check_margin(margin):
    if isinstance(margin, bool) or not isinstance(margin, (int, float, np.floating, np.integer)):
        raise ValueError(_checks.invalid("margin", "a float", margin))
    return float(margin)


def _check_metric(distance_metric):
    if callable(distance_metric) or distance_metric in ("L2", "squared-L2", "angular"):
        return distance_metric
    raise ValueError(
        _checks.invalid(
            "distance_metric", "'L2', 'squared-L2', 'angular' or a callable", distance_metric
        )
    )


def _serialize_metric(distance_metric):
    if callable(distance_metric):
        return keras.saving.serialize_keras_object(distance_metric)
    return distance_metric


def _deserialize_metric(distance_metric):
    if isinstance(distance_metric, dict):
        return keras.saving.deserialize_keras_object(distance_metric)
    return distance_metric


@keras.saving.register_keras_serializable(package="tf_svmax")
class TripletSemiHardLoss(BatchPenaltyLoss):
    """Keras loss for `triplet_semihard_loss` (drop-in for `tfa.losses.TripletSemiHardLoss`).

    `y_true`: `[batch_size]` integer labels; `y_pred`: `[batch_size, dim]` L2-normalized
    embeddings. Returns one scalar per batch (TFA's reduction "none").
    """

    def __init__(self, margin=1.0, distance_metric="L2", name="triplet_semihard_loss", **kwargs):
        super().__init__(name=name, **kwargs)
        self.margin = _check_margin(margin)
        self.distance_metric = _check_metric(_deserialize_metric(distance_metric))

    def call(self, y_true, y_pred):
        return triplet_semihard_loss(y_true, y_pred, self.margin, self.distance_metric)

    def get_config(self):
        return {
            **super().get_config(),
            "margin": self.margin,
            "distance_metric": _serialize_metric(self.distance_metric),
        }


@keras.saving.register_keras_serializable(package="tf_svmax")
class TripletHardLoss(BatchPenaltyLoss):
    """Keras loss for `triplet_hard_loss` (drop-in for `tfa.losses.TripletHardLoss`)."""

    def __init__(
        self, margin=1.0, soft=False, distance_metric="L2", name="triplet_hard_loss", **kwargs
    ):
        super().__init__(name=name, **kwargs)
        self.margin = _check_margin(margin)
        self.soft = _checks.check_bool(soft, "soft")
        self.distance_metric = _check_metric(_deserialize_metric(distance_metric))

    def call(self, y_true, y_pred):
        return triplet_hard_loss(y_true, y_pred, self.margin, self.soft, self.distance_metric)

    def get_config(self):
        return {
            **super().get_config(),
            "margin": self.margin,
            "soft": self.soft,
            "distance_metric": _serialize_metric(self.distance_metric),
        }
