"""Contrastive loss on pair distances (Hadsell et al. 2006), tensorflow-addons' semantics."""

from keras import ops

from tf_svmax import checks
from tf_svmax.losses import _common
from tf_svmax.losses._base import Loss
from tf_svmax.losses._registry import register


@register(tfa=True)
def contrastive_loss(y_true, y_pred, margin=1.0):
    """Per-pair contrastive loss ``y d^2 + (1 - y) max(margin - d, 0)^2``.

    Args:
      y_true: `[batch_size]` binary labels, 1 for a similar pair: one per distance (`[B]`
        labels with `[B, 1]` distances, or `[B, 1]` labels with `[B]` distances, are paired
        row by row, as Keras 2 and TFA's class aligned them; other shapes are refused).
      y_pred: `[batch_size]` pair distances (e.g. Euclidean distances of embedding pairs).
      margin: Margin for dissimilar pairs.

    Returns:
      `[batch_size]` losses (not reduced), in the dtype of `y_pred`.

    Example:
      >>> contrastive_loss([1, 0], [0.5, 0.3])  # [0.25, 0.49]
    """
    y_pred = ops.convert_to_tensor(y_pred)
    # One label per distance (TFA's function would broadcast [B] against [B, 1] into [B, B]
    # silently, or fail inside Mul).
    y_true = checks.same_rows(_paired_labels(y_true, y_pred), y_pred, "y_true", "y_pred")
    y_true = ops.cast(y_true, y_pred.dtype)
    dissimilar = ops.square(_common.hinge(margin - y_pred))
    return y_true * ops.square(y_pred) + (1.0 - y_true) * dissimilar


def _paired_labels(y_true, y_pred):
    """`y_true` in the shape of the distances `y_pred`, one label per distance: a trailing axis
    of size 1 on either side is added or dropped (`[B]` labels with a Dense(1) head's `[B, 1]`
    distances, or `[B, 1]` labels with `[B]` distances, as Keras 2 aligned them for TFA's
    class). Any other difference of known shapes is refused by name: a broadcast would pair
    every label with every distance (`[B, 1]` against `[B]` gave a `[B, B]` loss). A scalar
    label applies to every distance."""
    y_true = checks.to_tensor(y_true, "y_true")
    received, distances = checks.static_shape(y_true), checks.static_shape(y_pred)
    if received is None or distances is None or len(received) == 0:
        return y_true  # unknown rank (a TensorFlow graph): `same_rows` checks when it runs
    if len(received) == len(distances) + 1 and received[-1] == 1:
        y_true = ops.squeeze(y_true, axis=-1)
    elif len(distances) == len(received) + 1 and distances[-1] == 1:
        y_true = ops.expand_dims(y_true, axis=-1)
    labels = checks.static_shape(y_true)
    if len(labels) != len(distances) or any(
        a is not None and b is not None and a != b for a, b in zip(labels, distances, strict=True)
    ):
        raise ValueError(
            checks.invalid(
                "y_true",
                f"one label per distance: the shape of y_pred {tuple(distances)}, or it with "
                "a trailing axis of size 1 added or dropped",
                f"<tensor of shape {tuple(received)}>",
            )
        )
    return y_true


@register(tfa=True)
class ContrastiveLoss(Loss):
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
