"""Keras losses for the SVD-based penalties: SVMax and OLE, each a pure function (`svmax_loss`,
`ole_loss`) and its Keras loss class (`SVMaxLoss`, `OLELoss`)."""

from tf_svmax import checks, ops
from tf_svmax.losses._base import BatchPenaltyLoss
from tf_svmax.losses._registry import register


@register
def svmax_loss(y_true, y_pred, *, lambda_=1.0, bounded=True, method="auto"):
    """The SVMax penalty as a loss function: ``lambda_ * tf_svmax.ops.svmax(y_pred)``.

    Bounded (default): ``lambda_ * exp((U - s_mu) / (U - L))`` (SVMax paper, seed `000`, Eq. 4),
    with ``s_mu`` the mean singular value of the batch and ``L``, ``U`` its bounds for
    L2-normalized rows (Eq. 2-3, `tf_svmax.ops.svmax_bounds`); unbounded: ``-lambda_ * s_mu``
    (Eq. 1). Label-oblivious: `y_true` is ignored (may be None).

    Args:
      y_true: Ignored (the penalty has no labels).
      y_pred: `[b, d]` embeddings, normally L2-normalized rows.
      lambda_: Weight of the penalty, a float >= 0 (the paper: 1 for contrastive and N-pair
        losses, 0.1 for triplet, 2 for angular).
      bounded: Bounded (Eq. 4) or unbounded (Eq. 1) form.
      method: Spectral path, see `tf_svmax.ops.spectral` ("auto" is right almost always).

    Returns:
      A scalar of the dtype of `y_pred`; 0 for a batch with no rows.

    Example:
      >>> svmax_loss(None, [[1.0, 0.0]] * 4)  # e = 2.718...: one direction, the maximum
    """
    del y_true  # label-oblivious
    lambda_ = checks.check_non_negative_number(lambda_, "lambda_")
    return lambda_ * ops.svmax(y_pred, bounded=bounded, method=method)


@register
class SVMaxLoss(BatchPenaltyLoss):
    """SVMax regularizer as a label-oblivious Keras loss: `svmax_loss`,
    ``lambda_ * svmax(y_pred)``.

    Bounded (default): ``lambda_ * exp((U - s_mu) / (U - L))`` (SVMax paper Eq. 4); unbounded:
    ``-lambda_ * s_mu`` (Eq. 1). `y_true` is ignored (may be None). The paper's lambda is 1 for
    contrastive and N-pair losses, 0.1 for triplet and 2 for angular loss.

    Args:
      lambda_: Weight of the penalty, a float >= 0.
      bounded: Bounded (Eq. 4) or unbounded (Eq. 1) form.
      method: Spectral path, see `tf_svmax.ops.spectral` ("auto" is right almost always).
      name: Loss name.

    Example:
      >>> model.compile("sgd", loss=tf_svmax.losses.RegularizedLoss(
      ...     "mse", [tf_svmax.losses.SVMaxLoss(lambda_=1.0)]))
    """

    ranks_embeddings = False  # a regularizer on the embeddings

    def __init__(self, lambda_=1.0, bounded=True, method="auto", name="svmax", **kwargs):
        fn_kwargs = dict(
            lambda_=checks.check_non_negative_number(lambda_, "lambda_"),
            bounded=checks.check_bool(bounded, "bounded"),
            method=checks.check_choice(method, "method", ops.METHODS),
        )
        super().__init__(svmax_loss, fn_kwargs, name=name, **kwargs)


@register
def ole_loss(y_true, y_pred, *, lambda_=0.25, delta=1.0, threshold=1e-6, num_classes=None):
    """The OLE loss as a loss function: ``lambda_ * tf_svmax.ops.ole_loss(y_true, y_pred)``.

    ``lambda_ * (sum_c max(delta, ||X_c||_*) - ||X||_*) / N`` with the published thresholded
    subgradient (OLE paper, seed `002`, Eq. 2, 5, 6); `tf_svmax.ops.ole_loss` is the unweighted
    penalty (``lambda_ = 1``), here weighted by the original's 0.25 by default.

    Args:
      y_true: `[N]` (or `[N, 1]`) integer class labels, any values (not cast to float, so large
        label values stay distinct).
      y_pred: `[N, D]` features (the OLE paper does not normalize them).
      lambda_: Weight, a float >= 0 (original: 0.25).
      delta: Floor on each class's nuclear norm (paper: 1.0).
      threshold: Singular values below it are dropped from the subgradient (original: 1e-6).
      num_classes: None (labels may be any integers), or the static number of classes C, the
        labels then being class ids in ``[0, C)``: XLA's layout with C SVDs instead of one per
        row of the batch (see `tf_svmax.ops.ole_loss` and `OLELoss`).

    Returns:
      A scalar of the dtype of `y_pred`; 0 for a batch with no rows.

    Raises:
      ValueError: `y_true` is None or an argument is invalid.

    Example:
      >>> ole_loss([0, 0, 1, 1], [[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
      ... # 0.25 * (2 + 2 - 2 sqrt(2)) / 4 = 0.0732
    """
    if y_true is None:
        raise ValueError(checks.invalid("y_true", "integer class labels", None))
    lambda_ = checks.check_non_negative_number(lambda_, "lambda_")
    return lambda_ * ops.ole_loss(
        y_true, y_pred, delta=delta, threshold=threshold, num_classes=num_classes
    )


@register
class OLELoss(BatchPenaltyLoss):
    """OLE loss as a Keras loss: `ole_loss`, ``lambda_ * tf_svmax.ops.ole_loss(y_true,
    y_pred)`` (OLE paper Eq. 2, 5, 6).

    `y_true` are integer class labels (`[N]` or `[N, 1]`, any values); they are not cast to
    float, so large label values stay distinct. The default weight 0.25 is the original's.

    Args:
      lambda_: Weight, a float >= 0 (original: 0.25).
      delta: Floor on each class's nuclear norm (paper: 1.0).
      threshold: Singular values below it are dropped from the subgradient (original: 1e-6).
      num_classes: None (labels may be any integers), or the static number of classes C, the
        labels then being class ids in ``[0, C)``: under XLA (`fit` on JAX, ``jit_compile=True``
        on TensorFlow) C SVDs of the `[N, D]` batch instead of N, one per row (see
        `tf_svmax.ops.ole_loss`).
      name: Loss name.

    OLE acts on the deep features of the penultimate layer, beside the classifier's
    cross-entropy on the logits (OLE paper Sec. 3-4), so the model outputs both:

    Example:
      >>> model = keras.Model(inputs, {"logits": logits, "features": features})
      >>> model.compile("sgd", loss={
      ...     "logits": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      ...     "features": tf_svmax.losses.OLELoss(num_classes=10)})

    Backends: the number of classes in a batch is data-dependent, which XLA cannot compile
    (`fit` on JAX, where Keras traces every loss; ``jit_compile=True`` on TensorFlow). Under XLA
    the loss takes a static layout instead, the same value and gradient: C SVDs of the batch
    with `num_classes`, N (one per row) without it, which costs more for large batches (a
    RuntimeWarning says so once). Without XLA (TensorFlow's ``jit_compile=False``, PyTorch,
    a direct call on JAX) one SVD per class present.
    """

    ranks_embeddings = False  # a regularizer on the embeddings

    def __init__(
        self, lambda_=0.25, delta=1.0, threshold=1e-6, num_classes=None, name="ole", **kwargs
    ):
        fn_kwargs = dict(
            lambda_=checks.check_non_negative_number(lambda_, "lambda_"),
            delta=checks.check_non_negative_number(delta, "delta"),
            threshold=checks.check_non_negative_number(threshold, "threshold"),
            num_classes=None,
        )
        if num_classes is not None:
            fn_kwargs["num_classes"] = checks.check_positive_int(num_classes, "num_classes")
        super().__init__(ole_loss, fn_kwargs, name=name, **kwargs)
