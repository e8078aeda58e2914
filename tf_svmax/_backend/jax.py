"""Keras' JAX backend: the library's backend-specific primitives on JAX.

Imported by `tf_svmax._backend` on the JAX backend only (JAX is loaded already). One replica:
`keras.distribution.DataParallel` shows every computation the global batch, sharded by XLA.
"""

import jax
import numpy as np
from keras import ops

from tf_svmax._backend.common import (  # noqa: F401 (the API of this backend)
    after,
    at_least,
    boolean_mask_rows,
    checked_when_run,
    class_layout,
    concrete_numpy,
    gather_global_batch,
    hinge,
    in_stateless_scope,
    l2_normalize_rows,
    maximum,
    mean_in_dtype,
    num_replicas_in_sync,
    refuse_non_integers,
    row_blocks,
    scale_loss_for_distribution,
    set_diagonal,
    write_tensorboard_scalars,
)
from tf_svmax._backend.common import finite_scaled as _finite_scaled
from tf_svmax._backend.common import float64_squared as _float64_squared

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
    "dropped_by_step",
    "finite_scaled",
    "float64_squared",
    "gather_global_batch",
    "hinge",
    "in_a_step",
    "in_xla_context",
    "jax_without_x64",
    "l2_normalize_rows",
    "matmul",
    "maximum",
    "mean_in_dtype",
    "num_replicas_in_sync",
    "reduce_with_identity",
    "scale_loss_for_distribution",
    "searchsorted_rows",
    "set_diagonal",
    "slices_need_static_bounds",
    "stable_argsort_rows",
    "sum_over_row_blocks",
    "take",
    "take_rows",
    "write_tensorboard_scalars",
    "xla_eigh_is_fast",
]

# A JAX train step is a pure function that carries out only the variables the model tracks: a
# loss's state must live in a layer of the model, or its writes are lost at every step.
STATE_ONLY_IN_MODEL = True


def jax_without_x64():
    """True while `jax_enable_x64` is off (its default)."""
    return not jax.config.jax_enable_x64


def finite_scaled(x):
    """``(all_finite, x_scaled, scale)`` (`tf_svmax.ops._guards.finite_scaled`) as `keras.ops`,
    the exponent in float64, or in float32 without 64-bit types."""
    return _finite_scaled(x, "float32" if jax_without_x64() else "float64")


def float64_squared(a, b, unclamped):
    """``max(unclamped(a, b), 0)`` computed in float64, returned in `a`'s dtype (``unclamped``:
    the Gram expansion of squared distances, `tf_svmax.ops.distances`).

    Without `jax_enable_x64` (its default): forward and backward each run inside
    `jax.enable_x64` (a custom VJP, so that JAX never differentiates float64 values outside
    it); the inputs, outputs and gradients are float32. The backward is that of the expansion,
    ``2 (a_i sum_j g_ij - sum_j g_ij b_j)``, in float64 as on TensorFlow and PyTorch: exact
    enough beside the huge ``g_ij`` that ``sqrt`` gives duplicate rows (1 / (2 1e-6))."""
    if not jax_without_x64():
        return _float64_squared(a, b, unclamped)

    def as64(*xs):
        return [ops.cast(x, "float64") for x in xs]

    def expansion(a, b):
        """The float64 expansion (unclamped) and where its gradient passes the clamp."""
        with jax.enable_x64(True):
            raw = unclamped(*as64(a, b))
            return ops.cast(at_least(raw, 0.0), a.dtype), ops.logical_not(raw < 0.0)

    @jax.custom_vjp
    def squared(a, b):
        return expansion(a, b)[0]

    def forward(a, b):
        value, passes = expansion(a, b)
        return value, (a, b, passes)

    def backward(saved, upstream):
        a, b, passes = saved
        with jax.enable_x64(True):
            a64, b64, g = as64(a, b, ops.where(passes, upstream, ops.zeros_like(upstream)))
            grad_a = 2.0 * (a64 * ops.sum(g, axis=1)[:, None] - g @ b64)
            grad_b = 2.0 * (b64 * ops.sum(g, axis=0)[:, None] - ops.transpose(g) @ a64)
            return ops.cast(grad_a, a.dtype), ops.cast(grad_b, b.dtype)

    squared.defvjp(forward, backward)
    return squared(a, b)


def concrete_values(x):
    """`x` as NumPy where its values are known in Python (NumPy, lists, concrete arrays), else
    None (a JAX trace): for the checks that can only run on known values."""
    if not ops.is_tensor(x):
        return np.asarray(x)
    if isinstance(x, jax.core.Tracer):
        return None
    return concrete_numpy(x)


def in_a_step(y_pred):
    """True where a loss given the embeddings `y_pred` runs in a training step, whose model
    should hold the loss's state layers: a Keras `StatelessScope` (every train or evaluation
    step, jitted or not; Keras' symbolic build of the loss)."""
    return in_stateless_scope()


def checked_integer_floats(values, prefix, dtype_name):
    """`values` (a float tensor of dtype `dtype_name`) unchanged when every entry is a finite
    integer, else a ValueError, `prefix` followed by the first offending entry and its index
    (unchecked in a `jax.jit` trace, whose values are unknown and which has no run-time
    assertion)."""
    return refuse_non_integers(values, concrete_values(values), prefix, dtype_name)


def in_xla_context():
    """True inside any `jax.jit` trace, since all JAX compilation is XLA (Keras compiles JAX
    train steps by default); eager `jax.grad` is not."""
    # A new array is an abstract tracer exactly when a jit trace is being staged (also under
    # grad or vmap inside it); eagerly, jax.grad included, it is a concrete array.
    return isinstance(jax.numpy.zeros(()), jax.core.Tracer)


def matmul(a, b, *, transpose_a=False, transpose_b=False):
    """``op(a) op(b)`` in the operands' dtype (`keras.ops.matmul`'s type promotion returns
    float32 for float64 operands), asking for ``Precision.HIGHEST``: JAX's default on an
    Ampere/Hopper GPU is TF32 (a 10-bit mantissa) for float32 products, which put the SVMax
    gradient 3e-4 to 1e-3 relative from the float64 one and the Newton-Schulz value 1.7e-4
    (measured on an H200; ~1e-6 at HIGHEST), and moves the distances the miners compare. On a
    CPU it changes nothing."""
    a = ops.transpose(a) if transpose_a else a
    b = ops.transpose(b) if transpose_b else b
    return jax.numpy.matmul(a, b, precision=jax.lax.Precision.HIGHEST)


def reduce_with_identity(reduction, x, axis, keepdims=False):
    """``reduction(x, axis)`` with Keras' ``initial`` argument, the identity (JAX refuses an
    empty reduction without it)."""
    identity = float("inf") if reduction is ops.min else float("-inf")
    return reduction(x, axis=axis, keepdims=keepdims, initial=identity)


def dropped_by_step(variable):
    """True inside the `StatelessScope` of a Keras train or evaluation step (one that maps the
    model's variables to the step's values) that does not map `variable`: a variable outside
    the model, whose assignments the step drops (only the model's variables are carried out of
    it). False elsewhere, a bare `StatelessScope` (no mapping) included. Call it before any
    assignment in the step (an assignment adds its variable to the mapping). Keras has no public
    probe for the scope; the private one is read."""
    from keras.src.backend.common.stateless_scope import (  # noqa: PLC0415 (private, see above)
        get_stateless_scope,
    )

    scope = get_stateless_scope()
    if scope is None or not scope.state_mapping:
        return False
    return scope.get_current_value(variable) is None


# ---- Rows: sorting, searching, gathering, blockwise sums -----------------------------------------


def stable_argsort_rows(x):
    """Each row's sort order, ties in index order (`jnp.argsort` is stable)."""
    return ops.argsort(x, axis=1)


def searchsorted_rows(ordered, values, side):
    """Row-wise `searchsorted` of `values` `[m, n]` in the sorted rows of `ordered` `[m, b]`,
    int32: `jnp.searchsorted` mapped over the rows."""
    search = jax.vmap(lambda row, v: jax.numpy.searchsorted(row, v, side=side))
    return ops.cast(search(ordered, values), "int32")


def take(x, indices, axis=0):
    """`x` at the non-negative `indices` along `axis`: `keras.ops.take`."""
    return ops.take(x, indices, axis=axis)


def take_rows(x, indices):
    """``x[i, indices[i, j]]``: `keras.ops.take_along_axis`."""
    return ops.take_along_axis(x, indices, axis=1)


def sum_over_row_blocks(share, x, rows, block_elements):
    """``sum_blocks share(x, (start, count))`` (see `tf_svmax._backend.sum_over_row_blocks`),
    without recomputation, eagerly and under `jax.jit` (unrolled in the trace) where the batch
    size and the rows are static: XLA reuses one block's forward temporaries for the next,
    autodiff keeps every block's residuals (jax.checkpoint would re-trace the block, and the
    semi-hard miner's custom gradient closes over the block's label masks, which JAX refuses
    inside such a trace). Measured at b = 4,096, d = 128 (semi-hard, forward + backward, 2-core
    AMD EPYC): peak resident 2,050 MiB as one block, 1,792 MiB in blocks, 2.4 s a step instead
    of 3.9 s."""
    static_b = x.shape[0]
    static_rows = rows is None or all(isinstance(r, (int, np.integer)) for r in rows)
    if in_xla_context() and (static_b is None or not static_rows):
        return share(x, rows)
    if static_b is not None and static_b * static_b <= block_elements:
        return share(x, rows)
    total = ops.zeros([], x.dtype)
    for block in row_blocks(static_b, rows, block_elements):
        total = total + share(x, block)
    return total


# Computed on concrete labels outside `jax.jit` (no run-time assertions in a JAX trace).
RUN_TIME_ASSERTIONS = False
# Not measured faster on JAX: float64 eigenvectors for a float64 batch term (OLE).
FAST_FLOAT32_EIGH = False


def xla_eigh_is_fast():
    """Whether the Gram path (`eigh`) is the faster one under XLA: on JAX's CPU backend, whose
    `eigh` is a LAPACK call inside the compiled program (`tf_svmax.ops.spectral` has the
    measurements); JAX on a GPU is not measured: Newton-Schulz stays."""
    return jax.default_backend() == "cpu"


def slices_need_static_bounds():
    """True inside a `jax.jit` trace, where a slice's bounds must be static."""
    return in_xla_context()


# ---- Loss state (the moving centers of tf_svmax.losses.CenterLoss) ---------------------------

# A loss's variables live in a layer of the model (`STATE_ONLY_IN_MODEL`).
LOSS_STATE_IN_LAYERS = True


def center_sum_and_update(x, batch_centers, move, training):
    """``0.5 * sum((x - batch_centers)^2)`` with the centers held constant, calling
    ``move(x)`` (the centers' assignment) in the forward computation of a training step of a
    model holding the centers' layer (`training`, the flag of its forward pass, True, inside a
    Keras step's stateless scope: the write is carried out of the step as the layer's
    non-trainable weight). A JAX train step is a pure function whose backward pass cannot write
    a variable. (The flag outlives the step: a direct call after `fit`, outside any step, moves
    nothing.)"""
    diff = x - ops.stop_gradient(batch_centers)
    total = 0.5 * ops.sum(ops.square(diff))
    if training and in_stateless_scope():
        move(ops.stop_gradient(x))
    return total
