"""LORAC: the low-rank prior for multi-query contrastive learning (seed `003`, Sec. 4, Eq. 11-13).

For instance i with M - 1 query views ``q_{i,m}`` (trainable encoder) and one key ``k_i``
(momentum encoder), ``Q_i = [q_{i,1}; ...; q_{i,M-1}; k_i]`` (M x C, rows L2-normalised) and K
negative keys ``k_j^-`` (the queue)::

    L_i = -1/(M-1) sum_m log( e^{q.k+/tau} h(Q_i) / (e^{q.k+/tau} h(Q_i) + sum_j e^{q.k_j^-/tau}) )
    L   = mean_i L_i                                                                     (Eq. 13)

with the prior, in log form (``log h`` adds to the positive logit):

* ``"laplace"`` (Eq. 11, the paper's): ``log h = -||Q||_* / (M beta tau)``; ``beta = inf`` is
  MoCo-M (multi-query InfoNCE, no prior); with M = 2 and beta = inf it is MoCo's InfoNCE;
* ``"gaussian"`` (Sec. 6): ``log h = -(||Q||_* - c0)^2 / (sigma^2 M tau)`` (``beta`` plays
  sigma^2; the paper: c0 = sqrt(5), sigma^2 = 2);
* ``"margin"`` (Sec. 6, "L-sftmx-c"): ``log h = -c / (M beta tau)``, the nuclear norm replaced by
  a constant c (the paper: 3).

Keys carry no gradient (the key encoder is momentum-updated): gradients reach the queries only,
also through ``||Q||_*``. The nuclear norms of the N small M x C matrices are one batched SVD;
its gradient ``U V^T`` involves no division by singular-value gaps, so coinciding rows (the
prior's minimum, ``||Q||_* = sqrt(M)``) are safe (`tf_svmax.ops.batched_nuclear_norm`).

Backends: `keras.ops` throughout, so it runs on TensorFlow, JAX and PyTorch, in ``fit`` and
under ``jit_compile=True``; on TensorFlow the ops are the original ``tf.linalg.svd``,
``tf.einsum`` and ``tf.math.reduce_logsumexp``, so the values are the original ones.
"""

import collections.abc
import math

from keras import ops

from tf_svmax import _backend, checks
from tf_svmax._args import LORAC_PRIORS as PRIORS  # one table: the trainers' flags read it
from tf_svmax.losses._base import Loss
from tf_svmax.losses._registry import register
from tf_svmax.ops import _guards
from tf_svmax.ops.spectral import batched_nuclear_norm

# The entries of `LORACLoss`'s ``y_pred`` (the arguments of `lorac_loss`).
INPUT_KEYS = ("queries", "positive_keys", "negative_keys")
# The Gaussian prior's centre in the paper's comparison (Sec. 6): c0 = sqrt(5).
GAUSSIAN_CENTER = math.sqrt(5.0)


def _check_y_pred(y_pred):
    """`LORACLoss`'s ``y_pred``: a mapping holding the three inputs of `lorac_loss`."""
    if isinstance(y_pred, collections.abc.Mapping):
        if all(key in y_pred for key in INPUT_KEYS):
            return
        received = f"<mapping with keys {sorted(map(str, y_pred))}>"
    else:
        received = f"<{type(y_pred).__name__}>"
    raise ValueError(
        checks.invalid("y_pred", f"a mapping with the keys {list(INPUT_KEYS)}", received)
    )


def _unit_rows(x):
    # The encoders' outputs are L2-normalised (MoCo); normalising again is a no-op for them and
    # makes Q's rows unit vectors as Eq. 11 assumes. The epsilon keeps an all-zero row at zero
    # (and its gradient finite: `ops.normalize` gives NaN there on PyTorch). The same ops as
    # `tf.math.l2_normalize(x, -1, epsilon=1e-12)`, the original, so TensorFlow's values stay.
    x = _overflow_safe(x)
    squared = ops.sum(ops.square(x), axis=-1, keepdims=True)
    return x * ops.rsqrt(ops.maximum(squared, 1e-12))


# Rows whose largest entry exceeds this are rescaled before their squares are summed.
_LARGE = 2.0**30


def _overflow_safe(x):
    """`x` with each row whose largest entry exceeds 2^30 divided by a power of two that puts
    that entry in [2^20, 2^21): exact, so its direction (all `_unit_rows` keeps) is unchanged,
    and its squares no longer overflow (above ~1e19 in float32 the sum of squares is inf and
    ``rsqrt(inf) = 0`` made the row zero: the all-zero input's value). Not into [1, 2): XLA
    divides by multiplying with the reciprocal, and 2^-127 is subnormal in float32, flushed to
    zero on a CPU. Other rows are left bit for bit. A non-finite row stays non-finite (inf /
    inf = NaN). The exponent is taken in float64 where it exists (Keras' `floor`/`power`
    compute float64 as float32 on JAX and PyTorch)."""
    wide = "float64" if _guards.float64_available() else "float32"
    # (Also for no entries, M = 1, which `_check_shapes` refuses by name afterwards.)
    largest = _backend.reduce_with_identity(ops.max, ops.abs(x), -1, keepdims=True)
    largest = ops.cast(largest, wide)
    large = largest > _LARGE
    # log2 of 1 (every row not rescaled) is 0: a scale of 1 there, no log of 0 or NaN.
    exponent = ops.floor(ops.log(ops.where(large, largest, ops.ones_like(largest))) / math.log(2.0))
    exponent = ops.cast(ops.where(large, exponent - 20.0, exponent), wide)
    # Piecewise constant in x: no gradient of its own.
    scale = ops.stop_gradient(ops.cast(ops.power(ops.full((), 2.0, wide), exponent), x.dtype))
    return ops.where(ops.cast(large, "bool"), x / scale, x)


def _check_shapes(q, k, negatives):
    """Ranks, the feature size C shared by the three inputs and M - 1 >= 1 query views, where
    the shapes say so statically (the N of `positive_keys` is `same_rows`' job)."""
    expected = {"queries": "[N, M-1, C]", "positive_keys": "[N, C]", "negative_keys": "[K, C]"}
    tensors = {"queries": q, "positive_keys": k, "negative_keys": negatives}
    for arg, x in tensors.items():
        shape = checks.static_shape(x)
        if shape is None or len(shape) != expected[arg].count(",") + 1:
            raise ValueError(
                checks.invalid(arg, f"a tensor of shape {expected[arg]}", f"<shape {x.shape}>")
            )
    if q.shape[1] == 0:  # M = 1: no view to average over (the mean of nothing is NaN)
        raise ValueError(
            checks.invalid("queries", "at least one query view (M - 1 >= 1)", f"<shape {q.shape}>")
        )
    known = None  # the first (argument, C) known statically
    for arg, x in tensors.items():
        size = x.shape[-1]
        if size is None:
            continue
        if known is None:
            known = (arg, size)
        elif size != known[1]:
            raise ValueError(
                checks.invalid(
                    arg, f"C = {known[1]} columns, as `{known[0]}`", f"<shape {x.shape}>"
                )
            )


def _check_settings(temperature, beta, prior, center, constant):
    """The validated ``(temperature, beta, prior, center, constant)`` as Python floats (and the
    prior's name); a ValueError names the argument otherwise."""
    temperature = checks.check_positive_number(temperature, "temperature")
    beta = checks.check_positive_number(beta, "beta", allow_inf=True)
    prior = checks.check_choice(prior, "prior", PRIORS)
    # c0 and c are values of ||Q||_* (the Gaussian's centre, the margin prior's stand-in for the
    # norm; seed 003 Sec. 6: sqrt(5) and 3, "a similar value of ||Q||_* at convergence"), so
    # finite and >= 0; a negative c would be a bonus, not a margin (c = -1e9 gave a zero loss).
    center = checks.check_non_negative_number(center, "center")
    constant = checks.check_non_negative_number(constant, "constant")
    return temperature, beta, prior, center, constant


@register
def lorac_loss(
    queries,
    positive_keys,
    negative_keys,
    *,
    temperature=0.2,
    beta=2.0,
    prior="laplace",
    center=GAUSSIAN_CENTER,
    constant=3.0,
):
    """Per-instance LORAC loss (Eq. 12); its mean over instances is Eq. 13.

    Args:
      queries: `[N, M-1, C]` query views (M - 1 >= 1).
      positive_keys: `[N, C]` the key of each instance.
      negative_keys: `[K, C]` negative keys (shared by all instances, MoCo's queue).
      temperature: tau (paper: 0.2).
      beta: The prior's scale (Laplace: best 2; ``float("inf")``: no prior, MoCo-M; Gaussian:
        sigma^2; margin: the same role as for Laplace).
      prior: ``"laplace"``, ``"gaussian"`` or ``"margin"``.
      center: c0 of the Gaussian prior (paper: sqrt(5)).
      constant: c of the margin prior (paper: 3).

    Returns:
      `[N]` losses (float32 for half-precision inputs).
    """
    temperature, beta, prior, center, constant = _check_settings(
        temperature, beta, prior, center, constant
    )
    q = checks.to_tensor(queries, "queries")
    dtype = checks.compute_dtype(q.dtype)
    q = _unit_rows(ops.cast(q, dtype))
    k = checks.to_tensor(positive_keys, "positive_keys")
    k = _unit_rows(ops.stop_gradient(ops.cast(k, dtype)))
    negatives = checks.to_tensor(negative_keys, "negative_keys")
    negatives = _unit_rows(ops.stop_gradient(ops.cast(negatives, dtype)))
    _check_shapes(q, k, negatives)
    k = checks.same_rows(k, q, "positive_keys", "queries")
    views = ops.shape(q)[1]
    m = ops.cast(views + 1, dtype)
    positive = ops.einsum("nvc,nc->nv", q, k) / temperature  # [N, M-1]
    negative = ops.einsum("nvc,kc->nvk", q, negatives) / temperature  # [N, M-1, K]
    if math.isinf(beta):
        log_prior = ops.zeros_like(positive[:, 0])
    elif prior == "margin":
        log_prior = ops.zeros_like(positive[:, 0]) - constant / (m * beta * temperature)
    else:
        stacked = ops.concatenate([q, k[:, None, :]], axis=1)  # Q_i: [N, M, C]
        norm = batched_nuclear_norm(stacked)
        if prior == "laplace":
            log_prior = -norm / (m * beta * temperature)
        else:
            log_prior = -ops.square(norm - center) / (beta * m * temperature)
    logits = ops.concatenate([(positive + log_prior[:, None])[..., None], negative], axis=-1)
    # -log softmax of the positive, averaged over the M - 1 views.
    per_view = ops.logsumexp(logits, axis=-1) - logits[..., 0]
    return ops.mean(per_view, axis=1)


def _lorac_of_outputs(y_true, y_pred, **kwargs):
    """`lorac_loss` of `LORACLoss`'s ``y_pred`` mapping (`y_true` ignored): the loss class's
    function, in the ``(y_true, y_pred)`` form that `Loss` calls."""
    del y_true  # self-supervised: no labels
    return lorac_loss(y_pred["queries"], y_pred["positive_keys"], y_pred["negative_keys"], **kwargs)


@register
class LORACLoss(Loss):
    """`lorac_loss` as a Keras loss; the mean over instances (Eq. 13) by default.

    ``y_pred`` is a mapping with ``"queries"`` `[N, M-1, C]`, ``"positive_keys"`` `[N, C]` and
    ``"negative_keys"`` `[K, C]`; ``y_true`` is ignored (self-supervised). A training step calls
    it directly: ``loss(None, {"queries": q, "positive_keys": k, "negative_keys": queue})``.

    Keras' `Loss` rather than the library's `LabelLoss`: there are no labels and ``y_pred`` is a
    mapping whose negative keys (a queue shared by all instances) are not rows of the batch, so
    there is no global batch to gather; the per-instance values are reduced as Keras does.
    """

    def __init__(
        self,
        temperature=0.2,
        beta=2.0,
        prior="laplace",
        center=GAUSSIAN_CENTER,
        constant=3.0,
        name="lorac",
        reduction="sum_over_batch_size",
        dtype=None,
    ):
        # Validated now rather than at the first call; Python floats, so the config is JSON
        # (a NumPy float32 is not JSON-serializable).
        temperature, beta, prior, center, constant = _check_settings(
            temperature, beta, prior, center, constant
        )
        fn_kwargs = dict(
            temperature=temperature, beta=beta, prior=prior, center=center, constant=constant
        )
        super().__init__(_lorac_of_outputs, fn_kwargs, name=name, reduction=reduction, dtype=dtype)

    def __call__(self, y_true, y_pred, sample_weight=None):
        del y_true  # no labels; Keras' __call__ would try to convert None
        _check_y_pred(y_pred)
        if sample_weight is not None:
            # One weight per instance or a scalar: Keras would broadcast a [1] weight and fail
            # with a bare shape error on another length.
            sample_weight = checks.row_weights(
                sample_weight, y_pred["queries"], "y_pred['queries']"
            )
        return super().__call__(ops.zeros([0]), y_pred, sample_weight)
