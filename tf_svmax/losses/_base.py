"""Shared plumbing for losses whose value is one scalar for the whole mini-batch."""

import keras
import tensorflow as tf


class BatchPenaltyLoss(keras.losses.Loss):
    """Base class for batch-level penalties (SVMax, OLE): `call` returns one scalar.

    Keras' default `Loss.__call__` casts `y_true` to the loss dtype (float32), which would
    silently merge integer labels above 2**24 and fails on `y_true=None`; here `y_true` is passed
    to `call` unchanged. Sample weights scale the batch's penalty by their mean (what Keras'
    ``"sum_over_batch_size"`` reduction does to a single value). `reduction` is accepted for
    config compatibility; a batch-level scalar has nothing to reduce.
    """

    def __call__(self, y_true, y_pred, sample_weight=None):
        with tf.name_scope(self.name):
            y_pred = tf.cast(tf.convert_to_tensor(y_pred), self.dtype)
            value = tf.cast(self.call(y_true, y_pred), self.dtype)
            if sample_weight is not None:
                weights = tf.cast(tf.convert_to_tensor(sample_weight), self.dtype)
                value = value * tf.reduce_mean(weights)
            return value
