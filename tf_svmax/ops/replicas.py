"""The global batch under `tf.distribute`: gather the replicas' rows, hand each replica its own.

Batch-level penalties (SVMax, OLE, triplet mining, ...) are functions of the whole mini-batch,
not sums of per-row terms. Under a strategy with N replicas each replica holds b/N rows; these
helpers let a loss, regularizer or metric evaluate on the concatenation of every replica's rows
(in replica order, `ReplicaContext.all_gather`, which is differentiable: the gradient of a
gathered row flows back to the replica that owns it, summed over the replicas that used it).

Scaling: when every replica evaluates the same value on the same gathered batch and returns
``value / N``, the gradients Keras sums over the replicas equal the single-device gradient of
``value`` on the concatenated batch (the all-gather's gradient sums the N identical upstream
contributions, each 1/N). `scale_loss_for_distribution` is the library's one such scaling.

Splitting: a loss that is a sum over anchors (triplet mining, batch-hard) need not be evaluated
N times. Each replica computes only its own anchors (`own_row_range`) against the gathered
batch, its reference rows, b/N x b instead of b x b: its sums and their normalizers
(`tf_svmax.losses.LossPart`), the normalizers summed over the replicas (`sum_over_replicas`),
give its share of the value unscaled: the shares add up to the global value, and so do their
gradients.

The implementations are the backend's (`tf_svmax._backend`): `tf.distribute` on TensorFlow; on
JAX and PyTorch a single replica, where `gather_global_batch` returns no context (and nothing
calls the context's helpers) and `scale_loss_for_distribution` returns its value (under JAX's
`keras.distribution.DataParallel` every computation sees the global batch already).
"""

from tf_svmax import _backend

gather_global_batch = _backend.gather_global_batch
num_replicas_in_sync = _backend.num_replicas_in_sync
scale_loss_for_distribution = _backend.scale_loss_for_distribution

# The replica context's helpers, which exist where a context does (`tf.distribute`).
CONTEXT_HELPERS = (
    "cross_replica_context",
    "gather_rows",
    "own_row_range",
    "own_rows",
    "per_row_penalty_factor",
    "replica_row_counts",
    "sum_over_replicas",
)


def __getattr__(name):
    if name in CONTEXT_HELPERS and hasattr(_backend, name):
        return getattr(_backend, name)
    raise AttributeError(f"module 'tf_svmax.ops.replicas' has no attribute {name!r}")
