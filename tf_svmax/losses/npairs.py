"""N-pair losses on a similarity matrix (Sohn 2016), tensorflow-addons' semantics."""

import keras
import tensorflow as tf

from tf_svmax.losses import _common
from tf_svmax.losses._base import BatchPenaltyLoss, LossFunctionWrapper
from tf_svmax.ops import _checks


def _softmax_cross_entropy(targets, logits, dtype):
    # -sum(t * log_softmax(z)), the value and gradient (softmax - t, rows of t sum to 1) of
    # tf.nn.softmax_cross_entropy_with_logits, which TFA calls. Not that fused op: in a traced
    # function its shape error preempts the label-row check and names no argument.
    loss = -tf.reduce_sum(targets * tf.nn.log_softmax(logits, axis=1), axis=1)
    return tf.cast(tf.reduce_mean(loss), dtype)


def _logits(y_pred):
    logits = tf.convert_to_tensor(y_pred)
    if not logits.dtype.is_floating:
        raise TypeError(
            _checks.invalid(
                "y_pred",
                "a floating-point similarity matrix",
                f"<tensor of dtype {logits.dtype.name}>",
            )
        )
    if logits.shape.rank is not None and logits.shape.rank != 2:
        raise ValueError(
            _checks.invalid(
                "y_pred",
                "a [batch_size, batch_size] similarity matrix",
                f"<tensor of shape {logits.shape}>",
            )
        )
    return tf.cast(logits, _checks.compute_dtype(logits.dtype)), logits.dtype


def npairs_loss(y_true, y_pred):
    """N-pair loss: softmax cross-entropy of each row of similarities against its class.

    The target of row ``i`` is uniform over the columns ``j`` with ``y_true[j] == y_true[i]``.

    Args:
      y_true: `[batch_size]` class labels.
      y_pred: `[batch_size, batch_size]` similarities (e.g. anchor-positive dot products).

    Returns:
      A scalar of the dtype of `y_pred` (half precision computed in float32).
    """
    logits, dtype = _logits(y_pred)
    labels = _common.flat_labels(y_true, logits)
    same = tf.cast(tf.equal(labels[:, tf.newaxis], labels[tf.newaxis, :]), logits.dtype)
    targets = same / tf.reduce_sum(same, axis=1, keepdims=True)  # each row has its own label
    return _softmax_cross_entropy(targets, logits, dtype)


def npairs_multilabel_loss(y_true, y_pred):
    """Multi-label N-pair loss: targets from shared labels, ``Y Y^T`` row-normalized.

    Args:
      y_true: `[batch_size, num_classes]` multi-hot labels (dense or `tf.SparseTensor`). Every
        sample needs at least one label (a row of zeros has no target distribution: error).
      y_pred: `[batch_size, batch_size]` similarities.

    Returns:
      A scalar of the dtype of `y_pred`.
    """
    logits, dtype = _logits(y_pred)
    if isinstance(y_true, tf.SparseTensor):
        y_true = tf.sparse.to_dense(y_true)
    y_true = tf.cast(tf.convert_to_tensor(y_true), logits.dtype)
    y_true = _checks.same_rows(y_true, logits, "y_true", "y_pred")
    shared = tf.matmul(y_true, y_true, transpose_b=True)
    row_sums = tf.reduce_sum(shared, axis=1, keepdims=True)
    with tf.control_dependencies(
        [
            tf.debugging.assert_positive(
                row_sums,
                message="Invalid value for argument `y_true`: every sample needs at least one "
                "label (a row of zeros gives 0/0).",
            )
        ]
    ):
        targets = shared / row_sums
    return _softmax_cross_entropy(targets, logits, dtype)


def _per_replica(kwargs):
    """N-pair losses take the model's `[b, b]` similarity matrix, which a replica computes from
    its own rows only: there is no global matrix to gather, so they stay per replica
    (`global_batch=False`). For a global-batch N-pair loss on embeddings use `PKNpairLoss`."""
    if kwargs.get("global_batch", False):
        raise ValueError(
            _checks.invalid(
                "global_batch",
                "False (an N-pair loss takes a per-replica similarity matrix; use PKNpairLoss "
                "on embeddings for a global batch)",
                kwargs["global_batch"],
            )
        )
    return {**kwargs, "global_batch": False}


@keras.saving.register_keras_serializable(package="tf_svmax")
class NpairsLoss(LossFunctionWrapper, BatchPenaltyLoss):
    """Keras loss for `npairs_loss` (drop-in for `tfa.losses.NpairsLoss`)."""

    def __init__(self, name="npairs_loss", **kwargs):
        super().__init__(npairs_loss, {}, name=name, **_per_replica(kwargs))


@keras.saving.register_keras_serializable(package="tf_svmax")
class NpairsMultilabelLoss(LossFunctionWrapper, BatchPenaltyLoss):
    """Keras loss for `npairs_multilabel_loss` (drop-in for `tfa.losses.NpairsMultilabelLoss`)."""

    def __init__(self, name="npairs_multilabel_loss", **kwargs):
        super().__init__(npairs_multilabel_loss, {}, name=name, **_per_replica(kwargs))
