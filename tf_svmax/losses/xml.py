"""Cross-batch metric learning (XML, seed `004`, Sec. 2.3, Eq. 2.10-2.11) around any ranking loss.

The batch is split into two halves with disjoint classes; prototypes fitted in closed form to
one half (`tf_svmax.ops.cross_batch_embeddings`) predict the other half's embeddings from its
prototype histograms, and the ranking loss is applied to those predictions::

    L = (1 - lambda) L_DML(Y) + lambda sum_k L_DML(Y_hat_k)          (lambda = 0.01, ridge 0.05)

The model's output is the embedding with the histograms appended: ``concat([embeddings
[B, e], histograms [B, m]], -1)`` with ``m = num_prototypes`` (histograms from
`tf_svmax.ops.prototype_histograms` of the backbone's last convolutional map).

Backends: the two halves have data-dependent sizes (the classes of the batch, then the rows of
each half). Under XLA (``jit_compile=True`` on TensorFlow; on JAX every `fit` and `evaluate`,
which trace the loss, and any `jax.jit`) the halves are boolean masks over the whole batch,
computed with `keras.ops` (each class ranked by its first row), and each half's cross term is
the ranking loss on the batch against itself with the half as ``ref_mask`` (the loss on that
half alone: `tf_svmax.losses.triplet_semihard_loss`): fixed shapes, the same value and
gradient. That needs a ranking loss that takes ``ref_mask`` (``accepts_ref_mask``:
TripletSemiHardLoss, TripletHardLoss, LiftedStructLoss, BatchHardTripletLoss,
AllPairsContrastiveLoss). The P x K pair losses (``class_block_rows``: PKContrastiveLoss,
PKNpairLoss, PKAngularLoss) take no mask but fixed blocks of K rows per class: there the halves
are the first ceil(P / 2) blocks and the rest, static slices, which are the class halves when
the P blocks hold distinct classes (as `tf_svmax.data.pk_batches` makes them); where a class
fills blocks in both halves they are not, and the loss is NaN under XLA (eagerly it is right).
Every ranking loss of the library is one of these; around one's own that is neither (it may
take ``ref_mask`` or declare ``class_block_rows``), XMLLoss under XLA raises a ValueError saying
what to do. Outside XLA the halves are sliced: in the graph on TensorFlow (``tf.unique``,
``tf.boolean_mask``), in NumPy from the concrete labels on PyTorch and eager JAX.
"""

import keras
import numpy as np
from keras import ops

from tf_svmax import _backend, checks
from tf_svmax.losses import _common
from tf_svmax.losses._base import BatchPenaltyLoss
from tf_svmax.losses._registry import register
from tf_svmax.ops import prototypes
from tf_svmax.ops.ole import first_row_ids

# The ranking losses XMLLoss runs under XLA: those that take `ref_mask` (`accepts_ref_mask`)
# and the P x K ones (`class_block_rows`).
_XLA_LOSSES = (
    "TripletSemiHardLoss, TripletHardLoss, LiftedStructLoss, BatchHardTripletLoss, "
    "AllPairsContrastiveLoss, PKContrastiveLoss, PKNpairLoss or PKAngularLoss"
)
_NO_HALVES = "takes no ref_mask and works on no P x K class blocks"
_USE = (
    f"Use {_XLA_LOSSES} (they run under XLA; a loss of one's own does if it takes ref_mask, "
    "with accepts_ref_mask = True, or declares class_block_rows)"
)
_TRACED = {
    "jax": (
        "XMLLoss around {loss} cannot run inside a JAX trace (jax.jit, jax.eval_shape), so not "
        "in model.fit/evaluate on the JAX backend, which traces every loss: {loss} "
        f"{_NO_HALVES}, and the sizes of the two class halves depend on the labels' values. "
        f"{_USE}, or on JAX call it eagerly (loss(y, y_pred) or jax.grad of it), or train with "
        "KERAS_BACKEND=tensorflow or torch."
    ),
    "tensorflow": (
        "XMLLoss around {loss} cannot be compiled by XLA (jit_compile=True): {loss} "
        f"{_NO_HALVES}, and the sizes of the two class halves depend on the labels' values. "
        f"{_USE}, or compile the model with jit_compile=False (Keras enables XLA by default on "
        "GPUs)."
    ),
}


def _xla_refusal(loss):
    """The ValueError saying what to do under XLA around `loss`, a loss without ``ref_mask``
    or class blocks (its halves would have data-dependent shapes, which XLA cannot compile)."""
    return ValueError(_TRACED[keras.backend.backend()].format(loss=type(loss).__name__))


def _numpy_labels(labels):
    """JAX and PyTorch: the labels' values as a flat NumPy array (outside XLA they run XML
    eagerly)."""
    if ops.is_tensor(labels):
        labels = ops.convert_to_numpy(labels)
    return np.asarray(labels).reshape(-1)


def class_halves(labels):
    """`[B]` bool: the rows whose class is among the first ceil(C/2) classes in order of first
    appearance (the two halves have disjoint classes). A tensor on TensorFlow (computed in the
    graph) and under XLA (`traced_class_halves`), a NumPy array on PyTorch and eager JAX (from
    the concrete labels)."""
    if _backend.in_xla_context() or _backend.RUN_TIME_ASSERTIONS:
        return traced_class_halves(labels)
    labels = _numpy_labels(labels)
    _, first = np.unique(labels, return_index=True)
    order = np.sort(first)  # each class's first row, in order of appearance
    firsts = labels[order[: (len(order) + 1) // 2]]
    return np.isin(labels, firsts)


def traced_class_halves(labels):
    """`[B]` bool tensor, `class_halves` with `keras.ops` only (under XLA: no data-dependent
    shape): each row's class is the index of its label's first row
    (`tf_svmax.ops.ole.first_row_ids`), the classes are ranked by those first rows (a cumsum),
    and the first half holds the ranks below ceil(C/2)."""
    labels = ops.reshape(ops.convert_to_tensor(labels), [-1])
    if labels.shape[0] == 0:
        return ops.zeros([0], "bool")  # no rows (JAX refuses a min over none)
    first_row = first_row_ids(labels)  # [B], in [0, B)
    index = ops.arange(ops.shape(labels)[0], dtype="int32")
    starts = ops.cast(ops.equal(first_row, index), "int32")  # the rows that start a class
    rank = ops.cumsum(starts) - 1  # at a class's first row: its rank by first appearance
    classes = ops.sum(starts)
    return _backend.take(rank, first_row) < (classes + 1) // 2


def _rows(x, mask):
    """The rows of `x` where `mask` holds (`class_halves`' tensor on TensorFlow, NumPy
    elsewhere)."""
    return _backend.boolean_mask_rows(x, mask)


def _batch_value(loss, labels, embeddings):
    """The loss's batch-level value on these rows (its `call`, averaged if per sample)."""
    value = ops.convert_to_tensor(loss.call(labels, embeddings))
    return ops.mean(value) if len(value.shape) else value


def _halves_value(loss, labels, embeddings, halves, take):
    """The sum of `_batch_value` on each half's rows (``take(x, half)``), 0 for an empty half."""
    cross = 0.0
    for half in halves:
        rows = take(embeddings, half)
        cross += checks.zero_unless_rows(
            rows, lambda rows=rows, half=half: _batch_value(loss, take(labels, half), rows)
        )
    return cross


def _block_halves_value(loss, labels, embeddings, first):
    """`_halves_value` under XLA around a loss on P x K class blocks (``class_block_rows`` K):
    the halves as static slices, the first ceil(P / 2) blocks and the rest. They are the class
    halves `first` when the P blocks hold distinct classes; where a class fills blocks in both
    (their sizes then depend on the labels, which fixed shapes cannot hold), NaN: loud, as
    OLE's out-of-range class ids under XLA."""
    k = loss.class_block_rows
    rows = ops.shape(labels)[0]
    split = (rows // k + 1) // 2 * k
    halves = (slice(None, split), slice(split, None))
    cross = _halves_value(loss, labels, embeddings, halves, lambda x, half: x[half])
    in_blocks = ops.all(ops.equal(first, ops.arange(rows) < split))
    return ops.where(in_blocks, cross, ops.full_like(cross, float("nan")))


def _masked_value(loss, labels, embeddings, part):
    """`_batch_value` of the rows where `part` holds, with fixed shapes: the loss on the whole
    batch against itself with `part` as ``ref_mask`` (the other rows dropped as anchors and as
    references), a per-sample loss averaged over the rows of `part` (0 for none)."""
    value = ops.convert_to_tensor(
        loss.call(
            labels,
            embeddings,
            ref_labels=labels,
            ref_embeddings=embeddings,
            ref_offset=0,
            ref_mask=part,
        )
    )
    if not len(value.shape):
        return value
    return _common.safe_mean_over(ops.sum(value), _common.count_true(part))


_RANKING_LOSS = (
    "a ranking loss on class labels and embeddings: an instance (or 'tf_svmax>ClassName' name) "
    "of a tf_svmax.losses metric-learning loss such as TripletHardLoss() or PKContrastiveLoss(); "
    "Keras' losses compare y_true with y_pred element-wise, ProxyAnchorLoss takes proxy "
    "similarities, NpairsLoss and NpairsMultilabelLoss a similarity matrix (PKNpairLoss takes "
    "embeddings), SVMaxLoss, SpreadOutLoss and OLELoss are regularizers (give them the "
    "embeddings beside XML: a second model output, as the retrieval trainer does), and for a "
    "function use its class (TripletHardLoss for triplet_hard_loss)"
)


def _ranking_loss(loss):
    """`loss` (resolved if a name or config) if XML can evaluate it on each half through its
    `call`: a loss that declares ``ranks_embeddings`` (`tf_svmax.losses.LabelLoss`: the
    library's label-aware losses on embeddings), not another `XMLLoss` nor `ProxyAnchorLoss`
    and the N-pair losses (whose ``y_pred`` are not embeddings) nor a regularizer (SVMax,
    spread-out, OLE: penalties on the embeddings, not the metric-learning loss of Eq. 2.11);
    anything else would fail on shapes or mean something else."""
    resolved = loss
    if isinstance(loss, (str, dict)):
        try:
            resolved = keras.losses.get(loss)
        except ValueError:  # an unknown name: the error below says what is expected
            resolved = None
    if isinstance(resolved, keras.losses.Loss) and getattr(resolved, "ranks_embeddings", False):
        return resolved
    raise ValueError(checks.invalid("loss", _RANKING_LOSS, loss))


def _xml_loss(y_true, y_pred, *, loss, num_prototypes, lambda_, ridge, normalize):
    """`XMLLoss`' function: ``(1 - lambda_) loss(Y) + lambda_ * sum_k loss(Y_hat_k)``."""
    m = num_prototypes
    embeddings, histograms = y_pred[:, :-m], y_pred[:, -m:]
    labels = ops.reshape(y_true, [-1])
    base = _batch_value(loss, labels, embeddings)
    if not lambda_:
        return base  # a Python branch: lambda = 0 is the base loss exactly
    xla = _backend.in_xla_context()
    masked = loss.accepts_ref_mask
    if xla and not masked and loss.class_block_rows is None:
        raise _xla_refusal(loss)
    first = class_halves(labels)
    second = ~first
    # Each half predicted by the prototypes fitted to the other one.
    predicted = ops.where(
        first[:, None],
        prototypes.cross_batch_embeddings(histograms, embeddings, second, ridge=ridge),
        prototypes.cross_batch_embeddings(histograms, embeddings, first, ridge=ridge),
    )
    if normalize:
        # epsilon: a row predicted as exactly 0 stays 0 instead of dividing by zero (and
        # keeps its gradient finite, where `ops.normalize` gives NaN on PyTorch). The
        # arithmetic of `tf.math.l2_normalize(predicted, 1, epsilon=1e-12)`, the original.
        squared = ops.sum(ops.square(predicted), axis=1, keepdims=True)
        predicted = predicted * ops.rsqrt(ops.maximum(squared, 1e-12))
    # A TensorFlow graph of unknown batch size (Keras retraces a step so for a last, smaller
    # batch) takes the masked form too: the gradient of the halves' row-count `tf.cond`
    # around the ranking loss' own conds failed there with a bare AssertionError (cond_v2).
    unknown_rows = checks.static_shape(embeddings)[0] is None
    if (xla or unknown_rows) and masked:
        # Fixed shapes: each half as the ranking loss' ref_mask over the whole batch.
        cross = _masked_value(loss, labels, predicted, first)
        cross += _masked_value(loss, labels, predicted, second)
    elif xla:
        cross = _block_halves_value(loss, labels, predicted, first)
    else:
        cross = _halves_value(loss, labels, predicted, (first, second), _rows)
    return (1.0 - lambda_) * base + lambda_ * cross


@register
class XMLLoss(BatchPenaltyLoss):
    """``(1 - lambda_) loss(Y) + lambda_ * sum_k loss(Y_hat_k)`` (XML Eq. 2.11).

    Args:
      loss: The ranking loss (a `tf_svmax.losses` instance, e.g. `PKContrastiveLoss()`, or
        its ``"tf_svmax>ClassName"`` name): a loss on class labels and embeddings; a Keras
        loss, a function, `ProxyAnchorLoss`, an N-pair loss on a similarity matrix or a
        regularizer (`SVMaxLoss`, `SpreadOutLoss`, `OLELoss`) is refused. It is evaluated
        through its `call` on each part, so the parts never mix. Each half must be a batch
        the loss accepts (P x K losses: P / 2 classes per half, so P even or, for the pair
        losses that pair classes, P a multiple of 4). Under XLA (``jit_compile=True``, JAX's
        `fit`) it must take ``ref_mask`` (TripletSemiHardLoss, TripletHardLoss,
        LiftedStructLoss, BatchHardTripletLoss, AllPairsContrastiveLoss) or be a P x K loss
        (PKContrastiveLoss, PKNpairLoss, PKAngularLoss: NaN where a class fills blocks in
        both halves); see the module.
      num_prototypes: m, the trailing columns of ``y_pred`` that hold the histograms (paper:
        64 CUB/CARS, 128 SOP/InShop).
      lambda_: Weight of the cross-batch term (paper: 0.01); 0 gives `loss` exactly.
      ridge: The ridge term of the prototype fit (paper: 0.05).
      normalize: L2-normalise the predicted embeddings (for losses defined on unit vectors).
    """

    ranks_embeddings = False  # it is the wrapper itself

    def __init__(
        self, loss, num_prototypes, lambda_=0.01, ridge=0.05, normalize=True, name="xml", **kwargs
    ):
        fn_kwargs = dict(
            loss=_ranking_loss(loss),
            num_prototypes=checks.check_positive_int(num_prototypes, "num_prototypes"),
            lambda_=checks.check_fraction(lambda_, "lambda_"),
            ridge=checks.check_non_negative_number(ridge, "ridge"),
            normalize=checks.check_bool(normalize, "normalize"),
        )
        super().__init__(_xml_loss, fn_kwargs, name=name, **kwargs)
