"""Shared plumbing for losses whose value is one scalar for the whole mini-batch."""

import keras
import tensorflow as tf

from tf_svmax.ops import _checks


def scale_for_distribution(value):
    """Divides by the number of replicas of the current `tf.distribute` strategy.

    Keras sums the replicas' gradients, so each replica's loss must be 1/N of its value for the
    update to be the replicas' mean; Keras' own reductions scale the same way.
    """
    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    if replicas > 1:
        value = value * tf.cast(1.0 / replicas, value.dtype)
    return value


def _batch_weights(sample_weight, y_pred, dtype):
    """`sample_weight` as a scalar or one weight per row of `y_pred` (`[B]` or `[B, 1]`);
    another length is refused (its mean would silently weight some other batch)."""
    weights = tf.cast(tf.convert_to_tensor(sample_weight), dtype)
    if weights.shape.rank == 0:
        return weights
    weights = tf.reshape(weights, [-1])
    rows, count = y_pred.shape[0], weights.shape[0]
    expected = "a scalar or one weight per row of y_pred"
    if rows is not None and count is not None:
        if rows != count:
            raise ValueError(_checks.invalid("sample_weight", expected, f"<{count} weights>"))
        return weights
    check = tf.debugging.assert_equal(
        tf.size(weights),
        tf.shape(y_pred)[0],
        message=f"Invalid value for argument `sample_weight`: expected {expected}.",
    )
    with tf.control_dependencies([check]):
        return tf.identity(weights)


BATCH_REDUCTIONS = ("sum_over_batch_size", "sum", "none", None)


class BatchPenaltyLoss(keras.losses.Loss):
    """Base class for batch-level losses (SVMax, OLE, triplet, ...): `call` returns one scalar.

    Keras' default `Loss.__call__` casts `y_true` to the loss dtype (float32), which would
    silently merge integer labels above 2**24 and fails on `y_true=None`; here `y_true` is passed
    to `call` unchanged. Without sample weights every reduction gives the batch's value. With
    them, as Keras 2 (and so tensorflow-addons) reduced a scalar loss broadcast against the
    weights: ``"sum_over_batch_size"`` scales the value by the weights' mean, ``"sum"`` by their
    sum, ``"none"`` returns ``value * weights`` (one entry per sample). Under `tf.distribute`
    each replica contributes its value divided by the number of replicas, like Keras' reductions.
    """

    def __init__(self, name=None, reduction="sum_over_batch_size", dtype=None):
        if reduction not in BATCH_REDUCTIONS:
            raise ValueError(
                _checks.invalid(
                    "reduction", f"one of {list(BATCH_REDUCTIONS)} (a batch-level loss)", reduction
                )
            )
        super().__init__(name=name, reduction=reduction, dtype=dtype)

    def __call__(self, y_true, y_pred, sample_weight=None):
        with tf.name_scope(self.name):
            y_pred = tf.cast(tf.convert_to_tensor(y_pred), self.dtype)
            value = tf.cast(self.call(y_true, y_pred), self.dtype)
            if sample_weight is not None:
                weights = _batch_weights(sample_weight, y_pred, self.dtype)
                if self.reduction in ("none", None):
                    value = value * weights
                elif self.reduction == "sum":
                    value = value * tf.reduce_sum(weights)
                else:
                    value = value * tf.reduce_mean(weights)
            return scale_for_distribution(value)

    def get_config(self):
        return {**super().get_config(), "dtype": self.dtype}


PER_SAMPLE_REDUCTIONS = ("sum_over_batch_size", "sum", None, "none")


class PerSampleLabelLoss(keras.losses.Loss):
    """Base class for label-aware losses whose `call` returns one value per sample `[B]`.

    Like Keras' `Loss.__call__` (sample weights, ``"sum_over_batch_size"``/``"sum"``/``None``
    reductions, scaling for `tf.distribute` on the mean reduction) except that `y_true` reaches
    `call` uncast: Keras casts it to float32, which merges integer labels above 2**24.
    """

    def __init__(self, name=None, reduction="sum_over_batch_size", dtype=None):
        if reduction not in PER_SAMPLE_REDUCTIONS:
            raise ValueError(
                _checks.invalid("reduction", f"one of {PER_SAMPLE_REDUCTIONS}", reduction)
            )
        super().__init__(name=name, reduction=reduction, dtype=dtype)

    def __call__(self, y_true, y_pred, sample_weight=None):
        with tf.name_scope(self.name):
            y_pred = tf.cast(tf.convert_to_tensor(y_pred), self.dtype)
            values = tf.cast(self.call(y_true, y_pred), self.dtype)
            if sample_weight is not None:
                weights = tf.cast(tf.convert_to_tensor(sample_weight), self.dtype)
                if weights.shape.rank != 0:  # a scalar weight broadcasts, as in Keras
                    weights = tf.reshape(weights, tf.shape(values))
                values = values * weights
            if self.reduction in (None, "none"):
                return values
            total = tf.reduce_sum(values)
            if self.reduction == "sum":
                return total
            # divide_no_nan: an empty per-replica batch (uneven last batch) contributes 0.
            total = tf.math.divide_no_nan(total, tf.cast(tf.size(values), self.dtype))
            return scale_for_distribution(total)

    def get_config(self):
        return {**super().get_config(), "dtype": self.dtype}
