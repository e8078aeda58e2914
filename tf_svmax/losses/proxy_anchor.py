"""Proxy-Anchor loss (Kim et al. 2020), the dissertation's Table 3.3 baseline.

With cosine similarities ``s(x, p)`` between embeddings and one learnable proxy per class::

    loss = 1/|P+| sum_{p in P+} log(1 + sum_{x in X_p+} exp(-alpha (s(x, p) - delta)))
         + 1/|P|  sum_{p in P}  log(1 + sum_{x in X_p-} exp( alpha (s(x, p) + delta)))

``P+`` are the proxies with a positive in the batch. Defaults alpha = 32, delta = 0.1.
The proxies are trainable weights, so they live in a layer of the model
(`tf_svmax.models.CosineProxies`, whose output is the similarity matrix) and the loss takes
``(labels, similarities)``.

The loss is not a sum over anchors (each proxy's sums over the batch sit inside a log) but it is
a sum over proxies: under a `tf.distribute` strategy each replica computes the terms of its
share of the proxies (columns) over the whole global batch, with no further exchange.
"""

import keras
import numpy as np
import tensorflow as tf

from tf_svmax.losses._base import BatchPenaltyLoss, LossFunctionWrapper
from tf_svmax.ops import _checks
from tf_svmax.ops.ole import class_labels


def _log1p_sum_exp(z, mask, axis):
    """``log(1 + sum_{mask} exp(z))`` along `axis`, stable, 0 for an empty mask."""
    top = tf.reduce_max(tf.where(mask, z, tf.constant(-np.inf, z.dtype)), axis=axis, keepdims=True)
    # Shift by max(top, 0) so both the 1 and the exponentials stay <= 1; an empty mask has
    # top = -inf, replaced by 0 before any arithmetic.
    shift = tf.stop_gradient(tf.maximum(tf.where(tf.math.is_finite(top), top, 0.0), 0.0))
    terms = tf.where(mask, tf.exp(tf.where(mask, z - shift, 0.0)), 0.0)
    total = tf.exp(-shift) + tf.reduce_sum(terms, axis=axis, keepdims=True)
    return tf.squeeze(tf.math.log(total) + shift, axis=axis)


def proxy_anchor_loss(labels, similarities, *, alpha=32.0, delta=0.1, anchor_rows=None):
    """Proxy-Anchor loss from `[B]` labels and `[B, C]` cosine similarities to the proxies.

    Args:
      labels: `[B]` class ids in ``[0, C)``.
      similarities: `[B, C]` cosine similarities of the embeddings to the proxies.
      alpha: Scale.
      delta: Margin.
      anchor_rows: Optional ``(start, count)`` (a replica's own rows of a gathered global
        batch): the terms of the proxies ``[start C / B, (start + count) C / B)`` only, over
        every row, each still divided by the whole batch's proxy counts. Disjoint row ranges
        covering the batch map to disjoint proxy ranges covering the C proxies, so their
        values and gradients add up to the loss, and each part does ``count / B`` of the work.

    Returns:
      A scalar of the similarities' dtype (half precision computed in float32).
    """
    s = tf.convert_to_tensor(similarities)
    if not s.dtype.is_floating or (s.shape.rank is not None and s.shape.rank != 2):
        raise ValueError(
            _checks.invalid(
                "similarities",
                "a [batch_size, num_classes] float tensor",
                f"<tensor {s.dtype.name} {s.shape}>",
            )
        )
    dtype = s.dtype
    s = tf.cast(s, _checks.compute_dtype(dtype))
    # Integral values only (1.7 is refused, not truncated), range-checked in int64 (2**32 + 1
    # would wrap to class 1 in int32).
    labels = _checks.same_rows(class_labels(labels), s, "labels", "similarities")
    classes = tf.shape(s)[1]
    in_range = tf.logical_and(labels >= 0, labels < tf.cast(classes, tf.int64))
    with tf.control_dependencies(
        [
            tf.debugging.assert_equal(
                tf.reduce_all(in_range),
                True,
                message="Invalid value for argument `labels`: expected class ids in "
                "[0, num_classes), num_classes = similarities.shape[1].",
            )
        ]
    ):
        # P+: the proxies with a positive in the (whole) batch.
        with_positive = tf.math.unsorted_segment_sum(tf.ones_like(labels), labels, classes) > 0
    count = tf.reduce_sum(tf.cast(with_positive, s.dtype))
    if anchor_rows is not None:
        first, last = _own_proxies(anchor_rows, tf.shape(s)[0], classes)
        s, with_positive = s[:, first:last], with_positive[first:last]
        labels = labels - tf.cast(first, labels.dtype)  # classes outside give all-zero rows
    positive = tf.cast(tf.one_hot(labels, tf.shape(s)[1]), tf.bool)  # [B, own proxies]
    negative = tf.logical_not(positive)
    pos_terms = _log1p_sum_exp(-alpha * (s - delta), positive, axis=0)
    neg_terms = _log1p_sum_exp(alpha * (s + delta), negative, axis=0)
    pos = tf.reduce_sum(tf.where(with_positive, pos_terms, 0.0)) / tf.maximum(count, 1.0)
    neg = tf.reduce_sum(neg_terms) / tf.cast(classes, s.dtype)
    return tf.cast(pos + neg, dtype)


def _own_proxies(anchor_rows, rows, classes):
    """``(first, last)``: the proxies ``first .. last - 1`` of the anchors ``anchor_rows =
    (start, count)`` of `rows`, ``floor(start C / B)`` to ``floor((start + count) C / B)``: a
    monotone map of row bounds to proxy bounds, 0 to 0 and B to C."""
    start, count = anchor_rows
    # In int64: start * C overflows int32 at B = 4,096 rows and C = 2**20 proxies.
    rows, classes = tf.cast(rows, tf.int64), tf.cast(classes, tf.int64)

    def bound(row):
        return tf.cast(tf.math.floordiv(tf.cast(row, tf.int64) * classes, rows), tf.int32)

    return bound(start), bound(start + count)


@keras.saving.register_keras_serializable(package="tf_svmax")
class ProxyAnchorLoss(LossFunctionWrapper, BatchPenaltyLoss):
    """Keras loss for `proxy_anchor_loss`; `y_pred` is the `[B, C]` output of `CosineProxies`.

    Under a `tf.distribute` strategy each replica computes its share of the proxies over the
    global batch (`proxy_anchor_loss`'s ``anchor_rows``): `[B, C/N]` instead of `[B, C]`, the
    same value and gradients as one device.
    """

    splits_anchors = True

    def __init__(self, alpha=32.0, delta=0.1, name="proxy_anchor", **kwargs):
        fn_kwargs = dict(
            alpha=_checks.check_non_negative_number(alpha, "alpha"),
            delta=_checks.check_non_negative_number(delta, "delta"),
        )
        super().__init__(proxy_anchor_loss, fn_kwargs, name=name, **kwargs)
