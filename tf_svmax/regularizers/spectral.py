"""SVMax as a Keras activity regularizer."""

import keras
from keras import ops as kops

from tf_svmax import _backend, checks, ops


@keras.saving.register_keras_serializable(package="tf_svmax")
class SVMaxRegularizer(keras.regularizers.Regularizer):
    """SVMax penalty ``lambda_ * svmax(x)`` for ``activity_regularizer=``.

    Effective penalty: Keras >= 3.14 divides every activity-regularization value by the batch
    size before adding it to the model's losses, so as an activity regularizer this contributes
    ``lambda_ * svmax(E) / b`` per step (older Keras: ``lambda_ * svmax(E)``). To train with the
    paper's lambda, prefer ``RegularizedLoss(loss, [SVMaxLoss(lambda_)])``, which adds exactly
    ``lambda_ * svmax(E)``; or pass ``lambda_ = paper_lambda * b`` here.

    A single-row output (e.g. `predict` on one example) gets the defined penalty ``lambda_``
    (see `tf_svmax.ops.svmax`), never an error; an output with no rows gets 0.

    Under a `tf.distribute` strategy with more than one replica, ``global_batch=True``
    (default) evaluates the penalty on the global batch (every replica's rows) and returns
    ``lambda_ * svmax(E_global) * N * b_r / (b * N_r)`` on replica r (b_r its rows, b the
    global rows, N replicas of which N_r have rows): after Keras divides each replica's value
    by b_r and by N and sums the replicas' gradients, the update is the single-device one,
    ``lambda_ * svmax(E) / b``. For evenly split batches the returned value is the
    single-device value. ``global_batch=False`` penalizes each replica's rows alone.

    Args:
      lambda_: Weight, a float >= 0.
      bounded: Bounded (Eq. 4) or unbounded (Eq. 1) form.
      method: Spectral path (see `tf_svmax.ops.spectral`).
      global_batch: Evaluate on the global batch under a multi-replica strategy (see above).

    Example:
      >>> keras.layers.Dense(128, activity_regularizer=SVMaxRegularizer(lambda_=1.0))
    """

    def __init__(self, lambda_=1.0, bounded=True, method="auto", global_batch=True):
        self.global_batch = checks.check_bool(global_batch, "global_batch")
        self.lambda_ = checks.check_non_negative_number(lambda_, "lambda_")
        self.bounded = checks.check_bool(bounded, "bounded")
        self.method = checks.check_choice(method, "method", ops.METHODS)

    def __call__(self, x):
        # Returned in the compute dtype (float32 for float16/bfloat16 activations): Keras adds
        # activity losses to float32 totals and fails on a float16 value under mixed precision.
        # On JAX without x64, float64 input is computed in float32 and says so once.
        x = checks.to_tensor(x, "x")
        x = kops.cast(x, checks.compute_dtype(x.dtype))
        local_rows = kops.shape(x)[0]
        # A tf.distribute gather on TensorFlow; on JAX (DataParallel shows the global batch)
        # and PyTorch (one device) there is no replica context.
        context, (x,) = _backend.gather_global_batch(self.global_batch, x)
        value = checks.zero_unless_rows(
            x, lambda: self.lambda_ * ops.svmax(x, bounded=self.bounded, method=self.method)
        )
        if context is None:
            return value
        # Undo Keras' per-replica normalization (see the class docstring).
        return value * _backend.per_row_penalty_factor(context, local_rows, x.dtype)

    def get_config(self):
        return {
            "lambda_": self.lambda_,
            "bounded": self.bounded,
            "method": self.method,
            "global_batch": self.global_batch,
        }
