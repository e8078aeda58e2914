"""Cross-batch memory (XBM; Wang et al., CVPR 2020, "Cross-Batch Memory for Embedding Learning").

The batch's anchors are mined against the batch plus a FIFO memory of the embeddings and labels
of the last `memory_size` training rows (no gradient into the memory). The memory's state lives
in a non-trainable Keras layer, `CrossBatchMemoryBank`, that the user puts in the model (an
identity on the embeddings), so that it is built, checkpointed (`tf.train.Checkpoint`,
`ModelCheckpoint`, ``save_weights``) and saved in ``.keras`` files with the model::

    xbm = CrossBatchMemory(TripletSemiHardLoss(), memory_size=1024, start_step=100)
    model = keras.Sequential([backbone, xbm.memory])
    model.compile(optimizer="sgd", loss=xbm)

Compared with pytorch-metric-learning's `CrossBatchMemory`: the memory is written after the
loss is computed (the batch is never its own memory); not at all in evaluation (`evaluate`,
a test step: the memory layer records Keras' ``training`` flag of the forward pass); under
`tf.distribute` it holds the global batch's rows, identical on every replica; a warm-up
(``start_step``) and `reset`. Its references are its memory after the batch was written into
it, so our ``memory_size=M`` reads the rows its ``memory_size=M + b`` does (b the batch size:
equal values, tests/losses/test_pair_contrastive.py); but there the batch's own references are
the memory's detached copy, so a batch-batch pair passes gradient through its anchor only,
while here the batch's rows are references with their gradient (as the loss on the batch
alone: with an empty memory the value and gradient are the wrapped loss's).
"""

import keras
import numpy as np
from keras import ops

from tf_svmax import _backend, checks
from tf_svmax.losses import _state_layers
from tf_svmax.losses._base import Loss
from tf_svmax.losses._common import flat_labels, mean_of_parts
from tf_svmax.losses._registry import register
from tf_svmax.ops.ring import index_dtype, ring_slots, ring_write


@register
class CrossBatchMemoryBank(_state_layers.StateLayer):
    """The state of `CrossBatchMemory`: a FIFO ring buffer (`tf_svmax.ops.ring.ring_slots`,
    the rule of `NegativeQueue`) of `size` embeddings and their int64 labels, the number of
    rows filled, and the number of training steps seen.

    Put it in the model after the embeddings (it returns its input unchanged); it is built
    with their width. Its variables are non-trainable and, under `tf.distribute`, synchronized
    on read (each replica writes its own copy the same gathered rows: no communication; a
    checkpoint saves the first replica's copy and restores it to all). It compiles under XLA
    (there its loss reads all `size` rows, those not filled masked out) unless its
    `CrossBatchMemory` wraps a loss without ``accepts_ref_mask``, which sets
    ``supports_jit = False`` here (Keras then compiles the model without XLA).

    Args:
      size: The number of memory rows (M).
    """

    def __init__(self, size, **kwargs):
        super().__init__("the memory is written by the loss", **kwargs)
        self.size = checks.check_positive_int(size, "size")
        # Python-side, read when the loss is traced: the `training` flag of the latest forward
        # pass (None: never called in a model, as when the loss is called directly).
        self.last_training = None

    def build(self, input_shape):
        dim = input_shape[-1]
        if dim is None:
            raise ValueError(
                checks.invalid(
                    "input_shape", "embeddings of a known width", f"<shape {input_shape}>"
                )
            )
        self.dim = int(dim)
        self.embeddings = self._state("embeddings", (self.size, self.dim), self.variable_dtype)
        # int64, or int32 on JAX without 64-bit types (which has no int64; the loss refuses
        # labels outside int32 there, `_integer_labels`).
        self.labels = self._state("labels", (self.size,), index_dtype())
        self.pointer = self._state("pointer", (), index_dtype())
        self.filled = self._state("filled", (), index_dtype())
        self.step = self._state("step", (), index_dtype())
        self.built = True

    def _state(self, name, shape, dtype):
        # `add_weight` has no `synchronization`; ON_READ lets every replica assign its own copy.
        with keras.name_scope(self.name, caller=self):
            return keras.Variable(
                keras.initializers.Zeros(),
                shape=shape,
                dtype=dtype,
                trainable=False,
                synchronization="on_read",
                aggregation="only_first_replica",
                name=name,
            )

    def call(self, inputs, training=None):
        self.last_training = None if training is None else bool(training)
        return inputs

    def compute_output_shape(self, input_shape):
        return input_shape

    def rows(self, count=None):
        """``(embeddings, labels)``: the first `count` (<= filled; None: all `size`) memory
        rows, no gradient."""
        embeddings = ops.convert_to_tensor(self.embeddings)
        labels = ops.convert_to_tensor(self.labels)
        if count is not None:
            embeddings, labels = embeddings[:count], labels[:count]
        return ops.stop_gradient(embeddings), ops.stop_gradient(labels)

    def in_use(self, count):
        """Bool `[size]`: the first `count` rows (those `rows(count)` reads)."""
        return ops.arange(self.size, dtype=self.filled.dtype) < ops.cast(count, self.filled.dtype)

    def advance(self, embeddings, labels, write):
        """One training step: counts it and, where `write` (a bool scalar), writes the rows
        (the last `size` of them when there are more) over the oldest ones (`ring_write`: a
        scatter on the slots, right where the ring wraps on every backend)."""
        embeddings = ops.stop_gradient(ops.cast(embeddings, self.embeddings.dtype))
        labels = ops.cast(labels, self.labels.dtype)
        rows = ops.shape(embeddings)[0]
        n = min(rows, self.size) if isinstance(rows, int) else ops.minimum(rows, self.size)
        embeddings, labels = embeddings[rows - n :], labels[rows - n :]
        slots, pointer = ring_slots(ops.convert_to_tensor(self.pointer), n, self.size)
        old_embeddings, old_labels, old_pointer, old_filled = (
            ops.convert_to_tensor(v)
            for v in (self.embeddings, self.labels, self.pointer, self.filled)
        )
        filled = ops.minimum(old_filled + ops.cast(n, old_filled.dtype), self.size)
        self.embeddings.assign(
            ops.where(write, ring_write(old_embeddings, slots, embeddings), old_embeddings)
        )
        self.labels.assign(ops.where(write, ring_write(old_labels, slots, labels), old_labels))
        self.pointer.assign(ops.where(write, ops.cast(pointer, old_pointer.dtype), old_pointer))
        self.filled.assign(ops.where(write, filled, old_filled))
        self.step.assign(ops.convert_to_tensor(self.step) + 1)

    def reset(self):
        """Empties the memory and restarts the step count (the warm-up starts again)."""
        if not self.built:
            return
        for variable in (self.embeddings, self.labels, self.pointer, self.filled, self.step):
            variable.assign(ops.zeros(variable.shape, variable.dtype))

    def get_config(self):
        return {**super().get_config(), "size": self.size}


def _shape_only_trace(memory):
    """True inside Keras' symbolic build of the loss on JAX (`jax.eval_shape` of the loss in a
    stateless scope whose writes are dropped, before the first step): a trace in a stateless
    scope where the built memory's variables hold concrete values. In a jitted train step they
    are traced; a `jax.jit` of a direct call runs in no stateless scope."""
    if not _backend.STATE_ONLY_IN_MODEL or not memory.built:
        return False
    filled = ops.convert_to_tensor(memory.filled)
    return _backend.in_stateless_scope() and _backend.concrete_values(filled) is not None


def _summed_over(context):
    """`mean_of_parts`' ``reduce_count``: the sum over the replicas (None for one device)."""
    if context is None:
        return None
    return lambda count: _backend.sum_over_replicas(context, count)


def _check_loss(loss):
    """`loss` if it accepts reference rows (``accepts_reference_rows``, see
    `tf_svmax.losses.LabelLoss`: `call` and `reference_parts` take ``ref_labels``,
    ``ref_embeddings``, ``ref_offset``), with a global batch and one value."""
    if not isinstance(loss, keras.losses.Loss) or not getattr(
        loss, "accepts_reference_rows", False
    ):
        raise ValueError(
            checks.invalid(
                "loss",
                "a loss that accepts reference rows (accepts_reference_rows = True, e.g. "
                "TripletSemiHardLoss, TripletHardLoss, LiftedStructLoss, BatchHardTripletLoss, "
                "AllPairsContrastiveLoss)",
                f"<{type(loss).__name__}>",
            )
        )
    if not getattr(loss, "global_batch", True):
        raise ValueError(
            checks.invalid(
                "loss.global_batch",
                "True (the memory holds the global batch's rows, the same on every replica)",
                False,
            )
        )
    if getattr(loss, "per_sample", False) and loss.reduction not in (
        "sum",
        "sum_over_batch_size",
    ):
        raise ValueError(
            checks.invalid(
                "loss.reduction", "'sum' or 'sum_over_batch_size' (one value)", loss.reduction
            )
        )
    return loss


_LABELS_EXPECTED = "class labels of an integer dtype (not uint64) or finite floats holding integers"


def _integer_labels(y_true, y_pred):
    # The losses' shared check: [N] or [N, 1] numeric labels, one per embedding row (on JAX
    # without 64-bit types it refuses integer labels outside int32: never wrapped silently).
    # Returns (labels, integral): `integral` is None, or under XLA for float labels a traced
    # bool, False when one is not an integer.
    labels = flat_labels(y_true, y_pred)
    dtype = keras.backend.standardize_dtype(labels.dtype)
    if dtype in ("bool", "uint64"):
        raise TypeError(checks.invalid("y_true", _LABELS_EXPECTED, f"<tensor of dtype {dtype}>"))
    # Float labels (Keras hands a MirroredStrategy's fit float64 copies of integer arrays) must
    # hold integers: the cast below would merge 0.1 and 0.9 into class 0 (the wrapped loss
    # alone compares floats exactly, so they would be two classes there).
    labels = checks.integer_floats(labels, "y_true", _LABELS_EXPECTED)
    if _backend.jax_without_x64() and keras.backend.is_float_dtype(dtype):
        _check_int32_range(labels)
    integral = None
    if keras.backend.is_float_dtype(dtype) and _backend.in_xla_context():
        # Unchecked under XLA (no run-time error there): the caller's value is NaN unless true.
        integral = ops.all(ops.logical_and(ops.isfinite(labels), labels == ops.round(labels)))
    # int64 holds every other integer dtype exactly (labels above 2**24 stay distinct), and
    # integer floats: exact for float64 below 2**53 (JAX without 64-bit types: int32).
    return ops.cast(labels, index_dtype()), integral


def _check_int32_range(labels):
    # JAX without 64-bit types stores labels as int32: a float label outside it (float32 holds
    # 2.0**40 exactly) would wrap into another class. Checked where the values are known.
    values = _backend.concrete_values(labels)
    if values is None:  # inside a trace: the values are unknown
        return
    flat = values.astype(np.float64).reshape(-1)
    outside = np.flatnonzero((flat < -(2.0**31)) | (flat >= 2.0**31))
    if outside.size:
        raise ValueError(
            checks.invalid(
                "y_true",
                "class labels within int32 (JAX without 64-bit types stores them as int32; "
                "set jax.config.update('jax_enable_x64', True) for larger ones)",
                f"<tensor with {flat[outside[0]]!s} at index {int(outside[0])}>",
            )
        )


@register
class CrossBatchMemory(Loss):
    """Cross-batch memory (XBM) around a ranking loss: the batch's anchors are mined against
    the batch plus the memory's embeddings and labels.

    Value. With the global batch ``B`` (b rows, anchors) and the memory's ``m`` filled rows
    ``M`` (references only, constants), the wrapped loss's terms are those of every anchor
    ``a in B`` against ``B ∪ M`` (``a`` excluded as its own positive), normalized over the
    batch's anchors only: the loss's reference rows (``ref_labels``, ``ref_embeddings`` =
    ``B ∪ M``, ``ref_offset=0``). For the library's losses that accept them:

    * `TripletSemiHardLoss`: sum of hinge terms over ``(a, p)``, ``a in B``, ``p in B ∪ M``,
      ``p != a``, same label, divided by the number of such pairs;
    * `TripletHardLoss`, `BatchHardTripletLoss`: each anchor's hardest positive and negative
      in ``B ∪ M``, averaged over the b anchors (`BatchHardTripletLoss` ``reduction="sum"``:
      summed);
    * `LiftedStructLoss`: ``0.25 * sum max(J_ij, 0)^2`` over the ordered pairs ``(i, j)``,
      ``i in B``, ``j in B ∪ M``, divided by half their number; ``J_ij``'s negative sums run
      over ``B ∪ M`` for both ``i`` and ``j``;
    * `AllPairsContrastiveLoss` (the XBM paper's loss): the terms of the pairs ``(a, r)``,
      ``a in B``, ``r in B ∪ M``, ``r != a``, positive and negative ones each averaged over
      those of them above 0.

    With an empty memory each is exactly the wrapped loss on the batch. Gradients reach the
    batch's embeddings only.

    Steps. Each training call counts one step. Steps ``0 .. start_step - 1`` (XBM's warm-up,
    while the embeddings drift fast) give the plain batch loss and leave the memory empty;
    from ``start_step`` on the loss reads the memory and then writes the batch into it (the
    oldest rows first out; with b > M, the batch's last M rows). A call in evaluation (the
    memory layer's last forward pass had ``training=False``) gives the plain batch loss and
    changes nothing. `reset` empties the memory and restarts the warm-up.

    Backends: TensorFlow, JAX and PyTorch, under XLA too (``jit_compile=True`` on TensorFlow, in
    `fit` or a `tf.function` of a call; JAX's default jitted train step, while a `jax.jit` of a
    direct call is refused by name, its writes would leak the trace): under XLA the loss reads
    the whole bank, a fixed ``b + M`` reference rows, with ``ref_mask`` marking the filled ones
    (a data-dependent number; the others as if absent, see
    `tf_svmax.losses.triplet_semihard_loss`), elsewhere the filled rows only (the same value up
    to float rounding, fewer distances while the memory fills); the writes are scatters on
    explicit slots. In a JAX train step they reach the layer's variables because the model
    tracks the layer. A wrapped loss of one's own without ``accepts_ref_mask`` gets the filled
    rows sliced instead: then the memory layer opts the model out of `jit_compile` (on JAX an
    uncompiled train step) and a call under XLA is refused by name. The labels are stored as
    int64, as int32 on JAX without 64-bit types, where labels outside int32 are refused (never
    wrapped into another class) wherever the loss sees them; a jitted JAX `fit` step gets the
    labels from Keras already converted to int32 (wrapped: enable 64-bit types, or
    ``jit_compile=False``, for such labels).

    Under `tf.distribute` (``loss.global_batch=True``, required) the memory holds the global
    batch's rows in replica order, identical on every replica; each replica computes its own
    anchors against the global batch and the memory (the loss's `reference_parts`, with the
    replicas' normalizers summed) and returns its share (the shares add up to the value above,
    and their gradients to the one-device gradient).

    Args:
      loss: A loss that accepts reference rows (an instance, its own arguments applying,
        whose ``accepts_reference_rows`` is True: `call` and `reference_parts` take
        ``ref_labels``, ``ref_embeddings``, ``ref_offset``, see `tf_svmax.losses.LabelLoss`),
        such as those above, with ``global_batch=True`` and, for a per-sample loss, reduction
        ``"sum"`` or ``"sum_over_batch_size"``. With ``accepts_ref_mask`` (the five above)
        it also takes ``ref_mask`` and the memory runs under XLA (see Backends).
      memory_size: M, the number of memory rows (the paper: up to the dataset's size).
      start_step: Training steps before the memory is used (the paper: 1,000 on SOP). Start
        it once the embedding drifts slowly: on the glyph set, a memory started 50 or 150
        steps into a 300-step run collapsed semi-hard and lifted training (docs/xbm_glyphs.md).
      memory: Optional `CrossBatchMemoryBank` to use (e.g. the one of a model loaded from a
        ``.keras`` file); by default a new one of `memory_size` rows, ``xbm.memory``.
      name: The loss's name.

    The memory layer must be in the model (it is then built, checkpointed and saved with it);
    class labels of any integer dtype but uint64, or floats holding integers (compared as
    int64; a float label that is not an integer, such as 0.1, is refused, and gives NaN under
    XLA, where nothing can be refused; an empty batch gives 0). A model loaded from
    a ``.keras`` file trains on: its compiled loss takes the model's restored memory layer
    (found by the name its config records). A file written before the config recorded it
    needs a recompile with the restored layer:
    ``CrossBatchMemory(loss, M, start_step=S, memory=model.get_layer(name))``.

    Example:
      >>> xbm = CrossBatchMemory(TripletSemiHardLoss(), memory_size=64)
      >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), xbm.memory])
      >>> model.compile(optimizer="sgd", loss=xbm)
      >>> model.fit(np.ones((8, 3)), np.arange(8) % 2, batch_size=4, verbose=0)
      >>> int(xbm.memory.filled.numpy())  # 8
    """

    # `get_config` records the memory layer's name, by which a loaded model's loss finds it.
    state_layer_arguments = {"memory": "memory_name"}

    def __init__(self, loss, memory_size, *, start_step=0, memory=None, name="cross_batch_memory"):
        loss = _check_loss(loss)
        memory_size = checks.check_positive_int(memory_size, "memory_size")
        fn_kwargs = dict(
            loss=loss,
            memory_size=memory_size,
            start_step=checks.check_non_negative_int(start_step, "start_step"),
        )
        if memory is None:
            memory = CrossBatchMemoryBank(memory_size)
        elif not isinstance(memory, CrossBatchMemoryBank) or memory.size != memory_size:
            raise ValueError(
                checks.invalid(
                    "memory",
                    f"a CrossBatchMemoryBank of size {memory_size} (memory_size)",
                    memory,
                )
            )
        self.memory = memory
        # Under XLA a loss that takes `ref_mask` reads the whole bank (a fixed shape); another
        # one can only read the filled rows, a data-dependent number XLA cannot compile, so the
        # layer then makes Keras compile a model that holds it without XLA (jit_compile "auto"
        # or True; on JAX an uncompiled train step).
        self._masked = bool(getattr(loss, "accepts_ref_mask", False))
        memory.supports_jit = self._masked
        # Its own `__call__`; `Loss` saves the arguments, the wrapped loss and the layer's name.
        super().__init__(
            fn_kwargs=fn_kwargs, name=name, reduction="sum_over_batch_size", dtype=loss.dtype
        )

    def reset(self):
        """Empties the memory and restarts the warm-up (`CrossBatchMemoryBank.reset`)."""
        self.memory.reset()

    def __call__(self, y_true, y_pred, sample_weight=None):
        if sample_weight is not None:
            raise ValueError(
                checks.invalid(
                    "sample_weight", "None (the memory's rows have no weights)", "<weights>"
                )
            )
        # First: a jitted step outside the model reads the memory's concrete values, as
        # `_shape_only_trace` does.
        self._check_memory_in_model(y_pred)
        xla = _backend.in_xla_context()
        if xla and _shape_only_trace(self.memory):
            # Keras' symbolic build on JAX (`jax.eval_shape` of the loss, before the first
            # step, state discarded) needs only the value's shape and dtype: a scalar.
            return ops.cast(ops.sum(ops.convert_to_tensor(y_pred)) * 0, self.dtype)
        if xla:
            if not self._masked:
                raise ValueError(
                    "CrossBatchMemory cannot run under XLA (jit_compile=True, or any jax.jit "
                    f"trace) around {type(self.loss).__name__}, a loss without "
                    "accepts_ref_mask: its filled rows are a data-dependent number. Compile the "
                    "model with jit_compile=False (the default for a model that holds the "
                    "memory layer of such a loss), or give the loss a ref_mask argument."
                )
            if (
                _backend.STATE_ONLY_IN_MODEL
                and not _backend.in_stateless_scope()
                and self.memory.last_training is not False
            ):
                raise ValueError(
                    "CrossBatchMemory under jax.jit outside a Keras train step: the memory's "
                    "writes would leak the trace (JAX keeps a variable's new value only through "
                    "the state a train step returns). Train with model.fit (jitted by default, "
                    "the memory layer in the model), or call the loss eagerly."
                )
        with keras.name_scope(self.name):
            # `[B, D]`, named here: another rank would fail raw where it meets the memory's rows.
            y_pred, _ = checks.float_matrix(y_pred, "y_pred", min_rows=0)
            y_pred = ops.cast(y_pred, self.loss.dtype)
            labels, integral = _integer_labels(y_true, y_pred)
            local_rows = ops.shape(y_pred)[0]
            context, (labels, y_pred) = _backend.gather_global_batch(True, labels, y_pred)
            if checks.static_shape(y_pred)[0] == 0:
                # No rows: nothing to mine or write, and no step counted; the wrapped losses'
                # empty-batch value, a zero connected to `y_pred` (a zero gradient, not None).
                return ops.cast(ops.sum(y_pred) * 0.0, self.dtype)
            memory = self._built_memory(y_pred)
            training = memory.last_training is not False
            batch = ops.shape(y_pred)[0]
            active = ops.convert_to_tensor(memory.step) >= self.start_step
            used, masked = 0, {}
            if training:
                used = ops.where(active, ops.convert_to_tensor(memory.filled), 0)
            if training and xla:
                # Under XLA (a loss that takes `ref_mask`, above) the whole bank, its rows past
                # the filled ones masked out: fixed shapes. Elsewhere the filled rows are sliced
                # (fewer distances while the memory fills, none in the warm-up).
                memory_x, memory_y = memory.rows()
                in_batch = ops.ones_like(labels, dtype="bool")
                masked["ref_mask"] = ops.concatenate([in_batch, memory.in_use(used)], axis=0)
            else:
                known = _backend.concrete_values(used) if training else None
                if known is not None:
                    # Known here (eagerly; no jit, above): a Python count slices.
                    used = int(known)
                memory_x, memory_y = memory.rows(used)
            reference_x = ops.concatenate([y_pred, ops.cast(memory_x, y_pred.dtype)], axis=0)
            reference_y = ops.concatenate([labels, ops.cast(memory_y, labels.dtype)], axis=0)
            if context is None:
                start, count = 0, batch
            else:
                start, count = _backend.own_row_range(context, local_rows)
            # This replica's anchors against the batch and the memory, normalized over the
            # batch's anchors: the replicas' counts add up.
            parts = self.loss.reference_parts(
                labels[start : start + count],
                y_pred[start : start + count],
                ref_labels=reference_y,
                ref_embeddings=reference_x,
                ref_offset=start,
                **masked,
            )
            value = ops.cast(mean_of_parts(parts, _summed_over(context)), self.dtype)
            if integral is not None:
                value = ops.where(integral, value, ops.full_like(value, np.nan))
            if training:
                # Written after the value is computed (its reads and the label checks first).
                _backend.after(value, lambda: memory.advance(y_pred, labels, active))
            return value

    def _check_memory_in_model(self, y_pred):
        """Refuses a training step (a model's or one's own: `_backend.in_a_step`) whose model does
        not hold this memory layer: unbuilt there on every backend (a model builds its layers
        before its loss runs), and on JAX also a built one that the step does not carry out
        (its writes would be dropped at every step: the memory would never fill)."""
        memory = self.memory
        if memory.built:
            outside = _backend.dropped_by_step(memory.filled)
        else:
            outside = _backend.in_a_step(y_pred)
        if outside:
            raise ValueError(
                f"CrossBatchMemory: its memory layer, the CrossBatchMemoryBank "
                f"'{memory.name}', is not in the model being trained, so its rows would never "
                "be read, written or saved. Put `xbm.memory` in the model after the embeddings "
                "(keras.Sequential([..., xbm.memory])), so that its state is built, "
                "checkpointed and saved with the model. A model loaded from a .keras file holds "
                "its restored CrossBatchMemoryBank layer: compile it with that layer, "
                "model.compile(optimizer=..., loss=CrossBatchMemory("
                f"model.loss.loss, {self.memory_size}, start_step={self.start_step}, "
                "memory=model.get_layer(<the layer's name>)))."
            )

    def _built_memory(self, y_pred):
        memory = self.memory
        if not memory.built:  # a direct call (`_check_memory_in_model`): built here
            memory.build(y_pred.shape)
        checks.same_width(y_pred, memory.dim, "y_pred", "the memory")
        return memory

    @property
    def state_layers(self):
        """The layers holding this loss' state, which belong in the model (after its outputs,
        e.g. ``keras.Sequential([..., *loss.state_layers])``): its `CrossBatchMemoryBank`."""
        return [self.memory]

    def get_config(self):
        # No `reduction`: not an argument of the memory (its value is the wrapped loss').
        config = super().get_config()
        del config["reduction"]
        return config

    @classmethod
    def state_layer_from_config(cls, argument, name, config):
        size = config["memory_size"]
        restored = _state_layers.restored_layer(
            name,
            lambda layer: (
                isinstance(layer, CrossBatchMemoryBank) and layer.built and layer.size == size
            ),
        )
        return restored or CrossBatchMemoryBank(size, name=name)  # not loading a model
