"""Spread-out (global orthogonal) regularizer, Zhang et al. 2017, as the SVMax paper's baseline.

``L = M1^2 + max(0, M2 - 1/d)`` with ``M1``, ``M2`` the first and second moments of the inner
products of anchor/negative pairs of L2-normalized descriptors. To apply it to any ranking
loss, the SVMax paper (seed `000`, Sec. 4.1) pairs "every anchor with a random negative sample
from the training mini-batch" (alpha = 1): here every row is an anchor and its negative is drawn
uniformly among the rows of other classes.
"""

import keras
import tensorflow as tf

from tf_svmax.losses import _common
from tf_svmax.losses._base import BatchPenaltyLoss
from tf_svmax.ops import _checks


def random_negatives(labels, uniform):
    """Index of a uniformly random other-class row for every row (-1 where there is none).

    Args:
      labels: `[B]` labels.
      uniform: `[B, B]` uniform(0, 1) draws (the caller owns the randomness).
    """
    labels = tf.reshape(labels, [-1])
    other_class = tf.not_equal(labels[:, tf.newaxis], labels[tf.newaxis, :])
    # The argmax of iid uniforms restricted to a set is uniform over that set. A column of -1
    # keeps argmax defined for an empty batch (an uneven last batch under tf.distribute).
    scores = tf.concat(
        [
            tf.where(other_class, tf.cast(uniform, tf.float32), -1.0),
            -tf.ones_like(labels[:, tf.newaxis], tf.float32),
        ],
        axis=1,
    )
    choice = tf.argmax(scores, axis=1, output_type=tf.int32)
    return tf.where(tf.reduce_any(other_class, axis=1), choice, -1)


def spread_out_loss(labels, embeddings, negatives):
    """Global orthogonal regularization of anchor/negative pairs.

    Args:
      labels: `[B]` labels (used to validate the batch).
      embeddings: `[B, D]` L2-normalized embeddings.
      negatives: `[B]` int index of each row's negative, -1 for rows without one (see
        `random_negatives`).

    Returns:
      A scalar: ``M1^2 + max(0, M2 - 1/D)`` over the rows that have a negative; 0 if none does.
    """
    x, dtype = _common.embeddings_matrix(embeddings, arg="embeddings")
    _common.flat_labels(labels, x, "labels", "embeddings")  # checked only: one label per row
    negatives = tf.reshape(tf.convert_to_tensor(negatives), [-1])
    valid = negatives >= 0
    products = tf.reduce_sum(x * tf.gather(x, tf.maximum(negatives, 0)), axis=1)
    count = tf.reduce_sum(tf.cast(valid, x.dtype))
    first = _common.safe_mean_over(tf.reduce_sum(tf.where(valid, products, 0.0)), count)
    second = _common.safe_mean_over(tf.reduce_sum(tf.where(valid, products**2, 0.0)), count)
    dim = tf.cast(tf.shape(x)[1], x.dtype)
    penalty = tf.square(first) + tf.maximum(second - 1.0 / dim, 0.0)
    return tf.cast(tf.where(count > 0, penalty, tf.zeros_like(penalty)), dtype)


@keras.saving.register_keras_serializable(package="tf_svmax")
class SpreadOutLoss(BatchPenaltyLoss):
    """``alpha * spread_out_loss`` with a fresh random negative per row at every call.

    Label-aware, so it composes with any ranking loss:
    ``RegularizedLoss(PKContrastiveLoss(), [SpreadOutLoss(alpha=1.0)])``.

    Args:
      alpha: Weight (paper: 1).
      seed: Seed of the negative sampling (None: nondeterministic).
    """

    def __init__(self, alpha=1.0, seed=None, name="spread_out", **kwargs):
        super().__init__(name=name, **kwargs)
        self.alpha = _checks.check_non_negative_number(alpha, "alpha")
        self.seed = seed
        self._seed_generator = keras.random.SeedGenerator(seed)

    def call(self, y_true, y_pred):
        labels = tf.reshape(tf.convert_to_tensor(y_true), [-1])
        size = tf.shape(labels)[0]
        uniform = keras.random.uniform(tf.stack([size, size]), seed=self._seed_generator)
        negatives = random_negatives(labels, tf.cast(uniform, tf.float32))
        return self.alpha * spread_out_loss(labels, y_pred, negatives)

    def get_config(self):
        return {**super().get_config(), "alpha": self.alpha, "seed": self.seed}
