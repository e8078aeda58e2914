"""Keras metrics that track the mean singular value of the embeddings and its SVMax bounds."""

import keras
from keras import ops as kops

from tf_svmax import _backend, checks, ops


class _RunningBatchMean(keras.metrics.Metric):
    """Mean over batches of a per-batch scalar `self.batch_value(y_pred)` (defined by each
    subclass; sample weights unused). Batches with no rows are skipped.

    Under a `tf.distribute` strategy with more than one replica, ``global_batch=True`` measures
    the global batch (every replica's rows, gathered): the value a single device would log.
    ``global_batch=False`` measures each replica's rows and averages over the replicas. On JAX,
    `keras.distribution.DataParallel` shows the metric the global batch already; PyTorch runs
    on one device.
    """

    def __init__(self, name, dtype=None, global_batch=True):
        super().__init__(name=name, dtype=dtype)
        self.global_batch = checks.check_bool(global_batch, "global_batch")
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def update_state(self, y_true, y_pred, sample_weight=None):
        # A metric only observes; no gradient flows through it.
        # On JAX without x64, float64 input is computed in float32 and says so once.
        y_pred = kops.cast(kops.stop_gradient(checks.to_tensor(y_pred, "y_pred")), self.dtype)
        # Under a strategy every replica adds the same global value and count: the sum-on-read
        # total and count are both N times one device's, so their ratio is one device's.
        _, (y_pred,) = _backend.gather_global_batch(self.global_batch, y_pred)
        value = checks.zero_unless_rows(
            y_pred, lambda: kops.cast(self.batch_value(y_pred), self.dtype)
        )
        # A Python count where the rows are known before the step runs (JAX, PyTorch), decided
        # by an `if`: `torch.compile` makes a varying batch size a SymInt, whose comparison (a
        # SymBool) no tensor conversion takes. Else (a TensorFlow graph) a run-time count.
        rows = checks.static_shape(y_pred)[0]
        if rows is None:
            has_rows = kops.cast(kops.shape(y_pred)[0] > 0, self.dtype)
        else:
            has_rows = 1.0 if rows > 0 else 0.0
        self.total.assign_add(value)
        self.count.assign_add(has_rows)

    def get_config(self):
        return {**super().get_config(), "global_batch": self.global_batch}

    def result(self):
        return kops.divide_no_nan(self.total, self.count)


@keras.saving.register_keras_serializable(package="tf_svmax")
class MeanSingularValue(_RunningBatchMean):
    """Running mean over batches of the batch's mean singular value ``s_mu``.

    The SVMax dissertation tracks ``s_mu`` during training (Fig. 3.5) and on the test split
    (Fig. 3.9). Use with `SingularValueBound` to log ``s_mu`` beside ``[L, U]`` in `fit`.

    Example:
      >>> model.compile(..., metrics=[MeanSingularValue(), SingularValueBound("lower"),
      ...                             SingularValueBound("upper")])
    """

    def __init__(self, name="mean_singular_value", dtype=None, method="auto", global_batch=True):
        super().__init__(name=name, dtype=dtype, global_batch=global_batch)
        if method not in ops.METHODS:
            raise ValueError(checks.invalid("method", f"one of {ops.METHODS}", method))
        self.method = method

    def batch_value(self, y_pred):
        return ops.mean_singular_value(kops.cast(y_pred, "float32"), method=self.method)

    def get_config(self):
        return {**super().get_config(), "method": self.method}


@keras.saving.register_keras_serializable(package="tf_svmax")
class SingularValueBound(_RunningBatchMean):
    """Running mean over batches of the SVMax lower (`L`) or upper (`U`) bound of ``s_mu``.

    The bounds depend only on each batch's shape ``(b, d)`` (`tf_svmax.ops.svmax_bounds`), so a
    smaller last batch is accounted for.

    Args:
      bound: ``"lower"`` or ``"upper"``.
      name: Defaults to ``"svmax_lower_bound"`` / ``"svmax_upper_bound"``.
    """

    def __init__(self, bound="upper", name=None, dtype=None, global_batch=True):
        if bound not in ("lower", "upper"):
            raise ValueError(checks.invalid("bound", "'lower' or 'upper'", bound))
        super().__init__(
            name=name or f"svmax_{bound}_bound", dtype=dtype, global_batch=global_batch
        )
        self.bound = bound

    def batch_value(self, y_pred):
        y_pred, _ = checks.float_matrix(y_pred, "y_pred")
        # Static ints where known (always on JAX and PyTorch), else TensorFlow's run-time sizes.
        rows, cols = kops.shape(y_pred)
        lower, upper = ops.svmax_bounds(rows, cols)
        return lower if self.bound == "lower" else upper

    def get_config(self):
        return {**super().get_config(), "bound": self.bound}


def svmax_metrics(method="auto", global_batch=True):
    """The three metrics that show ``s_mu`` with its ``[L, U]`` bounds during `fit`."""
    return [
        MeanSingularValue(method=method, global_batch=global_batch),
        SingularValueBound("lower", global_batch=global_batch),
        SingularValueBound("upper", global_batch=global_batch),
    ]
