"""The global batch under `tf.distribute`: gather the replicas' rows, hand each replica its own.

Batch-level penalties (SVMax, OLE, triplet mining, ...) are functions of the whole mini-batch,
not sums of per-row terms. Under a strategy with N replicas each replica holds b/N rows; these
helpers let a loss, regularizer or metric evaluate on the concatenation of every replica's rows
(in replica order, `ReplicaContext.all_gather`, which is differentiable: the gradient of a
gathered row flows back to the replica that owns it, summed over the replicas that used it).

Scaling: when every replica evaluates the same value on the same gathered batch and returns
``value / N``, the gradients Keras sums over the replicas equal the single-device gradient of
``value`` on the concatenated batch (the all-gather's gradient sums the N identical upstream
contributions, each 1/N).

Splitting: a loss that is a sum over anchors (triplet mining, batch-hard) need not be evaluated
N times. Each replica computes only its own anchors (`own_row_range`) against the gathered
batch, its reference rows, b/N x b instead of b x b: its sums and their normalizers
(`tf_svmax.losses.LossPart`), the normalizers summed over the replicas (`sum_over_replicas`),
give its share of the value unscaled: the shares add up to the global value, and so do their
gradients.
"""

import tensorflow as tf


def cross_replica_context():
    """The current `tf.distribute.ReplicaContext` when more than one replica is in sync, else None.

    None in cross-replica context and under the default (single-device) strategy: there is
    nothing to gather.
    """
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync < 2:
        return None
    return context


def gather_rows(context, value):
    """Concatenates `value`'s rows (axis 0) from every replica, in replica order.

    `None` and scalars (rank 0: nothing per row) pass through unchanged; a `tf.SparseTensor`
    (multi-label `y_true`) is densified first, as `all_gather` takes dense tensors only.
    """
    if value is None:
        return None
    if isinstance(value, tf.SparseTensor):
        value = tf.sparse.to_dense(value)
    value = tf.convert_to_tensor(value)
    if value.shape.rank == 0:
        return value
    if value.dtype in (tf.int64, tf.uint64):
        # MultiWorkerMirroredStrategy's all-gather fails on 64-bit integers ("destinations can
        # not be empty"); their bits travel exactly as pairs of int32.
        pairs = context.all_gather(tf.bitcast(value, tf.int32), axis=0)
        return tf.bitcast(pairs, value.dtype)
    if value.dtype == tf.bool:
        return tf.cast(context.all_gather(tf.cast(value, tf.int32), axis=0), tf.bool)
    gathered = context.all_gather(value, axis=0)
    return _dense_gradient(gathered) if gathered.dtype.is_floating else gathered


@tf.custom_gradient
def _dense_gradient(x):
    """Identity whose gradient is a dense tensor: `all_gather`'s gradient all-reduces the
    upstream gradient, which fails on the `IndexedSlices` a downstream `tf.gather` produces."""

    def grad(upstream):
        return tf.convert_to_tensor(upstream)

    return tf.identity(x), grad


def gather_global_batch(enabled, *values):
    """``(context, values)``: with `enabled` and more than one replica in sync, the replica
    context and every value's rows from all replicas (`gather_rows`); else ``(None, values)``
    unchanged. The one switch between global-batch and per-replica evaluation."""
    context = cross_replica_context() if enabled else None
    if context is None:
        return None, values
    return context, tuple(gather_rows(context, value) for value in values)


def replica_row_counts(context, rows):
    """`[N]` int32 row counts of every replica's batch (`rows`: this replica's count)."""
    return context.all_gather(tf.reshape(tf.cast(rows, tf.int32), [1]), axis=0)


def per_row_penalty_factor(context, rows, dtype):
    """``b_r * N / (b * N_r)`` on replica r (`rows` = b_r its rows, b the global rows, N
    replicas of which N_r have rows), as a scalar of `dtype`: a global-batch penalty times it,
    divided by b_r and by N per replica (Keras' activity-regularizer normalization) and summed
    over the replicas, is the single-device ``penalty / b``. Depends only on shapes, so it
    carries no gradient."""
    counts = tf.cast(replica_row_counts(context, rows), dtype)
    with_rows = tf.reduce_sum(tf.cast(counts > 0, dtype))
    return tf.cast(rows, dtype) * context.num_replicas_in_sync / (tf.reduce_sum(counts) * with_rows)


def own_row_range(context, rows):
    """``(start, count)``: where this replica's `rows` rows sit in the gathered batch."""
    counts = replica_row_counts(context, rows)
    replica = tf.cast(context.replica_id_in_sync_group, tf.int32)
    return tf.reduce_sum(counts[:replica]), counts[replica]


def own_rows(context, values, rows):
    """The entries of a gathered per-row tensor `values` that belong to this replica.

    Args:
      context: The replica context the rows were gathered in.
      values: A tensor whose axis 0 runs over the gathered (global) batch.
      rows: This replica's number of rows (an int or an int scalar tensor).
    """
    start, count = own_row_range(context, rows)
    return tf.gather(values, tf.range(start, start + count), axis=0)


def scale_to_replicas(value):
    """``value / N`` under a strategy with N > 1 replicas in sync (Keras sums their gradients).

    The same scaling as Keras' own "sum_over_batch_size" reduction.
    """
    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    if replicas > 1:
        value = value * tf.cast(1.0 / replicas, value.dtype)
    return value


def sum_over_replicas(context, value):
    """The sum of `value` (a count: no gradient) over the replicas, in `value`'s dtype.

    Summed in float64: exact for counts up to 2**53 (float32 stops at 2**24, and
    MultiWorkerMirroredStrategy's collectives fail on 64-bit integers, `gather_rows`)."""
    value = tf.stop_gradient(tf.convert_to_tensor(value))
    total = context.all_reduce(tf.distribute.ReduceOp.SUM, tf.cast(value, tf.float64))
    return tf.cast(total, value.dtype)
