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

import weakref

import keras
import tensorflow as tf

from tf_svmax import _backend, checks
from tf_svmax.losses._common import flat_labels
from tf_svmax.losses.batch_hard import BatchHardTripletLoss
from tf_svmax.losses.lifted import LiftedStructLoss
from tf_svmax.losses.pair_contrastive import AllPairsContrastiveLoss
from tf_svmax.losses.triplet import TripletHardLoss, TripletSemiHardLoss
from tf_svmax.ops import replicas
from tf_svmax.ops.ring import ring_slots

# The losses whose mining takes anchors against a separate reference set (`anchor_rows`), with
# a normalizer over the anchors (`normalizer_rows`, or per-anchor values).
SUPPORTED_LOSSES = (
    TripletSemiHardLoss,
    TripletHardLoss,
    LiftedStructLoss,
    BatchHardTripletLoss,
    AllPairsContrastiveLoss,
)


# The memory layers that `from_config` made and whose weights are not loaded yet, by name: while
# `keras.models.load_model` runs, the model's layers are made first, then its compiled loss
# (`CrossBatchMemory.from_config`, which takes its memory from here), then the weights are
# loaded (which removes the layer). Weak: a layer nobody holds is forgotten.
_AWAITING_WEIGHTS = weakref.WeakValueDictionary()


@keras.saving.register_keras_serializable(package="tf_svmax")
class CrossBatchMemoryBank(keras.layers.Layer):
    """The state of `CrossBatchMemory`: a FIFO ring buffer (`tf_svmax.ops.ring.ring_slots`,
    the rule of `NegativeQueue`) of `size` embeddings and their int64 labels, the number of
    rows filled, and the number of training steps seen.

    Put it in the model after the embeddings (it returns its input unchanged); it is built
    with their width. Its variables are non-trainable and, under `tf.distribute`, synchronized
    on read (each replica writes its own copy the same gathered rows: no communication; a
    checkpoint saves the first replica's copy and restores it to all).

    Args:
      size: The number of memory rows (M).
    """

    def __init__(self, size, **kwargs):
        if checks.check_bool(kwargs.pop("trainable", False), "trainable"):
            raise ValueError(
                checks.invalid("trainable", "False (the memory is written by the loss)", True)
            )
        super().__init__(trainable=False, **kwargs)
        self.size = checks.check_positive_int(size, "size")
        # Python-side, read when the loss is traced: the `training` flag of the latest forward
        # pass (None: never called in a model, as when the loss is called directly).
        self.last_training = None
        # A memory of a data-dependent number of rows cannot be compiled by XLA; this makes
        # Keras' jit_compile="auto" choose no XLA for a model that holds the layer.
        self.supports_jit = False

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
        self.labels = self._state("labels", (self.size,), "int64")
        self.pointer = self._state("pointer", (), "int64")
        self.filled = self._state("filled", (), "int64")
        self.step = self._state("step", (), "int64")
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

    def rows(self, count):
        """``(embeddings, labels)``: the first `count` (<= filled) memory rows, no gradient."""
        count = tf.cast(count, tf.int32)
        return (
            tf.stop_gradient(tf.convert_to_tensor(self.embeddings)[:count]),
            tf.stop_gradient(tf.convert_to_tensor(self.labels)[:count]),
        )

    def advance(self, embeddings, labels, write):
        """One training step: counts it and, where `write` (a bool tensor), writes the rows
        (the last `size` of them when there are more) over the oldest ones."""
        embeddings = tf.stop_gradient(tf.cast(embeddings, self.embeddings.dtype))
        labels = tf.cast(labels, tf.int64)
        n = tf.minimum(tf.shape(embeddings, out_type=tf.int64)[0], self.size)
        embeddings, labels = embeddings[-n:], labels[-n:]
        slots, pointer = ring_slots(self.pointer, n, self.size)
        old_embeddings, old_labels = (
            tf.convert_to_tensor(v) for v in (self.embeddings, self.labels)
        )
        new_embeddings = tf.tensor_scatter_nd_update(old_embeddings, slots[:, None], embeddings)
        new_labels = tf.tensor_scatter_nd_update(old_labels, slots[:, None], labels)
        filled = tf.minimum(tf.convert_to_tensor(self.filled) + n, self.size)
        return tf.group(
            self.embeddings.assign(tf.where(write, new_embeddings, old_embeddings)),
            self.labels.assign(tf.where(write, new_labels, old_labels)),
            self.pointer.assign(tf.where(write, pointer, tf.convert_to_tensor(self.pointer))),
            self.filled.assign(tf.where(write, filled, tf.convert_to_tensor(self.filled))),
            self.step.assign_add(tf.constant(1, tf.int64)),
        )

    def reset(self):
        """Empties the memory and restarts the step count (the warm-up starts again)."""
        if not self.built:
            return
        for variable in (self.embeddings, self.labels, self.pointer, self.filled, self.step):
            variable.assign(tf.zeros(variable.shape, variable.dtype))

    def get_config(self):
        return {**super().get_config(), "size": self.size}

    @classmethod
    def from_config(cls, config):
        layer = super().from_config(config)
        _AWAITING_WEIGHTS[layer.name] = layer  # for the compiled loss of a model being loaded
        return layer

    def load_own_variables(self, store):
        if _AWAITING_WEIGHTS.get(self.name) is self:
            del _AWAITING_WEIGHTS[self.name]  # restored: no later loss may take it
        super().load_own_variables(store)


def _restored_memory(name, size):
    """The memory layer `name` of `size` rows of a model being loaded (made by `from_config`,
    built, weights not yet loaded), taken out of the waiting list; None if there is none."""
    layer = _AWAITING_WEIGHTS.get(name)
    if layer is None or not layer.built or layer.size != size:
        return None
    del _AWAITING_WEIGHTS[name]
    return layer


def _check_loss(loss):
    if not isinstance(loss, SUPPORTED_LOSSES):
        names = ", ".join(cls.__name__ for cls in SUPPORTED_LOSSES)
        raise ValueError(
            checks.invalid(
                "loss",
                f"a loss whose mining takes a separate reference set (one of {names})",
                f"<{type(loss).__name__}>",
            )
        )
    if not loss.global_batch:
        raise ValueError(
            checks.invalid(
                "loss.global_batch",
                "True (the memory holds the global batch's rows, the same on every replica)",
                False,
            )
        )
    if isinstance(loss, BatchHardTripletLoss) and loss.reduction not in (
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
    # The losses' shared check: [N] or [N, 1] numeric labels, one per embedding row.
    labels = flat_labels(y_true, y_pred)
    if labels.dtype in (tf.bool, tf.uint64):
        raise TypeError(
            checks.invalid("y_true", _LABELS_EXPECTED, f"<tensor of dtype {labels.dtype.name}>")
        )
    # Float labels (Keras hands a MirroredStrategy's fit float64 copies of integer arrays) must
    # hold integers: the cast below would merge 0.1 and 0.9 into class 0 (the wrapped loss
    # alone compares floats exactly, so they would be two classes there).
    labels = checks.integer_floats(labels, "y_true", _LABELS_EXPECTED)
    # int64 holds every other integer dtype exactly (labels above 2**24 stay distinct), and
    # integer floats: exact for float64 below 2**53.
    return tf.cast(labels, tf.int64)


@keras.saving.register_keras_serializable(package="tf_svmax")
class CrossBatchMemory(keras.losses.Loss):
    """Cross-batch memory (XBM) around a ranking loss: the batch's anchors are mined against
    the batch plus the memory's embeddings and labels.

    Value. With the global batch ``B`` (b rows, anchors) and the memory's ``m`` filled rows
    ``M`` (references only, constants), the wrapped loss's terms are those of every anchor
    ``a in B`` against ``B ∪ M`` (``a`` excluded as its own positive), normalized over the
    batch's anchors only:

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

    Under `tf.distribute` (``loss.global_batch=True``, required) the memory holds the global
    batch's rows in replica order, identical on every replica; each replica computes its own
    anchors against the global batch and the memory and returns its share (the shares add up
    to the value above, and their gradients to the one-device gradient).

    Args:
      loss: One of `SUPPORTED_LOSSES` (an instance; its own arguments apply).
      memory_size: M, the number of memory rows (the paper: up to the dataset's size).
      start_step: Training steps before the memory is used (the paper: 1,000 on SOP). Start
        it once the embedding drifts slowly: on the glyph set, a memory started 50 or 150
        steps into a 300-step run collapsed semi-hard and lifted training (docs/xbm_glyphs.md).
      memory: Optional `CrossBatchMemoryBank` to use (e.g. the one of a model loaded from a
        ``.keras`` file); by default a new one of `memory_size` rows, ``xbm.memory``.
      name: The loss's name.

    The memory layer must be in the model (it is then built, checkpointed and saved with it);
    class labels of any integer dtype but uint64, or floats holding integers (compared as
    int64; a float label that is not an integer, such as 0.1, is refused). A model loaded from
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

    def __init__(self, loss, memory_size, *, start_step=0, memory=None, name="cross_batch_memory"):
        self.loss = _check_loss(loss)
        self.memory_size = checks.check_positive_int(memory_size, "memory_size")
        self.start_step = checks.check_non_negative_int(start_step, "start_step")
        if memory is None:
            memory = CrossBatchMemoryBank(self.memory_size)
        elif not isinstance(memory, CrossBatchMemoryBank) or memory.size != self.memory_size:
            raise ValueError(
                checks.invalid(
                    "memory",
                    f"a CrossBatchMemoryBank of size {self.memory_size} (memory_size)",
                    memory,
                )
            )
        self.memory = memory
        super().__init__(name=name, reduction="sum_over_batch_size", dtype=loss.dtype)

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
        if _backend.in_xla_context():
            raise ValueError(
                "CrossBatchMemory cannot run under XLA (jit_compile=True): the memory's filled "
                "rows are a data-dependent number. Compile the model with jit_compile=False."
            )
        with tf.name_scope(self.name):
            y_pred = tf.cast(tf.convert_to_tensor(y_pred), self.loss.dtype)
            labels = _integer_labels(y_true, y_pred)
            local_rows = tf.shape(y_pred)[0]
            context, (labels, y_pred) = replicas.gather_global_batch(True, labels, y_pred)
            memory = self._built_memory(y_pred)
            training = memory.last_training is not False
            batch = tf.shape(y_pred)[0]
            active = tf.convert_to_tensor(memory.step) >= self.start_step
            used = tf.where(active, tf.convert_to_tensor(memory.filled), 0) if training else 0
            memory_x, memory_y = memory.rows(used)
            reference_x = tf.concat([y_pred, tf.cast(memory_x, y_pred.dtype)], axis=0)
            reference_y = tf.concat([labels, memory_y], axis=0)
            anchors = (0, batch) if context is None else replicas.own_row_range(context, local_rows)
            value = tf.cast(self._value(reference_y, reference_x, anchors, batch), self.dtype)
            if not training:
                return value  # (under tf.distribute this replica's share, as in training)
            # Written after the value is computed (its reads come first).
            with tf.control_dependencies([value]):
                update = memory.advance(y_pred, labels, active)
            with tf.control_dependencies([update]):
                return tf.identity(value)

    def _built_memory(self, y_pred):
        memory = self.memory
        if not memory.built:
            if not tf.executing_eagerly():
                raise ValueError(
                    "CrossBatchMemory: its memory layer is not built. Put `xbm.memory` in the "
                    "model after the embeddings (keras.Sequential([..., xbm.memory])), so that "
                    "its state is built, checkpointed and saved with the model. A model loaded "
                    "from a .keras file holds its restored CrossBatchMemoryBank layer: compile "
                    "it with that layer, model.compile(optimizer=..., loss=CrossBatchMemory("
                    f"model.loss.loss, {self.memory_size}, start_step={self.start_step}, "
                    "memory=model.get_layer(<the layer's name>)))."
                )
            memory.build(y_pred.shape)
        if y_pred.shape[-1] is not None and y_pred.shape[-1] != memory.dim:
            raise ValueError(
                checks.invalid(
                    "y_pred",
                    f"embeddings of width {memory.dim} (the memory's)",
                    f"<tensor of shape {y_pred.shape}>",
                )
            )
        return memory

    def _value(self, labels, x, anchors, batch):
        """The anchors' share of the value, normalized over the batch's `batch` anchors."""
        if isinstance(self.loss, BatchHardTripletLoss):
            total = tf.reduce_sum(self.loss.call(labels, x, anchor_rows=anchors))
            if self.loss.reduction == "sum":
                return total
            return tf.math.divide_no_nan(total, tf.cast(batch, total.dtype))
        return self.loss.call(labels, x, anchor_rows=anchors, normalizer_rows=(0, batch))

    def get_config(self):
        return {
            "name": self.name,
            "loss": keras.saving.serialize_keras_object(self.loss),
            "memory_size": self.memory_size,
            "start_step": self.start_step,
            # How a loaded model's loss finds the model's restored memory layer (`from_config`).
            "memory_name": self.memory.name,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["loss"] = keras.saving.deserialize_keras_object(config["loss"])
        # Absent from configs written before it was recorded: a new memory layer.
        name = config.pop("memory_name", None)
        if name is not None:
            config["memory"] = _restored_memory(name, config["memory_size"])
            if config["memory"] is None:  # not loading a model: a new layer of that name
                config["memory"] = CrossBatchMemoryBank(config["memory_size"], name=name)
        return cls(**config)
