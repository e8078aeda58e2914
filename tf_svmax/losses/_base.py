"""The library's loss base classes: `Loss`, which owns a loss' function, its arguments, its
declared capabilities and its config (nested losses, functions, state layers and renamed
arguments included), and `LabelLoss` on it (labels passed uncast, the global batch under
`tf.distribute`; one scalar per batch, `BatchPenaltyLoss`, or one value per sample,
`PerSampleLabelLoss`)."""

import collections
import functools

import keras
from keras import ops

# `_backend`'s replicas: the `tf.distribute` global-batch gather on TensorFlow, a single replica
# that gathers and scales nothing elsewhere; `_backend.scale_loss_for_distribution` the scaling.
from tf_svmax import _backend, checks
from tf_svmax.losses import _common
from tf_svmax.losses._registry import register


def _batch_weights(sample_weight, y_pred, dtype):
    """`sample_weight` as a scalar or one weight per row of `y_pred` (`[B]` or `[B, 1]`);
    another length is refused (its mean would silently weight some other batch)."""
    weights = ops.cast(ops.convert_to_tensor(sample_weight), dtype)
    if checks.static_shape(weights) == ():
        return weights
    return checks.same_rows(ops.reshape(weights, [-1]), y_pred, "sample_weight", "y_pred", "weight")


BATCH_REDUCTIONS = ("sum_over_batch_size", "sum", "none", None)
PER_SAMPLE_REDUCTIONS = ("sum_over_batch_size", "sum", None, "none")


@register(base=True)
class Loss(keras.losses.Loss):
    """Base class of the library's losses: a Keras loss that owns its function, its arguments
    and its config, as Keras 3's `LossFunctionWrapper` does for Keras' own losses.

    ``Loss(fn, fn_kwargs)``: `call` is ``fn(y_true, y_pred, **references, **fn_kwargs)``
    (``references``: the reference rows of a loss that accepts them, see `LabelLoss`). A loss
    that writes its own `call` passes no `fn`. Each of ``fn_kwargs`` (the loss' validated
    arguments, ``{name: value}``) is an attribute of the loss, and `get_config` saves them
    beside Keras' ``name`` and ``reduction``: a loss or a function (or a list of them)
    serialized by Keras, so that a loss holding other losses (`RegularizedLoss`, `XMLLoss`,
    `CrossBatchMemory`) round-trips with them. A layer holding the loss' state is saved by its
    name instead (``state_layer_arguments``: `CenterLoss`, `SpreadOutLoss`,
    `CrossBatchMemory`), and a loss loaded with a model gets the model's restored layer back.
    `from_config` deserializes them and reads ``renamed_arguments``; a subclass writes neither.

    ``parts_fn`` (a batch-level loss over reference rows): ``parts_fn(y_true, y_pred,
    **references, **fn_kwargs)`` returns ``(parts, dtype)``, the value's `LossPart` s
    (`reference_parts`).

    Reduced as Keras reduces (`keras.losses.Loss.__call__`); `LabelLoss` passes labels uncast
    and evaluates the global batch under `tf.distribute`. The class attributes below are the
    loss' declared capabilities (see `LabelLoss`), read by `CrossBatchMemory`, `XMLLoss`, the
    replica split and the retrieval trainer's records.
    """

    # Whether `call` takes reference rows (``ref_labels``, ``ref_embeddings``, ``ref_offset``)
    # and `reference_parts` gives its value's parts for them (`CrossBatchMemory` wraps such
    # losses).
    accepts_reference_rows = False
    # Whether `call` and `reference_parts` also take ``ref_mask`` (the reference rows in use):
    # `CrossBatchMemory` then passes its whole fixed-size bank, which compiles under XLA.
    accepts_ref_mask = False
    # Whether the replica split applies (see `LabelLoss`): set by losses that accept reference
    # rows and by batch-level ones whose `reference_parts` splits something else (pairs,
    # proxies).
    splits_anchors = False
    # K when the loss' batches are P classes x K consecutive rows (the P x K pair losses), else
    # None: `XMLLoss` then takes its class halves as static blocks of rows under XLA.
    class_block_rows = None
    # Whether the loss ranks embeddings by their class labels (``y_true`` labels, ``y_pred``
    # embeddings ``[B, D]``): `XMLLoss` wraps such losses. True for `LabelLoss`; False for the
    # regularizers (SVMax, OLE, spread-out: penalties on the embeddings), for losses whose
    # ``y_pred`` is no embedding (similarity matrices, proxy similarities, distances) and for
    # the wrappers.
    ranks_embeddings = False

    # Keyword arguments the loss spelled otherwise before, ``{old: (new, {old value: new
    # value})}``: the constructor refuses the old keyword with a TypeError naming the new one and
    # the value to pass (`refuses_renamed` does so for a function), and `from_config` reads a
    # config saved with the old key as the new one (a `.keras` file saved before the rename loads
    # as the same loss; e.g. `BatchHardTripletLoss`' ``metric``, now ``distance``).
    renamed_arguments = {}

    # The arguments that take a layer holding the loss' state (its `state_layers`, which belong
    # in the model), ``{argument: config key}``: `get_config` saves the layer's name under the
    # key (its state is saved with the model), and `from_config` passes the layer that
    # `state_layer_from_config` finds for that name (the loaded model's restored layer).
    state_layer_arguments = {}

    def __init__(
        self,
        fn=None,
        fn_kwargs=None,
        *,
        parts_fn=None,
        name=None,
        reduction="sum_over_batch_size",
        dtype=None,
        **kwargs,
    ):
        _refuse_renamed(type(self).__name__, self.renamed_arguments, kwargs)
        fn_kwargs = dict(fn_kwargs or {})
        self._fn, self._fn_args, self._parts_fn = fn, tuple(fn_kwargs), parts_fn
        for key, value in fn_kwargs.items():
            setattr(self, key, value)
        # Keras' `Loss` refuses any other keyword argument by name.
        super().__init__(name=name, reduction=reduction, dtype=dtype, **kwargs)

    def _fn_kwargs(self):
        return {key: getattr(self, key) for key in self._fn_args}

    def call(self, y_true, y_pred, **references):
        if self._fn is None:
            return super().call(y_true, y_pred)  # Keras: a subclass must define `call`
        return self._fn(y_true, y_pred, **references, **self._fn_kwargs())

    def reference_parts(
        self, y_true, y_pred, *, ref_labels, ref_embeddings, ref_offset=0, ref_mask=None
    ):
        """The value's parts (a list of `LossPart`) for the anchors `y_true`, `y_pred`
        against the reference rows: ``sum(total / count)`` is the value, and the totals and
        counts of disjoint anchor sets add up. From ``parts_fn``; None without one."""
        if self._parts_fn is None:
            return None
        references = _references(ref_labels, ref_embeddings, ref_offset, ref_mask)
        parts, _ = self._parts_fn(y_true, y_pred, **references, **self._fn_kwargs())
        return parts

    def get_config(self):
        config = super().get_config()
        for key in self._fn_args:
            config[key] = _serialized(getattr(self, key))
        for argument, key in self.state_layer_arguments.items():
            layer = getattr(self, argument)
            if layer is not None:
                config[key] = layer.name
        return config

    @classmethod
    def from_config(cls, config):
        config = _renamed_config(cls.renamed_arguments, config)
        config = {key: _deserialized(value) for key, value in config.items()}
        for argument, key in cls.state_layer_arguments.items():
            # Absent from configs written before the name was recorded: a new layer.
            name = config.pop(key, None)
            if name is not None:
                config[argument] = cls.state_layer_from_config(argument, name, config)
        return cls(**config)

    @classmethod
    def state_layer_from_config(cls, argument, name, config):
        """The layer to pass as `argument` (one of ``state_layer_arguments``) to a loss made
        from `config`, whose layer was named `name`: while a model loads, the model's restored
        layer of that name (`tf_svmax.losses._state_layers.restored_layer`), so that the loss
        and the model share it as they did; otherwise a new layer of that name (or None for
        the constructor's default)."""
        raise NotImplementedError(
            f"{cls.__name__} declares state_layer_arguments and defines no state_layer_from_config."
        )


@register(base=True)
class LabelLoss(Loss):
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
    own anchors against the global batch, its reference rows (the same value and gradients,
    1/N of the work): `call` with them for a per-sample loss, `reference_parts` for a
    batch-level one, the counts summed over the replicas.

    Reference rows, the one seam of the replica split and of `CrossBatchMemory`: a loss with
    ``accepts_reference_rows = True`` takes ``call(y_true, y_pred, ref_labels=...,
    ref_embeddings=..., ref_offset=...)`` (its anchors mined against the references, which hold
    the anchors at rows ``ref_offset ..``; see e.g. `tf_svmax.losses.triplet_semihard_loss`),
    and its `reference_parts` with the same arguments returns the value's parts
    (`tf_svmax.losses.LossPart`: sums and their normalizers over the anchors), whose totals
    and counts add up over disjoint anchor sets. A batch-level loss whose split is not over
    reference rows (pairs, proxies) may define `reference_parts` alone, with
    ``splits_anchors``: the replica split uses it, `CrossBatchMemory` does not. A loss with
    ``accepts_ref_mask = True`` also takes ``ref_mask`` there (a bool `[R]`: the reference rows
    in use, the others as if absent, as references and, at the anchors' own rows, as anchors;
    see `tf_svmax.losses.triplet_semihard_loss`).

    The loss' declared capabilities are `Loss`' class attributes, read by `CrossBatchMemory`
    (``accepts_reference_rows``, ``accepts_ref_mask``), `XMLLoss` (``ranks_embeddings``,
    ``accepts_ref_mask``, ``class_block_rows``), the replica split (``splits_anchors``) and the
    retrieval trainer's records, which read them from the source before Keras is imported
    (`tf_svmax.losses._declared`: a capability is a literal in the class body). The function,
    its arguments and the config are `Loss`' too: ``BatchPenaltyLoss(fn, fn_kwargs,
    parts_fn=..., name=..., global_batch=...)``.
    """

    # One value per sample (`call` returns `[B]`) rather than one scalar per batch.
    per_sample = False
    # Labels and embeddings: `XMLLoss` wraps the loss unless a subclass says otherwise.
    ranks_embeddings = True

    def __init__(
        self,
        fn=None,
        fn_kwargs=None,
        *,
        reduction="sum_over_batch_size",
        global_batch=True,
        **kwargs,
    ):
        # `kwargs`: `Loss`' (``parts_fn``, ``name``, ``dtype``, renamed arguments).
        self.global_batch = checks.check_bool(global_batch, "global_batch")
        reductions = PER_SAMPLE_REDUCTIONS if self.per_sample else BATCH_REDUCTIONS
        if reduction not in reductions:
            kind = "" if self.per_sample else " (a batch-level loss)"
            raise ValueError(
                checks.invalid("reduction", f"one of {list(reductions)}{kind}", reduction)
            )
        super().__init__(fn, fn_kwargs, reduction=reduction, **kwargs)

    def __call__(self, y_true, y_pred, sample_weight=None):
        with keras.name_scope(self.name):
            y_pred = ops.cast(ops.convert_to_tensor(y_pred), self.dtype)
            weights = None
            if sample_weight is not None:
                weights = _batch_weights(sample_weight, y_pred, self.dtype)
            local = _Local(ops.shape(y_pred)[0], weights)
            context, (y_true, y_pred, weights) = _backend.gather_global_batch(
                self.global_batch, y_true, y_pred, weights
            )
            reduce = self._per_sample if self.per_sample else self._batch_level
            return reduce(context, local, y_true, y_pred, weights)

    def _own_references(self, context, local, y_true, y_pred):
        """``(own y_true, own y_pred, references)``: this replica's anchors and, as keyword
        arguments, the global batch they sit in (None when not split)."""
        if context is None or not self.splits_anchors:
            return None
        start, count = _backend.own_row_range(context, local.rows)
        references = dict(ref_labels=y_true, ref_embeddings=y_pred, ref_offset=start)
        own_y = None if y_true is None else y_true[start : start + count]
        return own_y, y_pred[start : start + count], references

    def _batch_level(self, context, local, y_true, y_pred, weights):
        per_row_none = self.reduction in ("none", None) and (
            local.weights is not None and checks.static_shape(local.weights) != ()
        )
        own, scale = None, _backend.scale_loss_for_distribution
        if not per_row_none:
            # This replica's anchors only: the replicas' shares add up to the value.
            own = self._own_references(context, local, y_true, y_pred)
            scale = _unchanged if own is not None else scale

        if own is None:
            value = checks.zero_unless_rows(
                y_pred, lambda: ops.cast(self.call(y_true, y_pred), self.dtype)
            )
        else:
            # Not inside `zero_unless_rows`' `tf.cond`: the counts' all-reduce is a
            # synchronization point, which MirroredStrategy refuses in a cond branch. A global
            # batch of no rows is a set of no anchors against no references, whose parts are 0.
            own_y, own_x, references = own
            parts = self.reference_parts(own_y, own_x, **references)
            if parts is None:
                raise TypeError(
                    f"{type(self).__name__} sets splits_anchors but defines no "
                    "reference_parts: a batch-level loss splits over replicas through it."
                )
            # The normalizers of the whole batch: the replicas' counts add up.
            total = _common.mean_of_parts(
                parts, lambda count: _backend.sum_over_replicas(context, count)
            )
            value = ops.cast(total, self.dtype)
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
        own = self._own_references(context, local, y_true, y_pred)
        if own is not None:
            weights = local.weights
        if y_pred.shape[0] == 0:  # statically empty: no rows, no values (as when dynamic)
            values = ops.zeros([0], self.dtype)
        elif own is None:
            values = ops.cast(self.call(y_true, y_pred), self.dtype)
        else:
            own_y, own_x, references = own
            values = ops.cast(self.call(own_y, own_x, **references), self.dtype)
        if weights is not None:
            values = values * weights
        if self.reduction in (None, "none"):
            if context is not None and own is None:
                return _backend.own_rows(context, values, local.rows)
            return values
        total = ops.sum(values)
        if own is not None:
            # The replicas' partial sums add up to the global batch's sum and mean.
            if self.reduction == "sum":
                return total
            return ops.divide_no_nan(total, ops.cast(ops.shape(y_pred)[0], self.dtype))
        if self.reduction == "sum":
            # The per-replica sums add up (Keras' "sum"); a global sum is on every replica.
            return total if context is None else _backend.scale_loss_for_distribution(total)
        # divide_no_nan: an empty batch (an uneven last batch split over replicas) gives 0.
        total = ops.divide_no_nan(total, ops.cast(ops.size(values), self.dtype))
        return _backend.scale_loss_for_distribution(total)

    def get_config(self):
        return {**super().get_config(), "dtype": self.dtype, "global_batch": self.global_batch}


def _unchanged(value):
    return value


class _Local(collections.namedtuple("_Local", ["rows", "weights"])):
    """This replica's number of rows and its sample weights (None or scalar: unweighted or
    one weight for all), before the global batch is gathered."""


@register(base=True)
class BatchPenaltyLoss(LabelLoss):
    """Base class for batch-level losses (SVMax, OLE, triplet, ...): `call` returns one scalar.

    Without sample weights every reduction gives the batch's value. With them, as Keras 2 (and
    so tensorflow-addons) reduced a scalar loss broadcast against the weights:
    ``"sum_over_batch_size"`` scales the value by the weights' mean, ``"sum"`` by their sum,
    ``"none"`` returns ``value * weights`` (one entry per sample). A batch with no rows gives 0
    (nothing to penalize) with a zero gradient. ``global_batch`` and ``splits_anchors`` as in
    `LabelLoss`.
    """


@register(base=True)
class PerSampleLabelLoss(LabelLoss):
    """Base class for label-aware losses whose `call` returns one value per sample `[B]`.

    Like Keras' `Loss.__call__` (sample weights, ``"sum_over_batch_size"``/``"sum"``/``None``
    reductions) except that `y_true` reaches `call` uncast: Keras casts it to float32, which
    merges integer labels above 2**24.

    ``global_batch`` as in `LabelLoss`; with ``reduction="none"`` each replica gets the values
    of its own rows (computed on the global batch). Subclasses that set ``splits_anchors``
    and ``accepts_reference_rows`` compute only this replica's rows against the global batch
    (``call`` with their reference rows), and their `reference_parts` is the values' sum over
    the anchors and, for ``"sum_over_batch_size"``, their number (with ``ref_mask``, of those
    in use: a dropped anchor is not counted).
    """

    per_sample = True

    def reference_parts(
        self, y_true, y_pred, *, ref_labels, ref_embeddings, ref_offset=0, ref_mask=None
    ):
        if self._parts_fn is not None or not self.accepts_reference_rows:
            return super().reference_parts(
                y_true,
                y_pred,
                ref_labels=ref_labels,
                ref_embeddings=ref_embeddings,
                ref_offset=ref_offset,
                ref_mask=ref_mask,
            )
        if self.reduction not in ("sum", "sum_over_batch_size"):
            raise ValueError(
                checks.invalid(
                    "reduction", "'sum' or 'sum_over_batch_size' (one value)", self.reduction
                )
            )
        references = _references(ref_labels, ref_embeddings, ref_offset, ref_mask)
        values = self.call(y_true, y_pred, **references)
        count = None
        if self.reduction != "sum":
            # The anchors in use: a dropped one (its own row outside `ref_mask`) is not counted.
            anchors = (ref_offset, ops.shape(values)[0])
            mask = None if ref_mask is None else ops.convert_to_tensor(ref_mask)
            count = _common.anchor_count(values, anchors, mask)
        return [_common.LossPart(ops.sum(values), count)]


def _serialized(value):
    """A loss argument as `Loss.get_config` saves it: a loss, layer or function (anything
    callable) serialized by Keras, each item of a list or tuple so."""
    if isinstance(value, (list, tuple)):
        return [_serialized(item) for item in value]
    return keras.saving.serialize_keras_object(value) if callable(value) else value


def _deserialized(value):
    """A config value as `Loss.from_config` reads it: what `_serialized` made of a loss, layer
    or function (a Keras-serialized dict) deserialized, in lists too; anything else as it is."""
    if isinstance(value, list):
        return [_deserialized(item) for item in value]
    if isinstance(value, dict) and "class_name" in value:
        return keras.saving.deserialize_keras_object(value)
    return value


def _references(ref_labels, ref_embeddings, ref_offset, ref_mask):
    """The reference rows as keyword arguments; ``ref_mask`` only when given (a loss of one's
    own that `CrossBatchMemory` wraps without ``accepts_ref_mask`` need not take it)."""
    references = dict(ref_labels=ref_labels, ref_embeddings=ref_embeddings, ref_offset=ref_offset)
    if ref_mask is not None:
        references["ref_mask"] = ref_mask
    return references


def refuses_renamed(renamed):
    """Decorates a loss function whose keyword arguments `renamed` (as
    `Loss.renamed_arguments`) were spelled otherwise before: an old keyword is
    refused with a TypeError naming the new one and the value to pass for it."""

    def decorate(fn):
        @functools.wraps(fn)
        def loss_function(*args, **kwargs):
            _refuse_renamed(fn.__name__, renamed, kwargs)
            return fn(*args, **kwargs)

        return loss_function

    return decorate


def _new_value(values, value):
    """The new spelling of `value` in `values` (old -> new; a bool matches only a bool), or
    None."""
    for old, new in values.items():
        if type(old) is type(value) and old == value:
            return new
    return None


def _refuse_renamed(owner, renamed, kwargs):
    """A TypeError for the first keyword of `kwargs` that `renamed` lists (`owner` its loss)."""
    for old, (new, values) in renamed.items():
        if old not in kwargs:
            continue
        value = _new_value(values, kwargs[old])
        if value is None:
            spellings = ", ".join(f"{old}={o!r} -> {new}={n!r}" for o, n in values.items())
            hint = f"the old values map as {spellings}"
        else:
            hint = f"pass {new}={value!r} for {old}={kwargs[old]!r}"
        raise TypeError(f"{owner}: the argument `{old}` is now `{new}` ({hint}).")


def _renamed_config(renamed, config):
    """`config` with each old key of `renamed` (a config saved before the rename) replaced by
    its new key and value."""
    config = dict(config)
    for old, (new, values) in renamed.items():
        if old not in config:
            continue
        value = config.pop(old)
        if new in config:
            raise ValueError(
                f"A saved config has both `{old}` and `{new}` (the new name of `{old}`): "
                f"expected one. Received: {old}={value!r}, {new}={config[new]!r}"
            )
        config[new] = _new_value(values, value)
        if config[new] is None:
            raise ValueError(checks.invalid(old, f"one of {list(values)} (saved)", value))
    return config
