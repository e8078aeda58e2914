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
from keras import ops

from tf_svmax import _backend, checks
from tf_svmax.losses import _common
from tf_svmax.losses._base import BatchPenaltyLoss
from tf_svmax.losses._registry import register
from tf_svmax.ops.ole import class_labels


def _log1p_sum_exp(z, mask, axis):
    """``log(1 + sum_{mask} exp(z))`` along `axis`, stable, 0 for an empty mask."""
    top = _backend.reduce_with_identity(
        ops.max, ops.where(mask, z, float("-inf")), axis, keepdims=True
    )
    # Shift by max(top, 0) so both the 1 and the exponentials stay <= 1; an empty mask has
    # top = -inf, replaced by 0 before any arithmetic.
    finite_top = ops.where(ops.isfinite(top), top, ops.zeros_like(top))
    shift = ops.stop_gradient(_backend.hinge(finite_top))
    # A 0-d zero, broadcast by the selects: `zeros_like(z)` filled a [B, C] tensor per call.
    zero = ops.zeros((), z.dtype)
    terms = ops.where(mask, ops.exp(ops.where(mask, z - shift, zero)), zero)
    total = ops.exp(-shift) + ops.sum(terms, axis=axis, keepdims=True)
    return ops.squeeze(ops.log(total) + shift, axis=axis)


_LABELS_MESSAGE = (
    "Invalid value for argument `labels`: expected class ids in "
    "[0, num_classes), num_classes = similarities.shape[1]."
)


def _proxy_labels(labels, s):
    """``(labels [B] integer, with_positive [C] bool, valid)``: the class ids, checked to be
    integral, one per row of `s` and in ``[0, C)``, the proxies with a positive in the batch,
    and `valid`: None where the labels are checked (here, their values known, or by a
    TensorFlow graph's assertions when it runs), else a bool scalar, whether they are valid (a
    trace where no check can raise: XLA drops `tf.debugging` asserts, JAX has none; the loss is
    then NaN, not the value with the invalid rows ignored)."""
    classes = ops.shape(s)[1]
    if _backend.RUN_TIME_ASSERTIONS:
        # A TensorFlow graph: checked when it runs.
        raw = checks.label_vector(labels, "labels")
        # Under XLA the assertions below are dropped: the loss is NaN unless `valid`. Elsewhere
        # they refuse every label `valid_labels` would flag, so its ops are not built.
        valid = ops.all(_common.valid_labels(raw, classes)) if _backend.in_xla_context() else None
        # Integral values only (1.7 is refused, not truncated), range-checked in int64
        # (2**32 + 1 would wrap to class 1 in int32).
        labels = checks.same_rows(class_labels(raw), s, "labels", "similarities")
        in_range = ops.logical_and(labels >= 0, labels < ops.cast(classes, "int64"))
        ranged = checks.checked_when_run(
            labels,
            lambda tf: tf.debugging.assert_equal(
                tf.reduce_all(in_range), True, message=_LABELS_MESSAGE
            ),
        )
        with_positive = ops.segment_sum(ops.ones_like(labels), ranged, num_segments=classes) > 0
        return labels, with_positive, valid
    # JAX and PyTorch: integral floats and int32's range (JAX without 64-bit types) are checked
    # by `tf_svmax.checks`; the class range when the labels are concrete (not under `jax.jit`, which
    # has no run-time assertion: there an id outside [0, C) has no proxy and no positive).
    raw = checks.integer_floats(
        checks.label_vector(labels, "labels"), "labels", "integer class labels"
    )
    raw = checks.same_rows(raw, s, "labels", "similarities")
    # int32 on JAX without 64-bit types (`label_vector` refused ids outside its range there).
    labels = ops.cast(raw, "int32" if _backend.jax_without_x64() else "int64")
    valid = None
    values = _backend.concrete_values(labels)
    if values is None:
        # Non-integral floats too: `integer_floats` cannot check a traced value.
        valid = ops.all(_common.valid_labels(raw, classes))
    else:
        if values.size and (values.min() < 0 or values.max() >= classes):
            raise ValueError(_LABELS_MESSAGE)
    with_positive = ops.any(ops.one_hot(labels, classes, dtype="bool"), axis=0)
    return labels, with_positive, valid


@register
def proxy_anchor_loss(labels, similarities, *, alpha=32.0, delta=0.1):
    """Proxy-Anchor loss from `[B]` labels and `[B, C]` cosine similarities to the proxies.

    Args:
      labels: `[B]` class ids in ``[0, C)``: others are refused by name where their values
        are known (eagerly, and when a TensorFlow graph runs), and give NaN in an XLA trace
        (TensorFlow's ``jit_compile=True``, `jax.jit`), where no check can raise.
      similarities: `[B, C]` cosine similarities of the embeddings to the proxies.
      alpha: Scale.
      delta: Margin.

    Returns:
      A scalar of the similarities' dtype (half precision computed in float32).
    """
    s, dtype = _similarities(similarities)
    labels, with_positive, valid = _proxy_labels(labels, s)
    classes = ops.shape(s)[1]
    count = ops.sum(ops.cast(with_positive, s.dtype))
    pos, neg = _proxy_terms(labels, s, with_positive, alpha, delta, valid)
    return ops.cast(pos / _backend.at_least(count, 1.0) + neg / ops.cast(classes, s.dtype), dtype)


def _similarities(similarities):
    """``(s, dtype)``: the `[B, C]` similarities in their compute dtype, and their dtype."""
    s = checks.to_tensor(similarities, "similarities")
    shape = checks.static_shape(s)
    name = keras.backend.standardize_dtype(s.dtype)
    if not keras.backend.is_float_dtype(name) or (shape is not None and len(shape) != 2):
        raise ValueError(
            checks.invalid(
                "similarities",
                "a [batch_size, num_classes] float tensor",
                f"<tensor {name} {s.shape}>",
            )
        )
    return ops.cast(s, checks.compute_dtype(s.dtype)), s.dtype


def _proxy_terms(labels, s, with_positive, alpha, delta, valid=None):
    """``(positive sum, negative sum)`` over the proxies (columns) of `s`, the positive one
    over those ``with_positive``; both NaN unless `valid` (None: the labels were checked)."""
    positive = ops.cast(ops.one_hot(labels, ops.shape(s)[1]), "bool")  # [B, proxies]
    negative = ops.logical_not(positive)
    pos_terms = _log1p_sum_exp(-alpha * (s - delta), positive, axis=0)
    neg_terms = _log1p_sum_exp(alpha * (s + delta), negative, axis=0)
    pos = ops.sum(ops.where(with_positive, pos_terms, ops.zeros_like(pos_terms)))
    neg = ops.sum(neg_terms)
    if valid is None:
        return pos, neg
    return _common.nan_unless(valid, pos), _common.nan_unless(valid, neg)


def _own_proxy_parts(
    labels, similarities, *, ref_labels, ref_embeddings, ref_offset=0, alpha, delta
):
    """`ProxyAnchorLoss`'s ``parts_fn``: ``(parts, dtype)``, the terms of the proxies ``[start
    C / B, (start + count) C / B)`` of the rows `similarities` (the reference rows
    ``ref_offset ..`` of the whole batch's similarities, `ref_embeddings`), over every row, with
    their counts (of proxies with a positive, and of proxies). Disjoint row ranges covering the
    batch map to disjoint proxy ranges covering the C proxies, so the parts add up to the loss,
    and each does ``count / B`` of the work."""
    s, labels, rows, _ = _common.anchors_and_references(
        labels, similarities, ref_labels, ref_embeddings, ref_offset, "labels", "similarities"
    )
    s, dtype = _similarities(s)
    labels, with_positive, valid = _proxy_labels(labels, s)
    first, last = _own_proxies(rows, ops.shape(s)[0], ops.shape(s)[1])
    s, with_positive = s[:, first:last], with_positive[first:last]
    labels = labels - ops.cast(first, labels.dtype)  # classes outside give all-zero rows
    pos, neg = _proxy_terms(labels, s, with_positive, alpha, delta, valid)
    own_count = ops.sum(ops.cast(with_positive, s.dtype))
    # keep_nan: invalid labels give NaN even in a share with no proxy.
    parts = [
        _common.LossPart(pos, own_count, keep_nan=True),
        _common.LossPart(neg, last - first, keep_nan=True),
    ]
    return parts, dtype


def _own_proxies(anchors, rows, classes):
    """``(first, last)``: the proxies ``first .. last - 1`` of the anchors ``anchors =
    (start, count)`` of `rows`, ``floor(start C / B)`` to ``floor((start + count) C / B)``: a
    monotone map of row bounds to proxy bounds, 0 to 0 and B to C."""
    start, count = anchors
    if all(isinstance(v, int) for v in (start, count, rows, classes)):
        return start * classes // rows, (start + count) * classes // rows  # exact Python ints
    # In int64: start * C overflows int32 at B = 4,096 rows and C = 2**20 proxies.
    # At least 1: a batch of no rows (every replica empty) has no proxies to split, (0, 0).
    rows, classes = ops.maximum(ops.cast(rows, "int64"), 1), ops.cast(classes, "int64")

    def bound(row):
        return ops.cast(ops.floor_divide(ops.cast(row, "int64") * classes, rows), "int32")

    return bound(start), bound(start + count)


@register
class ProxyAnchorLoss(BatchPenaltyLoss):
    """Keras loss for `proxy_anchor_loss`; `y_pred` is the `[B, C]` output of `CosineProxies`.

    Under a `tf.distribute` strategy each replica computes its share of the proxies over the
    global batch (`reference_parts`: its rows select its proxies, not reference rows to mine,
    so `CrossBatchMemory` does not take it): `[B, C/N]` instead of `[B, C]`, the same value and
    gradients as one device.
    """

    ranks_embeddings = False  # its y_pred holds proxy similarities

    splits_anchors = True

    def __init__(self, alpha=32.0, delta=0.1, name="proxy_anchor", **kwargs):
        fn_kwargs = dict(
            alpha=checks.check_non_negative_number(alpha, "alpha"),
            delta=checks.check_non_negative_number(delta, "delta"),
        )
        super().__init__(
            proxy_anchor_loss, fn_kwargs, parts_fn=_own_proxy_parts, name=name, **kwargs
        )
