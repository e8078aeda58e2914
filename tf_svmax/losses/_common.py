"""Helpers shared by the metric-learning losses: labels, masks, masked reductions (keras.ops:
TensorFlow, JAX and PyTorch)."""

import collections

import keras
import numpy as np
from keras import ops

from tf_svmax import _backend, checks
from tf_svmax.losses._registry import register


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


def anchors_and_references(
    y_true,
    y_pred,
    ref_labels,
    ref_embeddings,
    ref_offset,
    labels_arg="y_true",
    embeddings_arg="y_pred",
):
    """``(x, labels, rows, dtype)``: the reference set the anchors are mined against, with the
    anchors at rows ``rows = (start, count)`` of it, and the anchors' input dtype.

    Without references (`ref_labels` and `ref_embeddings` None) the anchors are their own
    references: ``x``, ``labels`` are the checked `y_pred`, `y_true` and ``rows`` is None (the
    whole set). With them, the anchors (`y_true`, `y_pred`, possibly no rows) take the place of
    the reference rows ``ref_offset .. ref_offset + n - 1`` (spliced in, so that their values
    and gradients are the anchors'; those reference rows are not read), as Keras' `circle`
    with ``remove_diagonal`` takes the anchors to be the references' first rows. The
    embeddings are taken in the anchors' compute dtype, the labels in a dtype that holds both.
    """
    if ref_labels is None and ref_embeddings is None:
        if not _is_zero(ref_offset):
            raise ValueError(
                checks.invalid("ref_offset", "0 without ref_labels and ref_embeddings", ref_offset)
            )
        x, dtype = embeddings_matrix(y_pred, arg=embeddings_arg)
        return x, flat_labels(y_true, x, labels_arg, embeddings_arg), None, dtype
    if ref_labels is None or ref_embeddings is None:
        missing = "ref_labels" if ref_labels is None else "ref_embeddings"
        raise ValueError(
            checks.invalid(missing, "a tensor (ref_labels and ref_embeddings go together)", None)
        )
    # A set of no anchors is a replica's empty share: allowed once there are references.
    x, dtype = checks.float_matrix(y_pred, embeddings_arg, min_rows=0)
    labels = flat_labels(y_true, x, labels_arg, embeddings_arg)
    refs, _ = checks.float_matrix(ref_embeddings, "ref_embeddings")
    refs = ops.cast(refs, x.dtype)
    width, ref_width = x.shape[1], refs.shape[1]
    if width is not None and ref_width is not None and width != ref_width:
        raise ValueError(
            checks.invalid(
                "ref_embeddings",
                f"rows of width {width} ({embeddings_arg}'s)",
                f"<tensor of shape {tuple(refs.shape)}>",
            )
        )
    ref_labels = flat_labels(ref_labels, refs, "ref_labels", "ref_embeddings")
    common = keras.backend.result_type(labels.dtype, ref_labels.dtype)
    labels, ref_labels = ops.cast(labels, common), ops.cast(ref_labels, common)
    count = ops.shape(x)[0]
    start = _check_offset(ref_offset, count, refs.shape[0])
    x = _splice(refs, x, start, count)
    labels = _splice(ref_labels, labels, start, count)
    return x, labels, (start, count), dtype


def reference_mask(ref_mask, x, rows):
    """``(x, valid)``: the reference set `x` (from `anchors_and_references`, the anchors at
    ``rows``) with its rows outside `ref_mask` zeroed, and the bool `[R]` rows in use (None,
    and `x` unchanged, when `ref_mask` is None: every row is).

    `ref_mask` is a bool `[R]` over the reference rows: a False row is as if absent, as a
    reference and as an anchor. It is neither a positive nor a negative of any anchor; when it
    is an anchor's own row (``ref_offset ..``), that anchor is dropped: no term, not counted
    in any normalizer (`anchor_masks` gives it no positive and no negative, `anchor_count`
    leaves it out). So the set against itself with a mask S is the loss on the rows of S
    alone (an empty S: 0). Zeroing the masked rows' embeddings makes that hold whatever they
    hold (NaN, inf) and gives them a zero gradient.
    """
    if ref_mask is None:
        return x, None
    if rows is None:
        raise ValueError(
            checks.invalid("ref_mask", "None without ref_labels and ref_embeddings", "<mask>")
        )
    mask = checks.to_tensor(ref_mask, "ref_mask")
    dtype = keras.backend.standardize_dtype(mask.dtype)
    shape = checks.static_shape(mask)
    if dtype != "bool" or (shape is not None and len(shape) != 1):
        raise ValueError(
            checks.invalid(
                "ref_mask",
                "a bool vector [R] (one entry per reference row)",
                f"<tensor of dtype {dtype} and shape {shape}>",
            )
        )
    mask = checks.same_rows(mask, x, "ref_mask", "ref_embeddings", unit="entry")
    return ops.where(mask[:, None], x, ops.zeros_like(x)), mask


def anchors_in_use(rows, valid):
    """Bool `[count]`: which anchors ``rows = (start, count)`` have their own reference row in
    use (`valid`, `reference_mask`); None when every row is (`valid` None)."""
    if valid is None:
        return None
    start, count = rows
    return valid[start : start + count]


def anchor_count(labels, rows, valid=None):
    """The number of anchors ``rows = (start, count)`` (all rows when None) in use: the mean
    over anchors' normalizer (an int, or an int32 scalar tensor with a mask)."""
    if rows is None:
        return ops.size(labels)
    if valid is None:
        return rows[1]
    return count_true(anchors_in_use(rows, valid))


def count_true(mask):
    """The number of True entries of a boolean `mask`, an int32 scalar. Not
    ``ops.count_nonzero(mask)``: Keras' PyTorch version transposes its result, which PyTorch
    deprecates on a 0-D tensor with a UserWarning at every call."""
    return ops.sum(ops.cast(mask, "int32"))


def _is_zero(value):
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value == 0


def _check_offset(offset, count, rows):
    """`offset` (an int >= 0, or an integer scalar tensor such as a replica's first row) with
    ``offset + count <= rows`` where both are known."""
    if isinstance(offset, bool) or offset is None:
        raise ValueError(checks.invalid("ref_offset", "an int >= 0", offset))
    if isinstance(offset, (int, np.integer)):
        offset = int(offset)
        known = isinstance(count, int) and rows is not None
        if offset < 0 or (known and offset + count > rows):
            bounds = f"in [0, {rows - count}]" if known else ">= 0"
            raise ValueError(
                checks.invalid(
                    "ref_offset",
                    f"an int {bounds} (the anchors' first row among the references)",
                    offset,
                )
            )
    return offset


def _splice(refs, anchors, start, count):
    """`refs` with its rows ``start .. start + count - 1`` replaced by `anchors` (the static
    row count of `refs` kept: the losses choose their code path by it)."""
    spliced = ops.concatenate([refs[:start], anchors, refs[start + count :]], axis=0)
    if refs.shape[0] is not None:
        spliced = ops.reshape(spliced, [refs.shape[0], *ops.shape(refs)[1:]])
    return spliced


@register(helper=True)
class LossPart(
    collections.namedtuple("LossPart", ["total", "count", "keep_nan"], defaults=(False,))
):
    """One term of a loss over anchors, ``total / count`` (0 when ``count`` is 0; with
    ``count`` None, ``total`` undivided): what a loss's ``reference_parts(y_true, y_pred, *,
    ref_labels, ref_embeddings, ref_offset)`` returns, a list of them whose terms add up to its
    value. The totals and counts of disjoint anchor sets against the same references add up
    (a replica's anchors of the global batch; a batch against a cross-batch memory), so a
    split adds them before dividing (`mean_of_parts`). ``keep_nan``: a NaN ``total`` gives NaN
    even when ``count`` is 0 (a non-finite input is never a finite wrong number).

    A loss of one's own that `tf_svmax.losses.CrossBatchMemory` wraps: a `keras.losses.Loss`
    with ``accepts_reference_rows = True`` and that method (e.g. ``[LossPart(sum of the
    anchors' terms, their number)]``); its anchors are the reference rows ``ref_offset ..``.
    """


def mean_of_parts(parts, reduce_count=None):
    """``sum(total / count)`` over the `LossPart` s, each count first passed through `reduce_count`
    (e.g. the sum over replicas; the counts carry no gradient)."""
    value = None
    for part in parts:
        if part.count is None:
            term = part.total
        else:
            count = part.count
            if reduce_count is not None:
                count = reduce_count(ops.stop_gradient(ops.convert_to_tensor(count)))
            term = safe_mean_over(part.total, count)
        if part.keep_nan:
            # The NaN is added outside the gradient: a `tf.where` on ``is_nan`` would keep its
            # boolean for the gradient, which inside the loss's empty-batch `tf.cond` makes
            # TensorFlow log ``Type inference failed ...`` (tests/losses/test_clean_log.py).
            total = part.total
            term = term + ops.stop_gradient(
                ops.where(ops.isnan(total), total, ops.zeros_like(total))
            )
        value = term if value is None else value + term
    return value


def label_masks(labels):
    """`(same_class, positives)`: boolean `[B, B]`; positives exclude each anchor itself."""
    same = ops.equal(labels[:, None], labels[None, :])
    # Made bool (no float [B, B] identity cast to bool: one pass over [B, B] fewer).
    eye = ops.eye(ops.shape(labels)[0], dtype="bool")
    return same, ops.logical_and(same, ops.logical_not(eye))


def anchor_masks(labels, rows=None, valid=None):
    """``(positives, negatives)`` of the anchors ``rows = (start, count)`` (all rows when None)
    against the whole set: boolean `[count, B]`; positives exclude each anchor itself. `valid`
    (bool `[B]`, `reference_mask`): only those columns are positives or negatives, and an
    anchor whose own row is not valid has neither (it is dropped)."""
    if rows is None:
        same, positives = label_masks(labels)
        return positives, ops.logical_not(same)
    start, count = rows
    same = ops.equal(labels[start : start + count, None], labels[None, :])
    itself = ops.cast(ops.one_hot(ops.arange(count) + start, ops.shape(labels)[0]), "bool")
    positives, negatives = ops.logical_and(same, ops.logical_not(itself)), ops.logical_not(same)
    if valid is None:
        return positives, negatives
    in_use = ops.logical_and(anchors_in_use(rows, valid)[:, None], valid[None, :])
    return ops.logical_and(positives, in_use), ops.logical_and(negatives, in_use)


def positive_pair_count(labels, dtype):
    """Ordered positive pairs ``(a, p)``, ``a != p``, of the batch (``sum_c n_c (n_c - 1)``),
    counted without a float `[B, B]` mask (a unique-with-counts would be O(B) but has no XLA
    kernel on TensorFlow)."""
    same = count_true(ops.equal(labels[:, None], labels[None, :]))
    return ops.cast(same, dtype) - ops.cast(ops.shape(labels)[0], dtype)


def masked_max(data, mask, axis=1, valid=None):
    """Max of `data` over `mask` along `axis` (kept); the minimum along `axis` where it is empty.

    Written as ``max((data - min) * mask) + min``, the formulation tensorflow-addons uses: the
    values are the masked maxima, and at exact ties (a masked-out entry ties with the shifted
    zero) TensorFlow's max gradient is split among the tied entries exactly as in TFA.

    `valid` (bool, broadcast against `data`; `reference_mask`): the entries that exist; the
    others take part in neither reduction nor tie (as if `data` had only the valid ones).
    """
    data = ops.convert_to_tensor(data)
    if valid is None:
        low = _reduce(ops.min, data, axis)
        return _reduce(ops.max, (data - low) * ops.cast(mask, data.dtype), axis) + low
    low = _reduce(ops.min, _outside(valid, data, np.inf), axis)
    shifted = _outside(valid, (data - low) * ops.cast(mask, data.dtype), -np.inf)
    return _reduce(ops.max, shifted, axis) + low


def masked_min(data, mask, axis=1, valid=None):
    """Min of `data` over `mask` along `axis` (kept); the maximum where it is empty. `valid` as
    in `masked_max`."""
    data = ops.convert_to_tensor(data)
    if valid is None:
        high = _reduce(ops.max, data, axis)
        return _reduce(ops.min, (data - high) * ops.cast(mask, data.dtype), axis) + high
    high = _reduce(ops.max, _outside(valid, data, -np.inf), axis)
    shifted = _outside(valid, (data - high) * ops.cast(mask, data.dtype), np.inf)
    return _reduce(ops.min, shifted, axis) + high


def _outside(valid, data, fill):
    """`data` with `fill` (an identity of the reduction that follows) where `valid` is False."""
    return ops.where(valid, data, ops.full_like(data, fill))


def _reduce(reduction, data, axis):
    """`ops.min` / `ops.max` over `axis` (kept) that also takes a batch with no rows (a replica
    with no anchors): `_backend.reduce_with_identity`; every non-empty reduction is unchanged."""
    return _backend.reduce_with_identity(reduction, data, axis, keepdims=True)


def valid_labels(labels, num_classes):
    """Bool, per entry of `labels`: an integer in ``[0, num_classes)`` (NaN, 1.7, -1 and 2**31
    are not), compared in the labels' own float dtype or in a wide integer one (a narrow
    integer dtype would wrap `num_classes`). The check of a trace, where an invalid label
    cannot raise (XLA drops `tf.debugging` asserts; JAX has none): the loss then gives NaN
    instead of a value for a clamped or ignored class."""
    y = ops.convert_to_tensor(labels)
    if keras.backend.is_float_dtype(keras.backend.standardize_dtype(y.dtype)):
        integral = ops.equal(y, ops.round(y))
    else:
        # int32 on JAX without 64-bit types (its labels are int32 there already).
        y = ops.cast(y, "int32" if _backend.jax_without_x64() else "int64")
        integral = ops.ones_like(y, "bool")
    inside = ops.logical_and(y >= 0, y < ops.cast(num_classes, y.dtype))
    return ops.logical_and(inside, integral)


def nan_unless_finite(value, distances, axis=None):
    """`value`, or NaN where `distances` hold a non-finite entry (over `axis`; None: any entry,
    for a scalar `value`; 1: per row, for a `[B]` `value`).

    NaN or inf embeddings, or finite ones whose distances overflow, give non-finite distances;
    the hinges and masks after them may then drop the NaN (``max(x, 0)`` written as a `where`,
    XLA's max/min reductions on TensorFlow, an entry selected away), and a diverged batch would
    report a finite loss, even 0. The flag is a boolean reduction, which every backend and XLA
    compute exactly. The NaN is added outside the gradient, as in `mean_of_parts` (a `where`
    on the flag would keep a boolean for the gradient, which inside the losses' empty-batch
    `tf.cond` makes TensorFlow log ``Type inference failed ...``); a finite batch gets ``+ 0``,
    the same value.
    """
    return nan_unless(ops.all(ops.isfinite(distances), axis=axis), value)


def nan_unless(flag, value):
    """`value`, or NaN where the bool `flag` (broadcast against it) is False, the NaN added
    outside the gradient (see `nan_unless_finite`)."""
    zero = ops.zeros_like(value)
    return value + ops.stop_gradient(ops.where(flag, zero, ops.full_like(value, np.nan)))


def hinge(x):
    """``max(x, 0)`` in `x`'s dtype, NaN kept, the gradient passing to `x` at 0 (`tf.maximum`'s
    values and gradient): `tf_svmax._backend.hinge`."""
    return _backend.hinge(x)


def safe_mean_over(total, count):
    """`total / count`, defined as 0 when `count` is 0 (TFA returns NaN there).

    `divide_no_nan`, not ``where(count > 0, ...)``: the same values and gradients, and no
    boolean intermediate for the gradient to keep (inside the losses' empty-batch `tf.cond` such
    a boolean made TensorFlow log ``Type inference failed ...`` once per trace;
    tests/losses/test_clean_log.py).
    """
    return ops.divide_no_nan(total, ops.cast(count, total.dtype))
