"""Center loss with moving class centers (Wen et al. 2016), as in the two-head baseline.

Semantics of ahmdtaha/softmax_triplet_loss (`ranking/center_loss.py`; dissertation `001`,
Sec. 5.3, Eq. 5.2): ``lambda_ * 0.5 * sum_i ||x_i - c_{y_i}||^2`` (a sum over the batch), centers
initialized from N(0, 1), not trained by the optimizer but moved every training step by
``c_j <- c_j - alpha * sum_{i: y_i = j} (c_j - x_i) / (1 + n_j)`` from the pre-update centers.

Where the update runs, per Keras backend:

* TensorFlow and PyTorch: in the backward pass (it is part of the gradient computation), so it
  happens exactly in training steps and never in `evaluate`/`predict`, which compute no gradient.
* JAX: a train step is a pure function whose backward pass cannot write a variable, and it
  carries out only the variables the model tracks. The centers live in a `ClassCenters` layer of
  the model, which records Keras' ``training`` flag of the forward pass; the loss moves them in
  its forward computation when that flag is True (a training step), never otherwise.
"""

import keras
import numpy as np
from keras import ops

from tf_svmax import _backend, checks
from tf_svmax.losses import _common, _state_layers
from tf_svmax.losses._base import Loss
from tf_svmax.losses._registry import register
from tf_svmax.ops.ole import class_labels


def _initial_centers(num_classes, embedding_dim, centers, seed):
    if centers is None and seed is None:
        # Keras' global seed generator, which `keras.utils.set_random_seed` resets: two runs
        # seeded alike start from the same centers on every backend (NumPy's
        # ``default_rng(None)`` ignored the seed).
        shape = (num_classes, embedding_dim)
        centers = ops.convert_to_numpy(keras.random.normal(shape, dtype="float32"))
    elif centers is None:
        centers = np.random.default_rng(seed).standard_normal((num_classes, embedding_dim))
    centers = np.asarray(centers, dtype=np.float32)
    if centers.shape != (num_classes, embedding_dim):
        raise ValueError(
            checks.invalid(
                "centers",
                f"shape ({num_classes}, {embedding_dim})",
                f"<array of shape {centers.shape}>",
            )
        )
    return centers


def _check_label_shape(shape, num_classes):
    """Raises a ValueError naming `y_true` unless `shape` (None: unknown) is `[B]`, `[B, 1]`
    or `[B, num_classes]` (one-hot rows)."""
    if shape is None:
        return
    if len(shape) == 1 or (len(shape) == 2 and shape[1] in (None, 1, num_classes)):
        return
    raise ValueError(
        checks.invalid(
            "y_true",
            f"class ids of shape [B] or [B, 1], or one-hot rows of shape [B, {num_classes}] "
            "(num_classes)",
            f"<tensor of shape {tuple(shape)}>",
        )
    )


def _one_hot_message(num_classes):
    return (
        f"Invalid value for argument `y_true`. Expected one-hot rows of shape [B, {num_classes}] "
        "(one 1 and zeros in each row)."
    )


def _one_hot_classes(values, num_classes):
    """The classes of the NumPy one-hot rows `values` `[B, num_classes]`; a ValueError naming
    `y_true` and the first other row."""
    values = np.asarray(values)
    ones, zeros = values == 1, values == 0
    bad = np.flatnonzero(~((ones | zeros).all(axis=1) & (ones.sum(axis=1) == 1)))
    if bad.size:
        row = int(bad[0])
        raise ValueError(
            f"{_one_hot_message(num_classes)} Received: row {row} = {values[row].tolist()}."
        )
    return np.argmax(values, axis=-1)


@register
class ClassCenters(_state_layers.StateLayer):
    """The class centers of `CenterLoss` on Keras' JAX and PyTorch backends, as a layer of the
    model: a non-trainable `[num_classes, embedding_dim]` float32 weight, ``centers``.

    An identity on its input. Put it in the model after the embeddings
    (``keras.Sequential([..., loss.centers_layer])``): the centers are then saved, checkpointed
    and restored with the model, and, on JAX, carried out of each train step (a JAX train step
    carries out only the model's variables). It records Keras' ``training`` flag of the latest
    forward pass (`last_training`), which tells the loss on JAX whether a step trains.

    Args:
      num_classes: Number of classes C.
      embedding_dim: Feature dimension D.
      centers: Optional `[C, D]` initial centers; by default N(0, 1) draws with `seed`.
      seed: Seed of the N(0, 1) initialization (None: Keras' global seed generator, which
        `keras.utils.set_random_seed` makes reproducible).
    """

    def __init__(self, num_classes, embedding_dim, centers=None, seed=None, **kwargs):
        super().__init__("the centers are moved by the loss", **kwargs)
        self.num_classes = checks.check_positive_int(num_classes, "num_classes")
        self.embedding_dim = checks.check_positive_int(embedding_dim, "embedding_dim")
        initial = _initial_centers(self.num_classes, self.embedding_dim, centers, seed)
        self.centers = self.add_weight(
            shape=initial.shape,
            initializer=lambda shape, dtype: ops.convert_to_tensor(initial, dtype),
            dtype="float32",
            trainable=False,
            name="centers",
        )
        # Python-side, read by the loss when it is called or traced: the `training` flag of the
        # latest forward pass (None: never called in a model, as when the loss is called alone).
        self.last_training = None
        # Given centers (a loaded loss' config) are the saved ones: see `load_own_variables`.
        self._centers_given = centers is not None
        self.built = True

    def load_own_variables(self, store):
        # A file saved on TensorFlow, whose centers are the loss' own variable (no layer there):
        # Keras asks the loss' layer for variables the file does not hold. Its centers came from
        # the loss' config, which carries the saved centers, so there is nothing to load.
        if self._centers_given and not len(store.keys()):
            _state_layers.weights_loaded(self)
            return
        super().load_own_variables(store)

    def call(self, inputs, training=None):
        self.last_training = None if training is None else bool(training)
        return inputs

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "num_classes": self.num_classes,
            "embedding_dim": self.embedding_dim,
        }


@register
class CenterLoss(Loss):
    """Center loss whose centers are non-trainable state moved every training step.

    Args:
      num_classes: Number of classes C (labels in [0, C)).
      embedding_dim: Feature dimension D.
      lambda_: Weight (two-head baseline: 0.003).
      alpha: Center update rate in (0, 1] (0.5).
      centers: Optional `[C, D]` initial centers (a saved model passes its trained ones).
      seed: Seed of the N(0, 1) initialization (None: Keras' global seed generator, which
        `keras.utils.set_random_seed` makes reproducible).
      centers_layer: JAX and PyTorch only: an optional `ClassCenters` layer to hold the centers
        (e.g. the one of a model loaded from a ``.keras`` file); by default a new one.

    `y_true`: `[B]` (or `[B, 1]`) integer labels, or `[B, C]` one-hot rows (exactly one 1 and
    zeros in each; any other `[B, k]` matrix is refused by name); `y_pred`: `[B, D]` features.
    Sample weights scale the batch's value by their mean.

    Backends. TensorFlow: ``loss.centers`` is a `tf.Variable` of the loss (saved in its config),
    moved in the backward pass. PyTorch: the same, with the centers in ``loss.centers_layer`` (a
    `ClassCenters` layer); put the layer in the model to save the centers with its weights too.
    JAX: put ``loss.centers_layer`` in the model (``keras.Sequential([..., loss.centers_layer])``)
    — required: a JAX train step carries out only the model's variables, so a call inside a
    Keras JAX step (`fit`, `evaluate`) whose model does not hold the layer is refused by name.
    The centers move in the training steps of that model (``jit_compile=True`` included), never
    in `evaluate`/`predict`; a direct call (``loss(y, x)``, `jax.grad`) gives the value and its
    gradient and moves nothing. Labels are checked (integral, in ``[0, C)``) where their values
    are known, and by TensorFlow graphs when they run; inside a JAX trace or a TensorFlow XLA
    function (``jit_compile=True``) they cannot raise, and a batch holding an invalid label
    gives NaN and leaves the centers unmoved.
    On JAX and PyTorch ``loss.centers`` is the layer's ``centers`` weight.

    Under a `tf.distribute` strategy with more than one replica (create the loss inside
    ``strategy.scope()``), ``global_batch=True`` (default) computes the loss and the center
    update once on the global batch: every replica moves the centers identically, as one device
    would. ``global_batch=False`` is refused there: each replica would move the centers with its
    own rows and the copies would drift apart. The global batch is not split by anchors (unlike
    the mining losses): the value is a sum of per-row terms costing O(B D), no more than the
    gather itself, and the center update needs every row's pull on the class centers, which
    each replica would otherwise all-reduce as a `[C, D]` tensor.

    Not a `BatchPenaltyLoss`: its value is always scaled by the weights' mean whatever the
    `reduction` (the base would scale ``"sum"`` by their sum and return one entry per row for
    ``"none"``), it accepts weights of any length, and it refuses ``global_batch=False`` under a
    strategy (per-replica centers); moving it would change those.
    """

    # `get_config` records the centers layer's name (JAX, PyTorch), by which a loaded model's
    # loss finds it.
    state_layer_arguments = {"centers_layer": "centers_name"}

    def __init__(
        self,
        num_classes,
        embedding_dim,
        lambda_=0.003,
        alpha=0.5,
        centers=None,
        seed=None,
        global_batch=True,
        centers_layer=None,
        name="center_loss",
        **kwargs,
    ):
        # Its own `__call__` (the centers are state); `Loss` saves these arguments and the
        # centers layer's name, `get_config` adds the centers.
        fn_kwargs = dict(
            num_classes=checks.check_positive_int(num_classes, "num_classes"),
            embedding_dim=checks.check_positive_int(embedding_dim, "embedding_dim"),
            lambda_=checks.check_non_negative_number(lambda_, "lambda_"),
            alpha=checks.check_rate(alpha, "alpha"),
            seed=seed,
            global_batch=checks.check_bool(global_batch, "global_batch"),
        )
        super().__init__(fn_kwargs=fn_kwargs, name=name, **kwargs)
        centers = _initial_centers(self.num_classes, self.embedding_dim, centers, seed)
        if not _backend.LOSS_STATE_IN_LAYERS:
            if centers_layer is not None:
                raise ValueError(
                    checks.invalid(
                        "centers_layer",
                        "None on the TensorFlow backend (the centers are the loss' own variable)",
                        centers_layer,
                    )
                )
            self.centers_layer = None
            # The first replica's update: under a strategy every replica computes the same
            # update from the global batch.
            self.centers = _backend.first_replica_variable(centers, "centers")
            return
        if centers_layer is None:
            centers_layer = ClassCenters(self.num_classes, self.embedding_dim, centers=centers)
        elif not isinstance(centers_layer, ClassCenters) or (
            centers_layer.num_classes,
            centers_layer.embedding_dim,
        ) != (self.num_classes, self.embedding_dim):
            raise ValueError(
                checks.invalid(
                    "centers_layer",
                    f"a ClassCenters layer of {self.num_classes} classes and embedding_dim "
                    f"{self.embedding_dim}",
                    centers_layer,
                )
            )
        self.centers_layer = centers_layer
        self.centers = centers_layer.centers

    def __call__(self, y_true, y_pred, sample_weight=None):
        training = None if self.centers_layer is None else self.centers_layer.last_training
        if _backend.STATE_ONLY_IN_MODEL and training is None and _backend.in_stateless_scope():
            raise ValueError(
                "CenterLoss on Keras' JAX backend needs its centers layer in the model: "
                "keras.Sequential([..., loss.centers_layer]) (for a loaded model, "
                "CenterLoss(num_classes, embedding_dim, centers_layer=model.get_layer(<its "
                "name>)); one saved on TensorFlow has no such layer: "
                "keras.Sequential([model, model.loss.centers_layer]), compiled with "
                "model.loss). A JAX train step carries out only the model's variables, so the "
                "centers' update would be lost at every step."
            )
        if not self.global_batch and _backend.num_replicas_in_sync() > 1:
            # Each replica would move its own copy of the centers with its part of the batch,
            # and the copies would silently drift apart.
            raise ValueError(
                "CenterLoss(global_batch=False) does not support tf.distribute with more than "
                "one replica: the moving-center update would be per replica. Use "
                "global_batch=True or one device."
            )
        with keras.name_scope(self.name):
            x = ops.cast(ops.convert_to_tensor(y_pred), "float32")
            x, _ = checks.float_matrix(x, "y_pred", min_rows=0)
            if _backend.RUN_TIME_ASSERTIONS:
                labels = checks.same_rows(self._graph_labels(y_true), x, "y_true", "y_pred")
            else:
                labels, valid = self._known_labels(y_true, x)
            _, (x, labels, sample_weight) = _backend.gather_global_batch(
                self.global_batch, x, labels, sample_weight
            )
            if _backend.RUN_TIME_ASSERTIONS:
                # Over the global batch: every replica sees the same flag.
                valid, labels = self._valid_and_clamped(labels)
            checks.same_width(x, self.embedding_dim, "y_pred", "embedding_dim")
            centers_before = ops.convert_to_tensor(self.centers)
            batch_centers = ops.take(centers_before, labels, axis=0)

            def move(x):
                # Moving centers, from the pre-update centers (the original's scatter_sub).
                delta = self._delta(x, batch_centers, labels)
                if valid is not None:
                    # A batch with an invalid label moves no center.
                    delta = ops.where(valid, delta, ops.zeros_like(delta))
                return self.centers.assign(centers_before - delta)

            total = _backend.center_sum_and_update(x, batch_centers, move, training)
            value = self.lambda_ * total
            if valid is not None:
                # An invalid label where the checks cannot raise (a JAX trace, XLA): NaN, not
                # the value of a clamped class.
                value = ops.where(valid, value, ops.full_like(value, np.nan))
            if sample_weight is not None:
                value = value * ops.mean(ops.cast(sample_weight, value.dtype))
            # Under tf.distribute every replica holds the global batch's sum; Keras sums the
            # replicas' gradients.
            return _backend.scale_loss_for_distribution(ops.cast(value, self.dtype))

    def _label_rows(self, y):
        """``(y, one_hot)``: the tensor `y` of class ids (`[B]` or `[B, 1]`) as given and
        `one_hot` None, or `[B, C]` one-hot rows (C = num_classes) as their argmax and
        `one_hot` a bool `[B]`: which rows hold exactly one 1 and zeros. Any other shape is
        refused by name (a `[B, k]` matrix read as one-hot rows made ``[y, y]`` class 0)."""
        shape = checks.static_shape(y)
        _check_label_shape(shape, self.num_classes)
        if shape is None or len(shape) != 2 or shape[1] in (None, 1):
            return y, None
        ones, zeros = ops.equal(y, 1), ops.equal(y, 0)
        binary = ops.all(ops.logical_or(ones, zeros), axis=1)
        single = ops.equal(ops.sum(ops.cast(ones, "int32"), axis=1), 1)
        return ops.argmax(y, axis=-1), ops.logical_and(binary, single)

    def _graph_labels(self, y_true):
        """int64 `[B]` class ids, checked when a TensorFlow graph runs (an InvalidArgumentError
        naming `y_true`); under XLA, which drops those checks, an invalid row (non-integral, not
        one-hot) is -1 or stays outside ``[0, C)``, for `_valid_and_clamped` to see after the
        global batch is gathered."""
        y, one_hot = self._label_rows(ops.convert_to_tensor(y_true))
        if one_hot is not None:
            message = _one_hot_message(self.num_classes)
            y = checks.checked_when_run(
                y,
                lambda tf: tf.debugging.assert_equal(tf.reduce_all(one_hot), True, message=message),
            )
        y = checks.label_vector(y, "y_true")
        row_valid = _common.valid_labels(y, self.num_classes)
        if one_hot is not None:
            row_valid = ops.logical_and(row_valid, one_hot)
        # Integral values only (1.7 is refused, not truncated), range-checked in int64 before
        # the int32 cast (2**32 + 1 would otherwise wrap to class 1).
        labels = class_labels(y, "y_true")
        labels = checks.checked_when_run(
            labels,
            lambda tf: tf.debugging.assert_less(
                labels,
                tf.constant(self.num_classes, tf.int64),
                message=f"Invalid value for argument `y_true`: labels must be in [0, "
                f"{self.num_classes}).",
            ),
        )
        labels = checks.checked_when_run(
            labels,
            lambda tf: tf.debugging.assert_non_negative(
                labels, message="Invalid value for argument `y_true`: labels must be >= 0."
            ),
        )
        return ops.where(row_valid, labels, ops.full_like(labels, -1))

    def _valid_and_clamped(self, labels):
        """``(valid, labels)``: whether every int64 label is in ``[0, C)``, and the labels
        clamped into it as int32 (a gather of a clamped label is defined; the value is NaN and
        the centers stay where `valid` is False)."""
        valid = ops.all(ops.logical_and(labels >= 0, labels < self.num_classes))
        return valid, ops.cast(ops.clip(labels, 0, self.num_classes - 1), "int32")

    def _known_labels(self, y_true, x):
        """``(labels, valid)``: int32 labels, and None where they were checked here (their
        values known: a ValueError names `y_true`), else a traced bool scalar (a JAX trace)."""
        # Read before any conversion: JAX without 64-bit types would wrap int64 labels.
        values = _backend.concrete_values(y_true)
        if values is not None:
            _check_label_shape(values.shape, self.num_classes)
            if values.ndim == 2 and values.shape[-1] != 1:
                values = _one_hot_classes(values, self.num_classes)
            # Integral values only (1.7 is refused, not truncated), range-checked in int64
            # before the int32 cast (2**32 + 1 would otherwise wrap to class 1).
            labels = class_labels(values, "y_true")
            outside = np.flatnonzero((labels < 0) | (labels >= self.num_classes))
            if outside.size:
                raise ValueError(
                    f"Invalid value for argument `y_true`: labels must be in [0, "
                    f"{self.num_classes}). Received: {labels[outside[0]]} at index "
                    f"{int(outside[0])}."
                )
            labels = ops.convert_to_tensor(labels.astype(np.int32))
            return checks.same_rows(labels, x, "y_true", "y_pred"), None
        y, one_hot = self._label_rows(ops.convert_to_tensor(y_true))
        y = ops.reshape(y, [-1])
        valid = ops.all(_common.valid_labels(y, self.num_classes))
        if one_hot is not None:
            valid = ops.logical_and(valid, ops.all(one_hot))
        # Clamped so that the gather is defined; the value is NaN where `valid` is False.
        labels = ops.cast(ops.clip(y, 0, self.num_classes - 1), "int32")
        return checks.same_rows(labels, x, "y_true", "y_pred"), valid

    def _delta(self, x, batch_centers, labels):
        """How far each center moves: ``alpha * sum_{i: y_i = j} (c_j - x_i) / (1 + n_j)``."""
        counts = ops.segment_sum(
            ops.ones_like(labels, "float32"), labels, num_segments=self.num_classes
        )
        pulls = ops.segment_sum(batch_centers - x, labels, num_segments=self.num_classes)
        return self.alpha * pulls / (1.0 + counts)[:, None]

    @property
    def state_layers(self):
        """The layers holding this loss' state, which belong in the model (after its outputs,
        e.g. ``keras.Sequential([..., *loss.state_layers])``): its `ClassCenters` layer on
        JAX and PyTorch (which JAX needs in the model), none on TensorFlow, whose centers are
        the loss' own variable."""
        return [] if self.centers_layer is None else [self.centers_layer]

    def get_config(self):
        return {
            **super().get_config(),
            "dtype": self.dtype,
            # The trained centers: a loaded loss starts from them (on TensorFlow they are the
            # loss' own variable, saved nowhere else).
            "centers": self.centers.numpy().tolist(),
        }

    @classmethod
    def state_layer_from_config(cls, argument, name, config):
        if not _backend.LOSS_STATE_IN_LAYERS:
            return None  # TensorFlow: the centers are the loss' own variable
        shape = (config["num_classes"], config["embedding_dim"])
        restored = _state_layers.restored_layer(
            name,
            lambda layer: (
                isinstance(layer, ClassCenters)
                and (layer.num_classes, layer.embedding_dim) == shape
            ),
        )
        return restored or ClassCenters(*shape, centers=config.get("centers"), name=name)
