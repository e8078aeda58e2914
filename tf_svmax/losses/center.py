"""Center loss with moving class centers (Wen et al. 2016), as in the two-head baseline.

Semantics of ahmdtaha/softmax_triplet_loss (`ranking/center_loss.py`; dissertation `001`,
Sec. 5.3, Eq. 5.2): ``lambda_ * 0.5 * sum_i ||x_i - c_{y_i}||^2`` (a sum over the batch), centers
initialized from N(0, 1), not trained by the optimizer but moved every training step by
``c_j <- c_j - alpha * sum_{i: y_i = j} (c_j - x_i) / (1 + n_j)`` from the pre-update centers.

The update runs in the backward pass (it is part of the gradient computation), so it happens
exactly in training steps and never in `evaluate`/`predict`, which compute no gradient.
"""

import keras
import numpy as np
import tensorflow as tf

from tf_svmax import checks
from tf_svmax.ops import replicas
from tf_svmax.ops.ole import class_labels


@keras.saving.register_keras_serializable(package="tf_svmax")
class CenterLoss(keras.losses.Loss):
    """Center loss whose centers are non-trainable state saved with the loss's config.

    Args:
      num_classes: Number of classes C (labels in [0, C)).
      embedding_dim: Feature dimension D.
      lambda_: Weight (two-head baseline: 0.003).
      alpha: Center update rate in (0, 1] (0.5).
      centers: Optional `[C, D]` initial centers (a saved model passes its trained ones).
      seed: Seed of the N(0, 1) initialization.

    `y_true`: `[B]` integer labels or `[B, C]` one-hot rows; `y_pred`: `[B, D]` features.
    Sample weights scale the batch's value by their mean.

    Under a `tf.distribute` strategy with more than one replica (create the loss inside
    ``strategy.scope()``), ``global_batch=True`` (default) computes the loss and the center
    update once on the global batch: every replica moves the centers identically, as one device
    would. ``global_batch=False`` is refused there: each replica would move the centers with its
    own rows and the copies would drift apart. The global batch is not split by anchors (unlike
    the mining losses): the value is a sum of per-row terms costing O(B D), no more than the
    gather itself, and the center update needs every row's pull on the class centers, which
    each replica would otherwise all-reduce as a `[C, D]` tensor.

    Not a `BatchPenaltyLoss`: its value is always scaled by the weights' mean whatever the
    `reduction` (the base would scale ``"sum"`` by their sum and return one entry per row for
    ``"none"``), it accepts weights of any length, and it refuses ``global_batch=False`` under a
    strategy (per-replica centers); moving it would change those.
    """

    def __init__(
        self,
        num_classes,
        embedding_dim,
        lambda_=0.003,
        alpha=0.5,
        centers=None,
        seed=None,
        global_batch=True,
        name="center_loss",
        **kwargs,
    ):
        super().__init__(name=name, **kwargs)
        self.global_batch = checks.check_bool(global_batch, "global_batch")
        self.num_classes = checks.check_positive_int(num_classes, "num_classes")
        self.embedding_dim = checks.check_positive_int(embedding_dim, "embedding_dim")
        self.lambda_ = checks.check_non_negative_number(lambda_, "lambda_")
        self.alpha = checks.check_rate(alpha, "alpha")
        self.seed = seed
        if centers is None:
            centers = np.random.default_rng(seed).standard_normal(
                (self.num_classes, self.embedding_dim)
            )
        centers = np.asarray(centers, dtype=np.float32)
        if centers.shape != (self.num_classes, self.embedding_dim):
            raise ValueError(
                checks.invalid(
                    "centers",
                    f"shape ({self.num_classes}, {self.embedding_dim})",
                    f"<array of shape {centers.shape}>",
                )
            )
        # ONLY_FIRST_REPLICA: under a strategy every replica computes the same update from the
        # global batch; the first replica's is applied to every copy.
        self.centers = tf.Variable(
            centers,
            trainable=False,
            name="centers",
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
        )

    def _labels(self, y_true):
        y_true = tf.convert_to_tensor(y_true)
        if y_true.shape.rank == 2 and y_true.shape[-1] not in (None, 1):
            y_true = tf.argmax(y_true, axis=-1)  # one-hot rows, as the original
        # Integral values only (1.7 is refused, not truncated), range-checked in int64 before
        # the int32 cast (2**32 + 1 would otherwise wrap to class 1).
        labels = class_labels(y_true, "y_true")
        check = tf.debugging.assert_less(
            labels,
            tf.constant(self.num_classes, tf.int64),
            message=f"Invalid value for argument `y_true`: labels must be in [0, "
            f"{self.num_classes}).",
        )
        check2 = tf.debugging.assert_non_negative(
            labels, message="Invalid value for argument `y_true`: labels must be >= 0."
        )
        with tf.control_dependencies([check, check2]):
            return tf.cast(labels, tf.int32)

    def __call__(self, y_true, y_pred, sample_weight=None):
        if not self.global_batch and tf.distribute.get_strategy().num_replicas_in_sync > 1:
            # Each replica would move its own copy of the centers with its part of the batch,
            # and the copies would silently drift apart.
            raise ValueError(
                "CenterLoss(global_batch=False) does not support tf.distribute with more than "
                "one replica: the moving-center update would be per replica. Use "
                "global_batch=True or one device."
            )
        with tf.name_scope(self.name):
            x = tf.cast(tf.convert_to_tensor(y_pred), tf.float32)
            x, _ = checks.float_matrix(x, "y_pred", min_rows=0)
            labels = checks.same_rows(self._labels(y_true), x, "y_true", "y_pred")
            _, (x, labels, sample_weight) = replicas.gather_global_batch(
                self.global_batch, x, labels, sample_weight
            )
            if x.shape[-1] is not None and x.shape[-1] != self.embedding_dim:
                raise ValueError(
                    checks.invalid(
                        "y_pred",
                        f"[batch_size, {self.embedding_dim}] features (embedding_dim)",
                        f"<tensor of shape {x.shape}>",
                    )
                )
            centers_before = tf.convert_to_tensor(self.centers)
            batch_centers = tf.gather(centers_before, labels)
            value = self.lambda_ * self._sum_and_update(x, batch_centers, labels, centers_before)
            if sample_weight is not None:
                value = value * tf.reduce_mean(tf.cast(sample_weight, value.dtype))
            # Every replica holds the global batch's sum; Keras sums the replicas' gradients.
            return replicas.scale_to_replicas(tf.cast(value, self.dtype))

    def _sum_and_update(self, x, batch_centers, labels, centers_before):
        variable, alpha, num_classes = self.centers, self.alpha, self.num_classes

        @tf.custom_gradient
        def forward(x):
            diff = x - batch_centers
            value = 0.5 * tf.reduce_sum(tf.square(diff))

            def grad(upstream):
                # Moving centers, from the pre-update centers (the original's scatter_sub).
                counts = tf.math.unsorted_segment_sum(
                    tf.ones_like(labels, tf.float32), labels, num_classes
                )
                pulls = tf.math.unsorted_segment_sum(batch_centers - x, labels, num_classes)
                delta = alpha * pulls / (1.0 + counts)[:, tf.newaxis]
                update = variable.assign(centers_before - delta)
                with tf.control_dependencies([update]):
                    return tf.identity(upstream * diff)

            return value, grad

        return forward(x)

    def get_config(self):
        return {
            **super().get_config(),
            "num_classes": self.num_classes,
            "embedding_dim": self.embedding_dim,
            "lambda_": self.lambda_,
            "alpha": self.alpha,
            "seed": self.seed,
            "global_batch": self.global_batch,
            "dtype": self.dtype,
            "centers": self.centers.numpy().tolist(),
        }
