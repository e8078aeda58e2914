"""Contrastive loss on pair distances (Hadsell et al. 2006), tensorflow-addons' semantics."""

import keras
from keras import ops

from tf_svmax import checks
from tf_svmax.losses._base import LossFunctionWrapper


def contrastive_loss(y_true, y_pred, margin=1.0):
    """Per-pair contrastive loss ``y d^2 + (1 - y) max(margin - d, 0)^2``.

    Args:
      y_true: `[batch_size]` binary labels, 1 for a similar pair.
      y_pred: `[batch_size]` pair distances (e.g. Euclidean distances of embedding pairs).
      margin: Margin for dissimilar pairs.

    Returns:
      `[batch_size]` losses (not reduced), in the dtype of `y_pred`.

    Example:
      >>> contrastive_loss([1, 0], [0.5, 0.3])  # [0.25, 0.49]
    """
    y_pred = ops.convert_to_tensor(y_pred)
    # One label per distance (TFA would broadcast [B] against [B, 1] into [B, B] silently, or
    # fail inside Mul).
    y_true = checks.same_rows(y_true, y_pred, "y_true", "y_pred")
    y_true = ops.cast(y_true, y_pred.dtype)
    dissimilar = ops.square(_hinge(margin - y_pred))
    return y_true * ops.square(y_pred) + (1.0 - y_true) * dissimilar


def _hinge(x):
    """``max(x, 0)`` in `x`'s dtype, the gradient passing at 0 (as `tf.maximum`'s): Keras
    3.15's `ops.maximum` returns float32 for float64 on JAX and PyTorch, so `where` there."""
    if keras.backend.backend() == "tensorflow":
        return ops.maximum(x, 0.0)
    return ops.where(x >= 0.0, x, ops.zeros_like(x))


@keras.saving.register_keras_serializable(package="tf_svmax")
class ContrastiveLoss(LossFunctionWrapper, keras.losses.Loss):
    """Keras loss for `contrastive_loss` (drop-in for `tfa.losses.ContrastiveLoss`).

    Reduced with Keras' `reduction` (default ``"sum_over_batch_size"``, as in TFA). Keras'
    `Loss` rather than the library's `PerSampleLabelLoss`: the rows are independent pairs
    (given distances and 0/1 labels, no labels compared across rows), so a global batch would
    change nothing, and TFA's class reduces as Keras does (its reductions, masks, float labels).
    """

    def __init__(
        self, margin=1.0, reduction="sum_over_batch_size", name="contrastive_loss", **kwargs
    ):
        fn_kwargs = {"margin": checks.check_finite_number(margin, "margin")}
        super().__init__(contrastive_loss, fn_kwargs, name=name, reduction=reduction, **kwargs)

    def __call__(self, y_true, y_pred, sample_weight=None):
        if sample_weight is not None:
            # One weight per pair: Keras would broadcast a `[B, 2]` weight and fail with a bare
            # shape error on another length.
            sample_weight = checks.row_weights(sample_weight, y_pred, "y_pred")
        return super().__call__(y_true, y_pred, sample_weight)

    def call(self, y_true, y_pred):
        # `[B]` labels with `[B, 1]` distances (a Dense(1) head) are one label per pair, as
        # TFA's Keras 2 class and `compile` read them (Keras aligns the ranks before the
        # function), not a `[B, B]` broadcast.
        y_pred = ops.convert_to_tensor(y_pred)
        y_true = ops.convert_to_tensor(y_true)
        if len(y_pred.shape) == 2 and y_pred.shape[-1] == 1 and len(y_true.shape) == 1:
            y_true = ops.expand_dims(y_true, -1)
        return super().call(y_true, y_pred)
