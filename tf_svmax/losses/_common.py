"""Helpers shared by the metric-learning losses: labels, masks, masked reductions (keras.ops:
TensorFlow, JAX and PyTorch)."""

import keras
from keras import ops

from tf_svmax import checks


def flat_labels(labels, embeddings, arg="y_true", embeddings_arg="y_pred"):
    """Flattens `[N]` or `[N, 1]` labels and checks there is one per row of `embeddings`.

    Labels are compared for equality in their own dtype (never cast to float, which would
    merge large integer ids).
    """
    labels = checks.label_vector(labels, arg)
    name = keras.backend.standardize_dtype(labels.dtype)
    if not (
        name.startswith(("int", "uint")) or name == "bool" or keras.backend.is_float_dtype(name)
    ):
        raise TypeError(checks.invalid(arg, "numeric class labels", f"<tensor of dtype {name}>"))
    return checks.same_rows(labels, embeddings, arg, embeddings_arg, unit="label")


def embeddings_matrix(y_pred, arg="y_pred"):
    """`(embeddings, input_dtype)` with half precision promoted to float32, like TFA."""
    return checks.float_matrix(y_pred, arg)


def label_masks(labels):
    """`(same_class, positives)`: boolean `[B, B]`; positives exclude each anchor itself."""
    same = ops.equal(labels[:, None], labels[None, :])
    eye = ops.cast(ops.eye(ops.shape(labels)[0]), "bool")
    return same, ops.logical_and(same, ops.logical_not(eye))


def anchor_masks(labels, anchor_rows=None):
    """``(positives, negatives)`` of the anchors ``anchor_rows = (start, count)`` (all rows
    when None) against the whole batch: boolean `[count, B]`; positives exclude each anchor
    itself."""
    if anchor_rows is None:
        same, positives = label_masks(labels)
        return positives, ops.logical_not(same)
    start, count = anchor_rows
    same = ops.equal(labels[start : start + count, None], labels[None, :])
    itself = ops.cast(ops.one_hot(ops.arange(count) + start, ops.shape(labels)[0]), "bool")
    return ops.logical_and(same, ops.logical_not(itself)), ops.logical_not(same)


def positive_pair_count(labels, dtype):
    """Ordered positive pairs ``(a, p)``, ``a != p``, of the batch (``sum_c n_c (n_c - 1)``),
    counted without a float `[B, B]` mask (a unique-with-counts would be O(B) but has no XLA
    kernel on TensorFlow)."""
    same = ops.count_nonzero(ops.equal(labels[:, None], labels[None, :]))
    return ops.cast(same, dtype) - ops.cast(ops.shape(labels)[0], dtype)


def masked_max(data, mask, axis=1):
    """Max of `data` over `mask` along `axis` (kept); the minimum along `axis` where it is empty.

    Written as ``max((data - min) * mask) + min``, the formulation tensorflow-addons uses: the
    values are the masked maxima, and at exact ties (a masked-out entry ties with the shifted
    zero) TensorFlow's max gradient is split among the tied entries exactly as in TFA.
    """
    data = ops.convert_to_tensor(data)
    low = _reduce(ops.min, data, axis)
    return _reduce(ops.max, (data - low) * ops.cast(mask, data.dtype), axis) + low


def masked_min(data, mask, axis=1):
    """Min of `data` over `mask` along `axis` (kept); the maximum where it is empty."""
    data = ops.convert_to_tensor(data)
    high = _reduce(ops.max, data, axis)
    return _reduce(ops.min, (data - high) * ops.cast(mask, data.dtype), axis) + high


def _reduce(reduction, data, axis):
    """`ops.min` / `ops.max` over `axis` (kept) that also takes a batch with no rows (a replica
    with no anchors): the identity element as ``initial`` makes Keras skip its eager "empty
    tensor" assertion (TensorFlow) and error (JAX); every non-empty reduction is unchanged."""
    identity = float("inf") if reduction is ops.min else float("-inf")
    return reduction(data, axis=axis, keepdims=True, initial=identity)


def safe_mean_over(total, count):
    """`total / count`, defined as 0 when `count` is 0 (TFA returns NaN there).

    `divide_no_nan`, not ``where(count > 0, ...)``: the same values and gradients, and no
    boolean intermediate for the gradient to keep (inside the losses' empty-batch `tf.cond` such
    a boolean made TensorFlow log ``Type inference failed ...`` once per trace;
    tests/losses/test_clean_log.py).
    """
    return ops.divide_no_nan(total, ops.cast(count, total.dtype))
