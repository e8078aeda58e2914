"""Proxy-Anchor loss (Kim et al. 2020), the dissertation's Table 3.3 baseline.

With cosine similarities ``s(x, p)`` between embeddings and one learnable proxy per class::

    loss = 1/|P+| sum_{p in P+} log(1 + sum_{x in X_p+} exp(-alpha (s(x, p) - delta)))
         + 1/|P|  sum_{p in P}  log(1 + sum_{x in X_p-} exp( alpha (s(x, p) + delta)))

``P+`` are the proxies with a positive in the batch. Defaults alpha = 32, delta = 0.1.
The proxies are trainable weights, so they live in a layer of the model
(`tf_svmax.models.CosineProxies`, whose output is the similarity matrix) and the loss takes
``(labels, similarities)``.
"""

import keras
import numpy as np
import tensorflow as tf

from tf_svmax.losses._base import BatchPenaltyLoss
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


def proxy_anchor_loss(labels, similarities, *, alpha=32.0, delta=0.1):
    """Proxy-Anchor loss from `[B]` labels and `[B, C]` cosine similarities to the proxies."""
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
    in_range = tf.logical_and(labels >= 0, labels < tf.cast(tf.shape(s)[1], tf.int64))
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
        positive = tf.cast(tf.one_hot(labels, tf.shape(s)[1]), tf.bool)  # [B, C]
    negative = tf.logical_not(positive)
    with_positive = tf.reduce_any(positive, axis=0)  # P+
    pos_terms = _log1p_sum_exp(-alpha * (s - delta), positive, axis=0)
    neg_terms = _log1p_sum_exp(alpha * (s + delta), negative, axis=0)
    count = tf.reduce_sum(tf.cast(with_positive, s.dtype))
    pos = tf.reduce_sum(tf.where(with_positive, pos_terms, 0.0)) / tf.maximum(count, 1.0)
    neg = tf.reduce_mean(neg_terms)
    return tf.cast(pos + neg, dtype)


@keras.saving.register_keras_serializable(package="tf_svmax")
class ProxyAnchorLoss(BatchPenaltyLoss):
    """Keras loss for `proxy_anchor_loss`; `y_pred` is the `[B, C]` output of `CosineProxies`."""

    def __init__(self, alpha=32.0, delta=0.1, name="proxy_anchor", **kwargs):
        super().__init__(name=name, **kwargs)
        self.alpha = _checks.check_non_negative_number(alpha, "alpha")
        self.delta = _checks.check_non_negative_number(delta, "delta")

    def call(self, y_true, y_pred):
        return proxy_anchor_loss(y_true, y_pred, alpha=self.alpha, delta=self.delta)

    def get_config(self):
        return {**super().get_config(), "alpha": self.alpha, "delta": self.delta}
