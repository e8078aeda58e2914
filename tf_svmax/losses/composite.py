"""`RegularizedLoss`: any Keras loss plus batch-level regularizers, in one `compile(loss=...)`."""

import re

import keras
from keras import ops

from tf_svmax import checks
from tf_svmax.losses._base import Loss
from tf_svmax.losses._registry import register


def _scope_name(name):
    """A valid name scope (TensorFlow's rules, the strictest of the backends) from a
    function's name ("<lambda>" -> "lambda")."""
    name = re.sub(r"[^A-Za-z0-9_.\-]", "", name).lstrip("_-")
    return name or "function_loss"


def _applied(y_true, y_pred, *, fn):
    """`FunctionLoss`' function: the wrapped one's per-sample values."""
    return fn(y_true, y_pred)


@register
class FunctionLoss(Loss):
    """Wraps a function ``fn(y_true, y_pred) -> per-sample values`` as a reducing Keras loss.

    What `model.compile` does to a bare loss function (Keras has no public class for it).
    """

    def __init__(self, fn, name=None, **kwargs):
        if isinstance(fn, str):
            fn = keras.losses.get(fn)
        if not callable(fn):
            raise ValueError(checks.invalid("fn", "a loss function fn(y_true, y_pred)", fn))
        name = name or _scope_name(getattr(fn, "__name__", ""))
        super().__init__(_applied, {"fn": fn}, name=name, **kwargs)


def as_loss(obj, arg):
    """Turns a Keras loss name, config, function or instance into a callable Loss instance."""
    if isinstance(obj, (str, dict)):
        obj = keras.losses.get(obj)
    if isinstance(obj, keras.losses.Loss):
        return obj
    if isinstance(obj, keras.regularizers.Regularizer):
        raise ValueError(
            checks.invalid(
                arg,
                "a loss fn(y_true, y_pred); a keras Regularizer takes one "
                "tensor (use tf_svmax.losses.SVMaxLoss instead of SVMaxRegularizer)",
                obj,
            )
        )
    if callable(obj):
        return FunctionLoss(obj)
    raise ValueError(checks.invalid(arg, "a Keras loss (instance, name or function)", obj))


@register
class RegularizedLoss(Loss):
    """``loss(y_true, y_pred) + sum_r r(y_true, y_pred)``.

    Adds batch-level regularizers (`SVMaxLoss`, `OLELoss`, ...) to any Keras loss (ours,
    Keras', or a user's). Each term applies its own reduction and `sample_weight`.

    Args:
      loss: The main loss: a `keras.losses.Loss`, a Keras loss name, or a function
        `fn(y_true, y_pred)` returning per-sample values.
      regularizers: A loss or a list of losses added to it (same accepted forms).
      name: Loss name.

    Example:
      >>> loss = RegularizedLoss(keras.losses.MeanSquaredError(), [SVMaxLoss(lambda_=0.1)])
      >>> model.compile(optimizer="sgd", loss=loss)
    """

    def __init__(self, loss, regularizers=(), name="regularized_loss", **kwargs):
        if not isinstance(regularizers, (list, tuple)):
            regularizers = [regularizers]
        # No function: `__call__` adds the terms, each reduced and weighted by itself. `Loss`
        # saves and restores both arguments, the nested losses serialized by Keras.
        arguments = dict(
            loss=as_loss(loss, "loss"),
            regularizers=[as_loss(r, "regularizers") for r in regularizers],
        )
        super().__init__(fn_kwargs=arguments, name=name, **kwargs)

    def __call__(self, y_true, y_pred, sample_weight=None):
        with keras.name_scope(self.name):
            total = self.loss(y_true, y_pred, sample_weight=sample_weight)
            for regularizer in self.regularizers:
                total = total + ops.cast(
                    regularizer(y_true, y_pred, sample_weight=sample_weight), total.dtype
                )
            return total

    def call(self, y_true, y_pred):
        return self(y_true, y_pred)
