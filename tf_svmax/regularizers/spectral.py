"""SVMax as a Keras activity regularizer."""

import keras
import tensorflow as tf

from tf_svmax import ops
from tf_svmax.losses.spectral import _check_method
from tf_svmax.ops import _checks


@keras.saving.register_keras_serializable(package="tf_svmax")
class SVMaxRegularizer(keras.regularizers.Regularizer):
    """SVMax penalty ``lambda_ * svmax(x)`` for ``activity_regularizer=``.

    Effective penalty: Keras >= 3.14 divides every activity-regularization value by the batch
    size before adding it to the model's losses, so as an activity regularizer this contributes
    ``lambda_ * svmax(E) / b`` per step (older Keras: ``lambda_ * svmax(E)``). To train with the
    paper's lambda, prefer ``RegularizedLoss(loss, [SVMaxLoss(lambda_)])``, which adds exactly
    ``lambda_ * svmax(E)``; or pass ``lambda_ = paper_lambda * b`` here.

    A single-row output (e.g. `predict` on one example) gets the defined penalty ``lambda_``
    (see `tf_svmax.ops.svmax`), never an error.

    Args:
      lambda_: Weight, a float >= 0.
      bounded: Bounded (Eq. 4) or unbounded (Eq. 1) form.
      method: Spectral path (see `tf_svmax.ops.spectral`).

    Example:
      >>> keras.layers.Dense(128, activity_regularizer=SVMaxRegularizer(lambda_=1.0))
    """

    def __init__(self, lambda_=1.0, bounded=True, method="auto"):
        self.lambda_ = _checks.check_non_negative_number(lambda_, "lambda_")
        self.bounded = _checks.check_bool(bounded, "bounded")
        self.method = _check_method(method)

    def __call__(self, x):
        # Returned in the compute dtype (float32 for float16/bfloat16 activations): Keras adds
        # activity losses to float32 totals and fails on a float16 value under mixed precision.
        x = tf.convert_to_tensor(x)
        x = tf.cast(x, _checks.compute_dtype(x.dtype))
        return self.lambda_ * ops.svmax(x, bounded=self.bounded, method=self.method)

    def get_config(self):
        return {"lambda_": self.lambda_, "bounded": self.bounded, "method": self.method}
