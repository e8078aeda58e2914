"""The library's loss base class, `LabelLoss` (one scalar per batch, `BatchPenaltyLoss`, or one
value per sample, `PerSampleLabelLoss`), and `LossFunctionWrapper`, which makes a loss class of a
pure loss function and its keyword arguments."""

import collections

import keras
from keras import ops

# `_backend.replicas()`: the `tf.distribute` global-batch gather on TensorFlow, a single replica
# that gathers and scales nothing elsewhere (the one backend-guarded place of the loss base).
from tf_svmax import _backend, checks


def _batch_weights(sample_weight, y_pred, dtype):
    """`sample_weight` as a scalar or one weight per row of `y_pred` (`[B]` or `[B, 1]`);
    another length is refused (its mean would silently weight some other batch)."""
    weights = ops.cast(ops.convert_to_tensor(sample_weight), dtype)
    if checks.static_shape(weights) == ():
        return weights
    return checks.same_rows(ops.reshape(weights, [-1]), y_pred, "sample_weight", "y_pred", "weight")


BATCH_REDUCTIONS = ("sum_over_batch_size", "sum", "none", None)
PER_SAMPLE_REDUCTIONS = ("sum_over_batch_size", "sum", None, "none")


class LabelLoss(keras.losses.Loss):
    """Base class of the library's losses on labels and embeddings: one scalar per batch
    (``per_sample = False``, `BatchPenaltyLoss`) or one value per sample (``per_sample = True``,
    `PerSampleLabelLoss`); see those two for the reductions.

    Keras' default `Loss.__call__` casts `y_true` to the loss dtype (float32), which would
    silently merge integer labels above 2**24 and fails on `y_true=None`; here `y_true` is passed
    to `call` unchanged. `sample_weight` is a scalar or one weight per row of `y_pred`.

    Under a `tf.distribute` strategy with more than one replica, ``global_batch=True``
    (default) evaluates the loss once on the global batch (every replica's rows, gathered in
    replica order) and scales it so that the replicas' summed gradients equal the single-device
    gradients on the concatenated batch; ``global_batch=False`` evaluates each replica's rows
    alone and averages over the replicas (a smaller-batch loss: another value and gradient).
    A loss that is a sum over anchors (``splits_anchors``) computes on each replica only its
    own anchors against the global batch (the same value and gradients, 1/N of the work).
    """

    # One value per sample (`call` returns `[B]`) rather than one scalar per batch.
    per_sample = False
    # Subclasses whose value is a sum over anchors set this and accept `call(y_true, y_pred,
    # anchor_rows=(start, count))`, which returns those anchors' share of the value (their
    # values against the global batch when `per_sample`).
    splits_anchors = False

    def __init__(self, name=None, reduction="sum_over_batch_size", dtype=None, global_batch=True):
        self.global_batch = checks.check_bool(global_batch, "global_batch")
        reductions = PER_SAMPLE_REDUCTIONS if self.per_sample else BATCH_REDUCTIONS
        if reduction not in reductions:
            kind = "" if self.per_sample else " (a batch-level loss)"
            raise ValueError(
                checks.invalid("reduction", f"one of {list(reductions)}{kind}", reduction)
            )
        super().__init__(name=name, reduction=reduction, dtype=dtype)

    def __call__(self, y_true, y_pred, sample_weight=None):
        with keras.name_scope(self.name):
            y_pred = ops.cast(ops.convert_to_tensor(y_pred), self.dtype)
            weights = None
            if sample_weight is not None:
                weights = _batch_weights(sample_weight, y_pred, self.dtype)
            local = _Local(ops.shape(y_pred)[0], weights)
            context, (y_true, y_pred, weights) = _backend.replicas().gather_global_batch(
                self.global_batch, y_true, y_pred, weights
            )
            reduce = self._per_sample if self.per_sample else self._batch_level
            return reduce(context, local, y_true, y_pred, weights)

    def _anchor_split(self, context, local):
        """`call`'s ``anchor_rows`` argument for this replica's anchors ({} when unsplit)."""
        if context is None or not self.splits_anchors:
            return {}
        return {"anchor_rows": _backend.replicas().own_row_range(context, local.rows)}

    def _batch_level(self, context, local, y_true, y_pred, weights):
        per_row_none = self.reduction in ("none", None) and (
            local.weights is not None and checks.static_shape(local.weights) != ()
        )
        split, scale = {}, _backend.replicas().scale_to_replicas
        if not per_row_none:
            # This replica's anchors only: the replicas' shares add up to the value.
            split = self._anchor_split(context, local)
            scale = _unchanged if split else scale
        value = checks.zero_unless_rows(
            y_pred, lambda: ops.cast(self.call(y_true, y_pred, **split), self.dtype)
        )
        if weights is None:
            return scale(value)
        if self.reduction in ("none", None):
            if per_row_none:
                # One entry per local row: the replicas' outputs add up to the global
                # batch's, so no division by the number of replicas.
                return value * local.weights
            return scale(value * local.weights)
        if self.reduction == "sum":
            return scale(value * ops.sum(weights))
        return scale(value * ops.mean(weights))

    def _per_sample(self, context, local, y_true, y_pred, weights):
        # This replica's anchors only (their values against the global batch).
        split = self._anchor_split(context, local)
        if split:
            weights = local.weights
        if y_pred.shape[0] == 0:  # statically empty: no rows, no values (as when dynamic)
            values = ops.zeros([0], self.dtype)
        else:
            values = ops.cast(self.call(y_true, y_pred, **split), self.dtype)
        if weights is not None:
            values = values * weights
        if self.reduction in (None, "none"):
            if context is not None and not split:
                return _backend.replicas().own_rows(context, values, local.rows)
            return values
        total = ops.sum(values)
        if split:
            # The replicas' partial sums add up to the global batch's sum and mean.
            if self.reduction == "sum":
                return total
            return ops.divide_no_nan(total, ops.cast(ops.shape(y_pred)[0], self.dtype))
        if self.reduction == "sum":
            # The per-replica sums add up (Keras' "sum"); a global sum is on every replica.
            return total if context is None else _backend.replicas().scale_to_replicas(total)
        # divide_no_nan: an empty batch (an uneven last batch split over replicas) gives 0.
        total = ops.divide_no_nan(total, ops.cast(ops.size(values), self.dtype))
        return _backend.replicas().scale_to_replicas(total)

    def get_config(self):
        return {**super().get_config(), "dtype": self.dtype, "global_batch": self.global_batch}


def _unchanged(value):
    return value


class _Local(collections.namedtuple("_Local", ["rows", "weights"])):
    """This replica's number of rows and its sample weights (None or scalar: unweighted or
    one weight for all), before the global batch is gathered."""


class BatchPenaltyLoss(LabelLoss):
    """Base class for batch-level losses (SVMax, OLE, triplet, ...): `call` returns one scalar.

    Without sample weights every reduction gives the batch's value. With them, as Keras 2 (and
    so tensorflow-addons) reduced a scalar loss broadcast against the weights:
    ``"sum_over_batch_size"`` scales the value by the weights' mean, ``"sum"`` by their sum,
    ``"none"`` returns ``value * weights`` (one entry per sample). A batch with no rows gives 0
    (nothing to penalize) with a zero gradient. ``global_batch`` and ``splits_anchors`` as in
    `LabelLoss`.
    """


class PerSampleLabelLoss(LabelLoss):
    """Base class for label-aware losses whose `call` returns one value per sample `[B]`.

    Like Keras' `Loss.__call__` (sample weights, ``"sum_over_batch_size"``/``"sum"``/``None``
    reductions) except that `y_true` reaches `call` uncast: Keras casts it to float32, which
    merges integer labels above 2**24.

    ``global_batch`` as in `LabelLoss`; with ``reduction="none"`` each replica gets the values
    of its own rows (computed on the global batch). Subclasses that set ``splits_anchors``
    accept ``call(y_true, y_pred, anchor_rows=(start, count))`` and then compute only this
    replica's rows against the global batch.
    """

    per_sample = True


class LossFunctionWrapper:
    """A loss class around a pure loss function, as Keras 3's `LossFunctionWrapper`: listed
    before a Keras loss base (``class TripletHardLoss(LossFunctionWrapper, BatchPenaltyLoss)``),
    it takes the function and its validated keyword arguments; `call` is
    ``fn(y_true, y_pred, **rows, **fn_kwargs)`` (``rows``: the base's ``anchor_rows`` or
    `CrossBatchMemory`'s ``normalizer_rows``), each keyword argument is an attribute of the
    loss, and `get_config` adds them to the base's config (a callable serialized by Keras)."""

    def __init__(self, fn, fn_kwargs, **kwargs):
        self._fn, self._fn_args = fn, tuple(fn_kwargs)
        for key, value in fn_kwargs.items():
            setattr(self, key, value)
        super().__init__(**kwargs)

    def call(self, y_true, y_pred, **rows):
        return self._fn(
            y_true, y_pred, **rows, **{key: getattr(self, key) for key in self._fn_args}
        )

    def get_config(self):
        config = super().get_config()
        for key in self._fn_args:
            value = getattr(self, key)
            config[key] = keras.saving.serialize_keras_object(value) if callable(value) else value
        return config


def deserialize_callable(value):
    """A callable argument as `LossFunctionWrapper.get_config` saved it (a Keras-serialized
    dict), or `value` itself."""
    if isinstance(value, dict):
        return keras.saving.deserialize_keras_object(value)
    return value
