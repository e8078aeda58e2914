"""Keras losses for the SVD-based penalties: SVMax and OLE."""

import keras

from tf_svmax import _backend, checks, ops
from tf_svmax.losses._base import BatchPenaltyLoss


@keras.saving.register_keras_serializable(package="tf_svmax")
class SVMaxLoss(BatchPenaltyLoss):
    """SVMax regularizer as a label-oblivious Keras loss: ``lambda_ * svmax(y_pred)``.

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

    def __init__(self, lambda_=1.0, bounded=True, method="auto", name="svmax", **kwargs):
        super().__init__(name=name, **kwargs)
        self.lambda_ = checks.check_non_negative_number(lambda_, "lambda_")
        self.bounded = checks.check_bool(bounded, "bounded")
        self.method = checks.check_choice(method, "method", ops.METHODS)

    def call(self, y_true, y_pred):
        return self.lambda_ * ops.svmax(y_pred, bounded=self.bounded, method=self.method)

    def get_config(self):
        config = super().get_config()
        config.update(lambda_=self.lambda_, bounded=self.bounded, method=self.method)
        return config


@keras.saving.register_keras_serializable(package="tf_svmax")
class OLELoss(BatchPenaltyLoss):
    """OLE loss as a Keras loss: ``lambda_ * ole_loss(y_true, y_pred)`` (OLE paper Eq. 2, 5, 6).

    `y_true` are integer class labels (`[N]` or `[N, 1]`, any values); they are not cast to
    float, so large label values stay distinct. The default weight 0.25 is the original's.

    Args:
      lambda_: Weight, a float >= 0 (original: 0.25).
      delta: Floor on each class's nuclear norm (paper: 1.0).
      threshold: Singular values below it are dropped from the subgradient (original: 1e-6).
      num_classes: None (labels may be any integers), or the static number of classes C, the
        labels then being class ids in ``[0, C)``: what XLA needs (`fit` on JAX,
        ``jit_compile=True`` on TensorFlow), at the cost of C SVDs of the `[N, D]` batch (see
        `tf_svmax.ops.ole_loss`).
      name: Loss name.

    OLE acts on the deep features of the penultimate layer, beside the classifier's
    cross-entropy on the logits (OLE paper Sec. 3-4), so the model outputs both:

    Example:
      >>> model = keras.Model(inputs, {"logits": logits, "features": features})
      >>> model.compile("sgd", loss={
      ...     "logits": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      ...     "features": tf_svmax.losses.OLELoss()}, jit_compile=False)

    Backends: the number of classes in a batch is data-dependent, which XLA cannot compile, so
    without `num_classes` OLE never runs under XLA. TensorFlow: `fit` with
    ``jit_compile=False``. PyTorch: `fit` (Keras runs PyTorch eagerly). JAX: Keras traces every
    JAX loss (``jax.eval_shape`` to build the compiled loss, even with ``run_eagerly=True``), so
    `model.fit`/`evaluate` need ``OLELoss(num_classes=C)``; without it the loss runs only when
    called eagerly (``loss(y, features)``, `jax.grad` of it) and a trace raises a ValueError
    naming `num_classes`. With `num_classes` it runs everywhere, `jit_compile=True` included.
    """

    def __init__(
        self, lambda_=0.25, delta=1.0, threshold=1e-6, num_classes=None, name="ole", **kwargs
    ):
        super().__init__(name=name, **kwargs)
        self.lambda_ = checks.check_non_negative_number(lambda_, "lambda_")
        self.delta = checks.check_non_negative_number(delta, "delta")
        self.threshold = checks.check_non_negative_number(threshold, "threshold")
        if num_classes is not None:
            num_classes = checks.check_positive_int(num_classes, "num_classes")
        self.num_classes = num_classes

    def call(self, y_true, y_pred):
        if y_true is None:
            raise ValueError(checks.invalid("y_true", "integer class labels", None))
        traced = keras.backend.backend() == "jax" and _backend.in_xla_context()
        if traced and self.num_classes is None:
            # ole_loss refuses too, but its advice (jit_compile=False) does not help on JAX.
            raise ValueError(
                "OLELoss without num_classes cannot run inside a JAX trace (jax.jit, "
                "jax.eval_shape), so not in model.fit/evaluate on the JAX backend, which traces "
                "every loss: the number of classes in a batch is data-dependent. Pass the static "
                "number of classes, OLELoss(num_classes=C) with labels in [0, C), or call it "
                "eagerly (loss(y, features) or jax.grad of it)."
            )
        return self.lambda_ * ops.ole_loss(
            y_true,
            y_pred,
            delta=self.delta,
            threshold=self.threshold,
            num_classes=self.num_classes,
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            lambda_=self.lambda_,
            delta=self.delta,
            threshold=self.threshold,
            num_classes=self.num_classes,
        )
        return config
