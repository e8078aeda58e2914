"""Lifted structured loss (Oh Song et al. 2016), tensorflow-addons' semantics."""

import keras
import numpy as np
import tensorflow as tf

from tf_svmax.losses import _common
from tf_svmax.losses._base import BatchPenaltyLoss
from tf_svmax.losses.triplet import _check_margin
from tf_svmax.ops import _checks, distances


def lifted_struct_loss(labels, embeddings, margin=1.0, *, squared=False):
    """Lifted structured loss over all positive pairs of the batch.

    For each positive pair ``(i, j)``::

        J_ij = log( sum_{k in neg(i)} exp(margin - d_ik) + sum_{k in neg(j)} exp(margin - d_jk) )
               + d_ij
        loss = 0.25 * sum_{(i, j) ordered} max(J_ij, 0)^2 / #unordered positive pairs

    Args:
      labels: `[batch_size]` class labels.
      embeddings: `[batch_size, dim]` embeddings.
      margin: Margin term.
      squared: Use squared Euclidean distances for ``d`` (the SVMax repository's
        ``ranking/lifted_structured.py`` variant); False (tensorflow-addons, tf.contrib and
        tf_retrieval_baseline) uses plain ones.

    Returns:
      A scalar of the embeddings' dtype. 0 when the batch has no positive pair, and pairs with
      no negative at all contribute 0 (tensorflow-addons returns NaN in both cases). At exact
      ties between two rows' stabilizing shifts the gradient here is the true one, while
      tensorflow-addons' is not (it differentiates through the shift).
    """
    x, dtype = _common.embeddings_matrix(embeddings, arg="embeddings")
    labels = _common.flat_labels(labels, x.shape[0], arg="labels")
    labels = _common.same_batch(labels, x, arg="labels")
    pdist = distances.pairwise_distance(x, squared=squared)
    same, positives = _common.label_masks(labels)
    negatives = tf.logical_not(same)

    # Per row: sum over negatives of exp(margin - d), kept as (shift, scaled sum) for stability.
    diff = margin - pdist
    # The shifts only keep exp() in range; the log-sum-exp is invariant to them, so they carry no
    # gradient (letting it flow breaks at ties between two rows' shifts, as it does in TFA).
    shift = tf.stop_gradient(_common.masked_max(diff, negatives))  # [B, 1]
    # The exponent is masked before exp: an unselected overflow would still poison the gradient.
    exponent = tf.where(negatives, diff - shift, 0.0)
    scaled = tf.reduce_sum(tf.where(negatives, tf.exp(exponent), 0.0), axis=1, keepdims=True)
    # log(S_i e^{r_i} + S_j e^{r_j}) = M + log(S_i e^{r_i - M} + S_j e^{r_j - M}), M = max(r_i, r_j)
    pair_shift = tf.maximum(shift, tf.transpose(shift))
    rescaled = scaled * tf.exp(shift - pair_shift)
    pair_sum = rescaled + tf.transpose(rescaled)  # M is symmetric
    has_negatives = pair_sum > 0.0
    # log(0) only where neither row has a negative; those pairs contribute max(-inf, 0) = 0.
    log_sum = tf.where(
        has_negatives,
        tf.math.log(tf.where(has_negatives, pair_sum, 1.0)),
        tf.constant(-np.inf, x.dtype),
    )
    objective = pair_shift + log_sum + pdist

    hinge = tf.maximum(tf.where(positives, objective, 0.0), 0.0)
    total = 0.25 * tf.reduce_sum(tf.square(hinge))
    num_pairs = tf.reduce_sum(tf.cast(positives, x.dtype)) / 2.0
    return tf.cast(_common.safe_mean_over(total, num_pairs), dtype)


@keras.saving.register_keras_serializable(package="tf_svmax")
class LiftedStructLoss(BatchPenaltyLoss):
    """Keras loss for `lifted_struct_loss` (drop-in for `tfa.losses.LiftedStructLoss`;
    ``squared=True`` is the SVMax repository's squared-distance variant)."""

    def __init__(self, margin=1.0, squared=False, name="lifted_struct_loss", **kwargs):
        super().__init__(name=name, **kwargs)
        self.margin = _check_margin(margin)
        self.squared = _checks.check_bool(squared, "squared")

    def call(self, y_true, y_pred):
        return lifted_struct_loss(y_true, y_pred, self.margin, squared=self.squared)

    def get_config(self):
        return {**super().get_config(), "margin": self.margin, "squared": self.squared}
