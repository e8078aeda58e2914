"""Spread-out (global orthogonal) regularizer, Zhang et al. 2017, as the SVMax paper's baseline.

``L = M1^2 + max(0, M2 - 1/d)`` with ``M1``, ``M2`` the first and second moments of the inner
products of anchor/negative pairs of L2-normalized descriptors. To apply it to any ranking
loss, the SVMax paper (seed `000`, Sec. 4.1) pairs "every anchor with a random negative sample
from the training mini-batch" (alpha = 1): here every row is an anchor and its negative is drawn
uniformly among the rows of other classes.
"""

import keras
from keras import ops

from tf_svmax import checks
from tf_svmax.losses import _common
from tf_svmax.losses._base import BatchPenaltyLoss


def random_negatives(labels, uniform):
    """Index of a uniformly random other-class row for every row (-1 where there is none).

    Args:
      labels: `[B]` labels.
      uniform: `[B, B]` uniform(0, 1) draws (the caller owns the randomness, e.g.
        ``keras.random.uniform([B, B], seed=seed_generator)``: the same draws give the same
        negatives on every backend).

    Returns:
      `[B]` int32 row indices.
    """
    labels = ops.reshape(ops.convert_to_tensor(labels), [-1])
    other_class = ops.not_equal(labels[:, None], labels[None, :])
    # The argmax of iid uniforms restricted to a set is uniform over that set. A column of -1
    # keeps argmax defined for an empty batch (an uneven last batch under tf.distribute).
    scores = ops.concatenate(
        [
            ops.where(other_class, ops.cast(uniform, "float32"), -1.0),
            -ops.ones_like(labels[:, None], "float32"),
        ],
        axis=1,
    )
    choice = ops.cast(ops.argmax(scores, axis=1), "int32")
    return ops.where(ops.any(other_class, axis=1), choice, -1)


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
    negatives = ops.reshape(ops.convert_to_tensor(negatives), [-1])
    valid = negatives >= 0
    rows = ops.take(x, ops.where(valid, negatives, ops.zeros_like(negatives)), axis=0)
    products = ops.sum(x * rows, axis=1)
    count = ops.sum(ops.cast(valid, x.dtype))
    zero = ops.zeros_like(products)
    first = _common.safe_mean_over(ops.sum(ops.where(valid, products, zero)), count)
    second = _common.safe_mean_over(ops.sum(ops.where(valid, products**2, zero)), count)
    dim = ops.cast(ops.shape(x)[1], x.dtype)
    # `ops.where`, not `ops.maximum`: Keras promotes float64 to float32 there on JAX/PyTorch.
    excess = second - 1.0 / dim
    penalty = ops.square(first) + ops.where(excess < 0.0, ops.zeros_like(excess), excess)
    return ops.cast(ops.where(count > 0, penalty, ops.zeros_like(penalty)), dtype)


@keras.saving.register_keras_serializable(package="tf_svmax")
class SpreadOutLoss(BatchPenaltyLoss):
    """``alpha * spread_out_loss`` with a fresh random negative per row at every call.

    Label-aware, so it composes with any ranking loss:
    ``RegularizedLoss(PKContrastiveLoss(), [SpreadOutLoss(alpha=1.0)])``.

    TensorFlow and PyTorch only: on JAX the seed state would not advance between train steps
    (a JAX step carries out only the variables the model tracks), so construction refuses.

    Args:
      alpha: Weight (paper: 1).
      seed: Seed of the negative sampling (None: nondeterministic).
    """

    def __init__(self, alpha=1.0, seed=None, name="spread_out", **kwargs):
        if keras.backend.backend() == "jax":
            # A JAX train step runs in a StatelessScope and carries out only the variables the
            # model tracks: this loss' seed state would never advance (the same negatives at
            # every step, silently).
            raise ValueError(
                "SpreadOutLoss does not run on Keras' JAX backend: it draws fresh negatives "
                "from a seed state at every call, and a JAX train step does not carry a "
                "loss' state out of the step (the same negatives every step). On JAX call "
                "spread_out_loss with negatives from random_negatives and your own draws, or "
                "use the TensorFlow or PyTorch backend."
            )
        super().__init__(name=name, **kwargs)
        self.alpha = checks.check_non_negative_number(alpha, "alpha")
        self.seed = seed
        self._seed_generator = keras.random.SeedGenerator(seed)

    def call(self, y_true, y_pred):
        labels = ops.reshape(ops.convert_to_tensor(y_true), [-1])
        size = ops.shape(labels)[0]
        uniform = keras.random.uniform((size, size), seed=self._seed_generator)
        negatives = random_negatives(labels, ops.cast(uniform, "float32"))
        return self.alpha * spread_out_loss(labels, y_pred, negatives)

    def get_config(self):
        return {**super().get_config(), "alpha": self.alpha, "seed": self.seed}
