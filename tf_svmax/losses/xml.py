"""Cross-batch metric learning (XML, seed `004`, Sec. 2.3, Eq. 2.10-2.11) around any ranking loss.

The batch is split into two halves with disjoint classes; prototypes fitted in closed form to
one half (`tf_svmax.ops.cross_batch_embeddings`) predict the other half's embeddings from its
prototype histograms, and the ranking loss is applied to those predictions::

    L = (1 - lambda) L_DML(Y) + lambda sum_k L_DML(Y_hat_k)          (lambda = 0.01, ridge 0.05)

The model's output is the embedding with the histograms appended: ``concat([embeddings
[B, e], histograms [B, m]], -1)`` with ``m = num_prototypes`` (histograms from
`tf_svmax.ops.prototype_histograms` of the backbone's last convolutional map).

Backends: the two halves have data-dependent sizes (the classes of the batch, then the rows of
each half). TensorFlow finds them in the graph (``tf.unique``, ``tf.boolean_mask``), so `fit`
runs as before, ``jit_compile=True`` excepted. On PyTorch (eager) and JAX they are found in NumPy
from the concrete labels: PyTorch runs `fit`; JAX computes XMLLoss only eagerly (``loss(y, x)``,
`jax.grad` of it), because Keras traces every JAX loss, `fit` and `evaluate` included, and a
trace has no concrete labels: there it raises a ValueError saying so.
"""

import keras
import numpy as np
from keras import ops

from tf_svmax import _backend, checks
from tf_svmax.losses._base import BatchPenaltyLoss, PerSampleLabelLoss
from tf_svmax.losses.proxy_anchor import ProxyAnchorLoss
from tf_svmax.ops import prototypes

_TRACED = {
    "jax": (
        "XMLLoss cannot run inside a JAX trace (jax.jit, jax.eval_shape), so not in "
        "model.fit/evaluate on the JAX backend, which traces every loss: the sizes of its two "
        "class halves depend on the labels' values. On JAX call it eagerly (loss(y, y_pred) or "
        "jax.grad of it), or train with KERAS_BACKEND=tensorflow or torch."
    ),
    "tensorflow": (
        "XMLLoss cannot be compiled by XLA (jit_compile=True): the sizes of its two class halves "
        "depend on the labels' values. Compile the model with jit_compile=False (Keras enables "
        "XLA by default on GPUs)."
    ),
}


def _refuse_xla():
    """A ValueError saying what to do when traced for XLA (no data-dependent shapes there)."""
    if _backend.in_xla_context():
        raise ValueError(_TRACED[keras.backend.backend()])


def _numpy_labels(labels):
    """JAX and PyTorch: the labels' values as a flat NumPy array (they run XML eagerly); a
    ValueError inside a JAX trace, where the values are unknown."""
    _refuse_xla()
    if ops.is_tensor(labels):
        labels = ops.convert_to_numpy(labels)
    return np.asarray(labels).reshape(-1)


def class_halves(labels):
    """`[B]` bool: the rows whose class is among the first ceil(C/2) classes in order of first
    appearance (the two halves have disjoint classes). A tensor on TensorFlow (computed in the
    graph), a NumPy array on JAX and PyTorch (from the concrete labels)."""
    if keras.backend.backend() != "tensorflow":
        labels = _numpy_labels(labels)
        _, first = np.unique(labels, return_index=True)
        order = np.sort(first)  # each class's first row, in order of appearance
        firsts = labels[order[: (len(order) + 1) // 2]]
        return np.isin(labels, firsts)
    import tensorflow as tf  # noqa: PLC0415 (the TensorFlow backend only)

    labels = tf.reshape(labels, [-1])
    _, index = tf.unique(labels)
    classes = tf.reduce_max(index) + 1
    return index < (classes + 1) // 2


def _rows(x, mask):
    """The rows of `x` where `mask` holds (`class_halves`' tensor on TensorFlow, NumPy
    elsewhere)."""
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf  # noqa: PLC0415 (the TensorFlow backend only)

        return tf.boolean_mask(x, mask)
    return ops.take(x, np.flatnonzero(mask), axis=0)


def _batch_value(loss, labels, embeddings):
    """The loss's batch-level value on these rows (its `call`, averaged if per sample)."""
    value = ops.convert_to_tensor(loss.call(labels, embeddings))
    return ops.mean(value) if len(value.shape) else value


_RANKING_LOSS = (
    "a ranking loss on class labels and embeddings: an instance (or 'tf_svmax>ClassName' name) "
    "of a tf_svmax.losses metric-learning loss such as TripletHardLoss() or PKContrastiveLoss(); "
    "Keras' losses compare y_true with y_pred element-wise, ProxyAnchorLoss takes proxy "
    "similarities, and for a function use its class (TripletHardLoss for triplet_hard_loss)"
)


def _ranking_loss(loss):
    """`loss` (resolved if a name or config) if XML can evaluate it on each half through its
    `call`: one of the library's label-aware losses on embeddings (`BatchPenaltyLoss`,
    `PerSampleLabelLoss`), not another `XMLLoss` nor `ProxyAnchorLoss` (whose ``y_pred`` are
    not embeddings); anything else would fail on shapes or mean something else."""
    resolved = loss
    if isinstance(loss, (str, dict)):
        try:
            resolved = keras.losses.get(loss)
        except ValueError:  # an unknown name: the error below says what is expected
            resolved = None
    if isinstance(resolved, (BatchPenaltyLoss, PerSampleLabelLoss)) and not isinstance(
        resolved, (XMLLoss, ProxyAnchorLoss)
    ):
        return resolved
    raise ValueError(checks.invalid("loss", _RANKING_LOSS, loss))


@keras.saving.register_keras_serializable(package="tf_svmax")
class XMLLoss(BatchPenaltyLoss):
    """``(1 - lambda_) loss(Y) + lambda_ * sum_k loss(Y_hat_k)`` (XML Eq. 2.11).

    Args:
      loss: The ranking loss (a `tf_svmax.losses` instance, e.g. `PKContrastiveLoss()`, or
        its ``"tf_svmax>ClassName"`` name): a loss on class labels and embeddings; a Keras loss,
        a function or `ProxyAnchorLoss` is refused. It is evaluated through its `call` on each
        part, so the parts never mix. Each half must be
        a batch the loss accepts (P x K losses: P / 2 classes per half, so P even or, for the
        pair losses that pair classes, P a multiple of 4).
      num_prototypes: m, the trailing columns of ``y_pred`` that hold the histograms (paper:
        64 CUB/CARS, 128 SOP/InShop).
      lambda_: Weight of the cross-batch term (paper: 0.01); 0 gives `loss` exactly.
      ridge: The ridge term of the prototype fit (paper: 0.05).
      normalize: L2-normalise the predicted embeddings (for losses defined on unit vectors).
    """

    def __init__(
        self, loss, num_prototypes, lambda_=0.01, ridge=0.05, normalize=True, name="xml", **kwargs
    ):
        super().__init__(name=name, **kwargs)
        self.loss = _ranking_loss(loss)
        self.num_prototypes = checks.check_positive_int(num_prototypes, "num_prototypes")
        self.lambda_ = checks.check_fraction(lambda_, "lambda_")
        self.ridge = checks.check_non_negative_number(ridge, "ridge")
        self.normalize = checks.check_bool(normalize, "normalize")

    def call(self, y_true, y_pred):
        m = self.num_prototypes
        embeddings, histograms = y_pred[:, :-m], y_pred[:, -m:]
        labels = ops.reshape(y_true, [-1])
        base = _batch_value(self.loss, labels, embeddings)
        if not self.lambda_:
            return base  # a Python branch: lambda = 0 is the base loss exactly
        _refuse_xla()
        first = class_halves(labels)
        # Each half predicted by the prototypes fitted to the other one.
        predicted = ops.where(
            first[:, None],
            prototypes.cross_batch_embeddings(histograms, embeddings, ~first, ridge=self.ridge),
            prototypes.cross_batch_embeddings(histograms, embeddings, first, ridge=self.ridge),
        )
        if self.normalize:
            # epsilon: a row predicted as exactly 0 stays 0 instead of dividing by zero (and
            # keeps its gradient finite, where `ops.normalize` gives NaN on PyTorch). The
            # arithmetic of `tf.math.l2_normalize(predicted, 1, epsilon=1e-12)`, the original.
            squared = ops.sum(ops.square(predicted), axis=1, keepdims=True)
            predicted = predicted * ops.rsqrt(ops.maximum(squared, 1e-12))
        cross = 0.0
        for part in (first, ~first):
            rows = _rows(predicted, part)
            cross += checks.zero_unless_rows(
                rows,
                lambda rows=rows, part=part: _batch_value(self.loss, _rows(labels, part), rows),
            )
        return (1.0 - self.lambda_) * base + self.lambda_ * cross

    def get_config(self):
        return {
            **super().get_config(),
            "loss": keras.saving.serialize_keras_object(self.loss),
            "num_prototypes": self.num_prototypes,
            "lambda_": self.lambda_,
            "ridge": self.ridge,
            "normalize": self.normalize,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["loss"] = keras.saving.deserialize_keras_object(config["loss"])
        return cls(**config)
