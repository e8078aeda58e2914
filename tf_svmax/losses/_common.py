"""Helpers shared by the metric-learning losses: labels, masks, masked reductions."""

import tensorflow as tf

from tf_svmax.ops import _checks


def flat_labels(labels, embeddings, arg="y_true", embeddings_arg="y_pred"):
    """Flattens `[N]` or `[N, 1]` labels and checks there is one per row of `embeddings`.

    Labels are compared for equality in their own dtype (never cast to float, which would
    merge large integer ids).
    """
    labels = _checks.label_vector(labels, arg)
    if not (labels.dtype.is_integer or labels.dtype.is_floating or labels.dtype == tf.bool):
        raise TypeError(
            _checks.invalid(arg, "numeric class labels", f"<tensor of dtype {labels.dtype.name}>")
        )
    return _checks.same_rows(labels, embeddings, arg, embeddings_arg, unit="label")


def embeddings_matrix(y_pred, arg="y_pred"):
    """`(embeddings, input_dtype)` with half precision promoted to float32, like TFA."""
    return _checks.float_matrix(y_pred, arg)


def label_masks(labels):
    """`(same_class, positives)`: boolean `[B, B]`; positives exclude each anchor itself."""
    same = tf.equal(labels[:, tf.newaxis], labels[tf.newaxis, :])
    eye = tf.eye(tf.shape(labels)[0], dtype=tf.bool)
    return same, tf.logical_and(same, tf.logical_not(eye))


def anchor_masks(labels, anchor_rows=None):
    """``(positives, negatives)`` of the anchors ``anchor_rows = (start, count)`` (all rows
    when None) against the whole batch: boolean `[count, B]`; positives exclude each anchor
    itself."""
    if anchor_rows is None:
        same, positives = label_masks(labels)
        return positives, tf.logical_not(same)
    start, count = anchor_rows
    same = tf.equal(labels[start : start + count, tf.newaxis], labels[tf.newaxis, :])
    itself = tf.cast(tf.one_hot(tf.range(count) + start, tf.shape(labels)[0]), tf.bool)
    return tf.logical_and(same, tf.logical_not(itself)), tf.logical_not(same)


def positive_pair_count(labels, dtype):
    """Ordered positive pairs ``(a, p)``, ``a != p``, of the batch (``sum_c n_c (n_c - 1)``),
    counted without a float `[B, B]` mask (`tf.unique_with_counts` would be O(B) but has no
    XLA kernel)."""
    same = tf.math.count_nonzero(tf.equal(labels[:, tf.newaxis], labels[tf.newaxis, :]))
    return tf.cast(same - tf.size(labels, out_type=tf.int64), dtype)


def masked_max(data, mask, axis=1):
    """Max of `data` over `mask` along `axis` (kept); the minimum along `axis` where it is empty.

    Written as ``max((data - min) * mask) + min``, the formulation tensorflow-addons uses: the
    values are the masked maxima, and at exact ties (a masked-out entry ties with the shifted
    zero) TensorFlow's max gradient is split among the tied entries exactly as in TFA.
    """
    low = tf.reduce_min(data, axis=axis, keepdims=True)
    return tf.reduce_max((data - low) * tf.cast(mask, data.dtype), axis=axis, keepdims=True) + low


def masked_min(data, mask, axis=1):
    """Min of `data` over `mask` along `axis` (kept); the maximum where it is empty."""
    high = tf.reduce_max(data, axis=axis, keepdims=True)
    return tf.reduce_min((data - high) * tf.cast(mask, data.dtype), axis=axis, keepdims=True) + high


def safe_mean_over(total, count):
    """`total / count`, defined as 0 when `count` is 0 (TFA returns NaN there).

    `divide_no_nan`, not ``where(count > 0, ...)``: the same values and gradients, and no
    boolean intermediate for the gradient to keep. Inside the losses' empty-batch `tf.cond`
    such a boolean made TensorFlow log ``Type inference failed ...`` once per trace
    (tests/losses/test_clean_log.py).
    """
    return tf.math.divide_no_nan(total, tf.cast(count, total.dtype))
