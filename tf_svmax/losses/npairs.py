"""N-pair losses on a similarity matrix (Sohn 2016), tensorflow-addons' semantics."""

import keras
from keras import ops

from tf_svmax import _backend, checks
from tf_svmax.losses import _common
from tf_svmax.losses._base import BatchPenaltyLoss
from tf_svmax.losses._registry import register


def _softmax_cross_entropy(targets, logits, dtype):
    # -sum(t * log_softmax(z)), the value and gradient (softmax - t, rows of t sum to 1) of
    # tf.nn.softmax_cross_entropy_with_logits, which TFA calls. Not that fused op: in a traced
    # function its shape error preempts the label-row check and names no argument.
    loss = -ops.sum(targets * ops.log_softmax(logits, axis=1), axis=1)
    return ops.cast(ops.mean(loss), dtype)


def _logits(y_pred):
    logits = checks.to_tensor(y_pred, "y_pred")
    name = keras.backend.standardize_dtype(logits.dtype)
    if not keras.backend.is_float_dtype(name):
        raise TypeError(
            checks.invalid(
                "y_pred", "a floating-point similarity matrix", f"<tensor of dtype {name}>"
            )
        )
    shape = checks.static_shape(logits)
    if shape is not None and len(shape) != 2:
        raise ValueError(
            checks.invalid(
                "y_pred",
                "a [batch_size, batch_size] similarity matrix",
                f"<tensor of shape {logits.shape}>",
            )
        )
    return ops.cast(logits, checks.compute_dtype(name)), logits.dtype


@register(tfa=True)
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
    same = ops.cast(ops.equal(labels[:, None], labels[None, :]), logits.dtype)
    targets = same / ops.sum(same, axis=1, keepdims=True)  # each row has its own label
    return _softmax_cross_entropy(targets, logits, dtype)


@register(tfa=True)
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
    # A tf.SparseTensor (TensorFlow) is densified.
    y_true = ops.cast(ops.convert_to_tensor(y_true, sparse=False), logits.dtype)
    y_true = checks.same_rows(y_true, logits, "y_true", "y_pred")
    shared = _backend.matmul(y_true, y_true, transpose_b=True)
    row_sums = ops.sum(shared, axis=1, keepdims=True)
    targets = shared / _every_sample_labelled(row_sums)
    return _softmax_cross_entropy(targets, logits, dtype)


_NO_LABEL = (
    "Invalid value for argument `y_true`: every sample needs at least one label (a row of "
    "zeros gives 0/0)."
)


def _every_sample_labelled(row_sums):
    """`row_sums`, after checking each is positive: in Python where the values are concrete
    (eager TensorFlow, JAX outside `jit`, PyTorch), else when a TensorFlow graph runs. Under
    `jax.jit` nothing can be checked: a row of zeros gives NaN there."""
    return checks.checked_positive(row_sums, _NO_LABEL)


def _per_replica(kwargs):
    """N-pair losses take the model's `[b, b]` similarity matrix, which a replica computes from
    its own rows only: there is no global matrix to gather, so they stay per replica
    (`global_batch=False`). For a global-batch N-pair loss on embeddings use `PKNpairLoss`."""
    if kwargs.get("global_batch", False):
        raise ValueError(
            checks.invalid(
                "global_batch",
                "False (an N-pair loss takes a per-replica similarity matrix; use PKNpairLoss "
                "on embeddings for a global batch)",
                kwargs["global_batch"],
            )
        )
    return {**kwargs, "global_batch": False}


@register(tfa=True)
class NpairsLoss(BatchPenaltyLoss):
    """Keras loss for `npairs_loss` (drop-in for `tfa.losses.NpairsLoss`)."""

    ranks_embeddings = False  # its y_pred is a similarity matrix

    def __init__(self, name="npairs_loss", **kwargs):
        super().__init__(npairs_loss, {}, name=name, **_per_replica(kwargs))


@register(tfa=True)
class NpairsMultilabelLoss(BatchPenaltyLoss):
    """Keras loss for `npairs_multilabel_loss` (drop-in for `tfa.losses.NpairsMultilabelLoss`)."""

    ranks_embeddings = False  # its y_pred is a similarity matrix

    def __init__(self, name="npairs_multilabel_loss", **kwargs):
        super().__init__(npairs_multilabel_loss, {}, name=name, **_per_replica(kwargs))
