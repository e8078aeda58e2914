"""Keras' TensorFlow backend: the library's backend-specific primitives, computed with
TensorFlow itself where its own operation is the original's (TFA's, the SVMax repository's)
numerics or the faster graph, and the `tf.distribute` global batch.

Imported by `tf_svmax._backend` on the TensorFlow backend only, so TensorFlow is imported here at
module level.
"""

import numpy as np
import tensorflow as tf
from keras import ops

from tf_svmax._backend.common import concrete_numpy, finite_scaled, float64_squared

__all__ = [
    "FAST_FLOAT32_EIGH",
    "LOSS_STATE_IN_LAYERS",
    "RUN_TIME_ASSERTIONS",
    "STATE_ONLY_IN_MODEL",
    "after",
    "at_least",
    "boolean_mask_rows",
    "center_sum_and_update",
    "checked_integer_floats",
    "checked_when_run",
    "class_layout",
    "concrete_values",
    "cross_replica_context",
    "dropped_by_step",
    "finite_scaled",
    "first_replica_variable",
    "float64_squared",
    "gather_global_batch",
    "gather_rows",
    "hinge",
    "in_a_step",
    "in_xla_context",
    "jax_without_x64",
    "l2_normalize_rows",
    "matmul",
    "maximum",
    "mean_in_dtype",
    "num_replicas_in_sync",
    "own_row_range",
    "own_rows",
    "per_row_penalty_factor",
    "reduce_with_identity",
    "replica_row_counts",
    "scale_loss_for_distribution",
    "searchsorted_rows",
    "set_diagonal",
    "slices_need_static_bounds",
    "stable_argsort_rows",
    "sum_over_replicas",
    "sum_over_row_blocks",
    "take",
    "take_rows",
    "write_tensorboard_scalars",
    "xla_eigh_is_fast",
]

# A loss's own variable is a step's state here (a `tf.function` writes it): nothing needs to live
# in the model for its writes to last (JAX: `STATE_ONLY_IN_MODEL`).
STATE_ONLY_IN_MODEL = False


def jax_without_x64():
    """False: not JAX."""
    return False


def concrete_values(x):
    """`x` as NumPy where its values are known in Python (NumPy, lists, eager tensors), else None
    (a TensorFlow graph): for the checks that can only run on known values."""
    if not ops.is_tensor(x):
        return np.asarray(x)
    if not tf.executing_eagerly():
        return None
    return concrete_numpy(x)


def dropped_by_step(variable):
    """False: a TensorFlow step keeps every variable's writes."""
    return False


def in_a_step(y_pred):
    """True where a loss given the embeddings `y_pred` runs in a training step, whose model
    should hold the loss's state layers: a TensorFlow graph (a `tf.function`: `fit`, or one's own
    compiled loop)."""
    return not tf.executing_eagerly()


def in_xla_context():
    """True inside a `tf.function(jit_compile=True)` (TensorFlow has no public API for this;
    the private helper is used when present, and its absence is reported as "not under XLA", so
    the library takes its default path)."""
    try:
        from tensorflow.python.ops import control_flow_util  # noqa: PLC0415 (private, optional)
    except ImportError:  # pragma: no cover - depends on the TensorFlow build
        return False
    graph = tf.compat.v1.get_default_graph()
    return bool(control_flow_util.GraphOrParentsInXlaContext(graph))


def matmul(a, b, *, transpose_a=False, transpose_b=False):
    """``op(a) op(b)`` with the transposes as `tf.linalg.matmul`'s flags, as the TensorFlow code
    this library started from (and TFA) wrote them: a materialized transpose rounds differently
    in the last bit (eagerly, and in gradients), which flips ``max(., 0)`` masks of duplicate
    rows."""
    return tf.linalg.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b)


def reduce_with_identity(reduction, x, axis, keepdims=False):
    """`tf.reduce_max`/`tf.reduce_min`, which give the identity over an empty axis themselves
    (Keras' `ops.max` asserts a non-empty tensor when eager, and with ``initial`` adds a `maximum`
    and its gradient's select over the result: the original's graph is the plain reduction)."""
    reduce = tf.reduce_min if reduction is ops.min else tf.reduce_max
    return reduce(x, axis=axis, keepdims=keepdims)


def at_least(x, floor):
    """``max(x, floor)`` for a Python float `floor`: `ops.maximum` (`tf.maximum`), one pass
    where the `where` of the other backends is a compare and a select, and the original's graph
    (02ac264's distances). It keeps NaN (in a graph and under XLA too), the dtype of `x`, and
    passes the gradient to `x` where ``x >= floor``; at a NaN `x` its gradient is 0 where the
    `where`'s is the upstream one, which a NaN loss makes NaN either way."""
    return ops.maximum(x, floor)


def hinge(x):
    """``max(x, 0)``: `ops.maximum`, which keeps NaN and the dtype on TensorFlow."""
    return ops.maximum(x, 0.0)


def maximum(a, b):
    """Elementwise max: `ops.maximum` (`tf.maximum`), in the operands' dtype on TensorFlow."""
    return ops.maximum(a, b)


def l2_normalize_rows(x):
    """`tf.math.l2_normalize` over the rows (the original's numerics)."""
    return tf.math.l2_normalize(x, axis=1)


def set_diagonal(x, diagonal):
    """`tf.linalg.set_diag`: one pass (the select on the identity of the other backends builds
    and reads an `[n, n]` mask, and its gradient selects again), the original's graph."""
    return tf.linalg.set_diag(x, diagonal)


def checked_when_run(x, assertion, shape=None):
    """`x` once `assertion(tf)` (a `tf.debugging` assertion built from the `tensorflow`
    module) has passed, with static `shape` set when given.

    The one place a check waits for run time: only TensorFlow traces functions whose shapes are
    unknown until they run (`tf.function` with None dimensions or an unknown rank)."""
    with tf.control_dependencies([assertion(tf)]):
        x = tf.identity(x)
    if shape is not None:
        x.set_shape(shape)
    return x


def checked_integer_floats(values, prefix, dtype_name):
    """`values` (a float tensor of dtype `dtype_name`) unchanged when every entry is a finite
    integer, else a ValueError (eagerly) or a run-time assertion (an InvalidArgumentError in a
    traced function), `prefix` followed by the first offending entry and its index: the message
    formatted by TensorFlow in both modes, so that the two read the same."""
    if in_xla_context():
        # XLA has no kernel for the message's `tf.strings.format` and drops assertions: unchecked
        # there, as in a JAX trace (see `tf_svmax.checks.integer_floats`).
        return values
    flat = tf.reshape(values, [-1])
    bad = tf.logical_not(tf.math.is_finite(flat) & tf.equal(flat, tf.round(flat)))
    # The first offending entry, padded so that an empty or valid tensor still indexes something
    # (the message is built either way, and only shown when an entry is bad).
    first = tf.argmax(tf.concat([tf.cast(bad, tf.int32), [1]], axis=0), output_type=tf.int32)
    example = tf.concat([flat, tf.zeros([1], flat.dtype)], axis=0)[first]
    # Formatted by TensorFlow in both modes, so the eager and the traced messages are the same.
    message = tf.strings.format(
        prefix.replace("{", "{{").replace("}", "}}")
        + f"<{dtype_name} tensor with {{}} at index {{}}>",
        (example, first),
    )
    any_bad = tf.reduce_any(bad)
    if tf.executing_eagerly():
        if bool(any_bad):
            raise ValueError(message.numpy().decode())
        return values
    check = tf.debugging.Assert(tf.logical_not(any_bad), [message])
    with tf.control_dependencies([check]):
        return tf.identity(values)


def after(value, fn):
    """``fn()`` run after `value` is computed, under a control dependency (in a graph, so that
    writes wait for the value and its run-time checks)."""
    with tf.control_dependencies([value]):
        fn()


# ---- Rows: sorting, searching, gathering, blockwise sums -----------------------------------------


def stable_argsort_rows(x):
    """Each row's sort order, ties in index order (`ops.argsort` is not stable on TensorFlow)."""
    return tf.argsort(x, axis=1, stable=True)


def searchsorted_rows(ordered, values, side):
    """Row-wise `searchsorted` of `values` `[m, n]` in the sorted rows of `ordered` `[m, b]`,
    int32: `tf.searchsorted`."""
    return tf.searchsorted(ordered, values, side=side)


def take(x, indices, axis=0):
    """`x` at the non-negative `indices` along `axis`: `tf.gather` (Keras' `take` adds a
    negative-index `where`, its comparison, an addition and a shape read at every call: the P x K
    contrastive loss's four takes made its step's graph 234 operations at b = 144 instead of
    194, against 193 before the port to `keras.ops`)."""
    return tf.gather(x, indices, axis=axis)


def take_rows(x, indices):
    """``x[i, indices[i, j]]``: `tf.gather` with ``batch_dims=1``, as the original wrote it
    (Keras' `take_along_axis` adds an int64 cast, two broadcasts and a negative-index `where`
    over `[m, n]` there, each call: about 5 % of the semi-hard step at b = 144)."""
    return tf.gather(x, indices, batch_dims=1)


def sum_over_row_blocks(share, x, rows, block_elements):
    """``sum_blocks share(x, (start, count))`` over blocks of the rows `rows` (all rows when
    None) of about `block_elements` distances each, with its gradient w.r.t. `x` (see
    `tf_svmax._backend.sum_over_row_blocks`): one block under `jit_compile` or for a small
    static batch, else `_blockwise` (also for a batch size known only when the step runs)."""
    static_b = x.shape[0]
    if in_xla_context():
        return share(x, rows)
    if static_b is not None and static_b * static_b <= block_elements:
        return share(x, rows)
    return _blockwise(share, x, rows, block_elements)


def _blockwise(share, x, rows, block_elements):
    """The shares summed in a `tf.while_loop`, the gradient recomputing each block under its own
    tape. Choosing between this and one block with `tf.cond` fails to differentiate under
    `tf.distribute` (nested in the base class's empty-batch `cond`, TF's cond gradient cannot
    resolve the captured gathered batch)."""
    b = tf.shape(x)[0]
    start, count = (0, b) if rows is None else rows
    per_block = tf.maximum(1, block_elements // tf.maximum(b, 1))
    blocks = (count + per_block - 1) // per_block

    def block(i):
        first = start + i * per_block
        return first, tf.minimum(per_block, start + count - first)

    @tf.custom_gradient
    def blockwise(x):
        total = tf.while_loop(
            lambda i, _: i < blocks,
            lambda i, total: (i + 1, total + share(x, block(i))),
            (0, tf.zeros([], x.dtype)),
        )[1]

        def grad(upstream):
            def step(i, gradient):
                with tf.GradientTape() as tape:
                    tape.watch(x)
                    value = share(x, block(i))
                return i + 1, gradient + tape.gradient(value, x)

            gradient = tf.while_loop(lambda i, _: i < blocks, step, (0, tf.zeros_like(x)))[1]
            return upstream * gradient

        return total, grad

    return blockwise(x)


# ---- The global batch under tf.distribute (the public face: tf_svmax.ops.replicas) ---------------


def num_replicas_in_sync():
    """How many replicas each compute a part of the batch: the `tf.distribute` strategy's."""
    return tf.distribute.get_strategy().num_replicas_in_sync


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


def scale_loss_for_distribution(value):
    """``value / N`` under a strategy with N > 1 replicas in sync (Keras sums their gradients):
    the library's one distribution scaling, as `keras.src.losses.loss.scale_loss_for_distribution`
    is Keras' own.

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


# ---- Labels and rows -----------------------------------------------------------------------------

# A traced TensorFlow function may hold values unknown until it runs, and checks them with
# run-time assertions (`checked_when_run`): class labels stay graph tensors there. JAX and PyTorch
# compute on concrete labels (NumPy) outside `jax.jit`.
RUN_TIME_ASSERTIONS = True


def class_layout(labels):
    """``(coords, num_classes, k_max)`` of `[N]` class labels: each row's class index (classes
    numbered in order of first appearance) and position inside its class as `[N, 2]` int32, the
    number of classes and the largest class, as graph tensors (no host round trip)."""
    _, class_index = tf.unique(labels, out_idx=tf.int32)
    num_classes = tf.reduce_max(class_index) + 1
    counts = tf.math.bincount(class_index, minlength=num_classes, dtype=tf.int32)
    # Stable sort by class; a row's position is its rank among the rows of its class.
    order = tf.argsort(class_index, stable=True)
    starts = tf.cumsum(counts, exclusive=True)
    position_sorted = tf.range(tf.size(labels)) - tf.gather(starts, tf.gather(class_index, order))
    position = tf.gather(position_sorted, tf.math.invert_permutation(order))
    coords = tf.stack([class_index, position], axis=1)
    return coords, num_classes, tf.reduce_max(counts)


def boolean_mask_rows(x, mask):
    """The rows of `x` where the bool `[N]` `mask` (a tensor or NumPy) holds: `tf.boolean_mask`
    (a graph's mask has a data-dependent count)."""
    return tf.boolean_mask(x, mask)


def mean_in_dtype(x, axis):
    """The mean over `axis` in `x`'s dtype: `keras.ops.mean` (`tf.reduce_mean`, the original's
    rounding; Grappler rewrites a division by a constant n into a product, which rounds
    differently)."""
    return ops.mean(x, axis=axis)


# ---- Speed facts ---------------------------------------------------------------------------------

# Whether float32 eigenvectors are the faster path for a float64 batch term (OLE): Eigen's float64
# eigensolver costs twice its float32 one (measured on TensorFlow).
FAST_FLOAT32_EIGH = True


def xla_eigh_is_fast():
    """False: TensorFlow's XLA compiles `eigh` to its own slow eigensolver."""
    return False


def slices_need_static_bounds():
    """False: TensorFlow slices with bounds known only when the graph runs, under XLA too."""
    return False


# ---- Loss state (the moving centers of tf_svmax.losses.CenterLoss) ---------------------------

# A loss's variables are its own (`first_replica_variable`), saved in its config: no layer needed.
LOSS_STATE_IN_LAYERS = False


def first_replica_variable(initial, name):
    """A non-trainable `tf.Variable` holding `initial`, whose updates under a strategy are the
    first replica's (``ONLY_FIRST_REPLICA``: every replica computes the same update from the
    global batch, and the first replica's is applied to every copy)."""
    return tf.Variable(
        initial,
        trainable=False,
        name=name,
        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
    )


def center_sum_and_update(x, batch_centers, move, training):
    """``0.5 * sum((x - batch_centers)^2)``, whose gradient w.r.t. `x` is ``upstream * (x -
    batch_centers)`` (the centers get none), calling ``move(x)`` (the centers' assignment) in
    the backward pass, before the gradient is returned: exactly in training steps (`training`,
    the model's flag, is not needed)."""

    @tf.custom_gradient
    def forward(x):
        diff = x - batch_centers
        value = 0.5 * tf.reduce_sum(tf.square(diff))

        def grad(upstream):
            with tf.control_dependencies([move(x)]):
                return tf.identity(upstream * diff)

        return value, grad

    return forward(x)


# ---- Summaries -----------------------------------------------------------------------------------


def write_tensorboard_scalars(writer, log_dir, step, scalars):
    """Writes `scalars` (tag -> float) at `step` as TensorBoard scalars with `writer` (a
    `tf.summary` file writer, created in `log_dir` when None) and returns the writer."""
    if writer is None:
        writer = tf.summary.create_file_writer(str(log_dir))
    with writer.as_default(step=step):
        for tag, value in scalars.items():
            tf.summary.scalar(tag, value)
    writer.flush()
    return writer
