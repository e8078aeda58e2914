"""Keras' PyTorch backend: the library's backend-specific primitives on PyTorch.

Imported by `tf_svmax._backend` on the PyTorch backend only (PyTorch is loaded already). PyTorch
runs eagerly (its shapes and values are concrete) on one device in Keras 3.15.
"""

import numpy as np
import torch
from keras import ops

from tf_svmax._backend.common import (  # noqa: F401 (the API of this backend)
    after,
    at_least,
    boolean_mask_rows,
    checked_when_run,
    class_layout,
    concrete_numpy,
    float64_squared,
    gather_global_batch,
    hinge,
    in_stateless_scope,
    l2_normalize_rows,
    maximum,
    mean_in_dtype,
    num_replicas_in_sync,
    refuse_non_integers,
    row_blocks,
    scale_exponent_cap,
    scale_loss_for_distribution,
    set_diagonal,
    write_tensorboard_scalars,
)

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

# PyTorch runs `fit` eagerly: a loss's own variable keeps its writes (JAX: `STATE_ONLY_IN_MODEL`).
STATE_ONLY_IN_MODEL = False


def jax_without_x64():
    """False: not JAX."""
    return False


def concrete_values(x):
    """`x` as NumPy: PyTorch's values are always known in Python."""
    if not ops.is_tensor(x):
        return np.asarray(x)
    return concrete_numpy(x)


def in_a_step(y_pred):
    """True where a loss given the embeddings `y_pred` runs in a training step, whose model
    should hold the loss's state layers: embeddings that carry gradient (PyTorch runs `fit`
    eagerly: a direct call on constant rows is not a step), or a Keras `StatelessScope` (Keras'
    symbolic build of the loss)."""
    if ops.convert_to_tensor(y_pred).requires_grad:
        return True
    return in_stateless_scope()


def checked_integer_floats(values, prefix, dtype_name):
    """`values` (a float tensor of dtype `dtype_name`) unchanged when every entry is a finite
    integer, else a ValueError, `prefix` followed by the first offending entry and its index."""
    return refuse_non_integers(values, concrete_values(values), prefix, dtype_name)


def in_xla_context():
    """False: Keras does not compile PyTorch with XLA."""
    return False


def dropped_by_step(variable):
    """False: PyTorch's steps run eagerly and keep every variable's writes."""
    return False


def matmul(a, b, *, transpose_a=False, transpose_b=False):
    """``op(a) op(b)`` in the operands' dtype (`keras.ops.matmul`'s type promotion returns
    float32 for float64 operands); PyTorch's float32 products are IEEE by default. ``op`` swaps
    the last two axes (`Tensor.mT`, a view: no copy, no Keras dispatch)."""
    a = a.mT if transpose_a else a
    b = b.mT if transpose_b else b
    return a @ b


def finite_scaled(x):
    """``(all_finite, x_scaled, scale)`` (`tf_svmax.ops._guards.finite_scaled`) in PyTorch's own
    operations, one reduction over `x`: `amax` propagates NaN, so the largest ``|x_ij|`` is
    finite exactly when every entry is. `frexp` splits it as ``m * 2^e`` with ``m`` in
    [0.5, 1), so ``floor(log2(max|x|)) = e - 1`` exactly, and ``2^(e - 1)`` is formed in float64
    (exact: float32's smallest scale, 2^-149, is a float64 normal number). Measured at 16 x 128
    (2-core AMD EPYC, one thread): ~15 us where the `keras.ops` form (`common.finite_scaled`),
    ~15 operations each converted and checked by Keras, took ~100 us."""
    max_abs = x.abs().amax()
    all_finite = torch.isfinite(max_abs)
    exponent = (torch.frexp(max_abs).exponent - 1).clamp(max=scale_exponent_cap(x.dtype))
    # Within 2^+-30 (and for an all-zero x) the scale stays 1 = 2^0.
    rescale = all_finite & (max_abs > 0) & (exponent.abs() > 30)
    scale = torch.exp2(torch.where(rescale, exponent, 0).to(torch.float64)).to(x.dtype)
    return all_finite, torch.where(all_finite, x, 0.0) / scale, scale


def reduce_with_identity(reduction, x, axis, keepdims=False):
    """``reduction(x, axis)``, the identity over an empty axis. Not Keras' ``initial``: Keras
    3.15.1 builds that tensor with `torch.full` on the CPU whatever the input's device, so a CUDA
    input fails ("Expected all tensors to be on the same device"). Its shapes are concrete: an
    input with no entries (whose reduction Keras refuses) is answered by `keras.ops.full` (on
    Keras' device), any other by the plain reduction."""
    if 0 not in x.shape:
        return reduction(x, axis=axis, keepdims=keepdims)
    identity = float("inf") if reduction is ops.min else float("-inf")
    shape = list(x.shape)
    if keepdims:
        shape[axis] = 1
    else:
        del shape[axis]
    return ops.full(shape, identity, dtype=x.dtype)


# ---- Rows: sorting, searching, gathering, blockwise sums -----------------------------------------


def stable_argsort_rows(x):
    """Each row's sort order, ties in index order (Keras calls `torch.argsort` with
    ``stable=True``)."""
    return ops.argsort(x, axis=1)


def searchsorted_rows(ordered, values, side):
    """Row-wise `searchsorted` of `values` `[m, n]` in the sorted rows of `ordered` `[m, b]`,
    int32: `torch.searchsorted`, which searches row by row."""
    return torch.searchsorted(
        ordered.contiguous(), values.contiguous(), right=side == "right", out_int32=True
    )


def take(x, indices, axis=0):
    """`x` at the non-negative `indices` along `axis`: `keras.ops.take`."""
    return ops.take(x, indices, axis=axis)


def take_rows(x, indices):
    """``x[i, indices[i, j]]``: `keras.ops.take_along_axis`."""
    return ops.take_along_axis(x, indices, axis=1)


def sum_over_row_blocks(share, x, rows, block_elements):
    """``sum_blocks share(x, (start, count))`` (see `tf_svmax._backend.sum_over_row_blocks`):
    one block for a small batch, else `_blockwise` over blocks of static size."""
    b = x.shape[0]
    if b * b <= block_elements:
        return share(x, rows)
    return _blockwise(share, x, row_blocks(b, rows, block_elements))


def _blockwise(share, x, blocks):
    """The shares summed without autograd state, the gradient recomputing each block under its
    own `torch.autograd.grad` (as the TensorFlow backend's `_blockwise`).

    Not `torch.utils.checkpoint`: it drops what a block saves with `save_for_backward`, but
    Keras' PyTorch `custom_gradient` keeps its gradient closure on the autograd node, so the
    semi-hard miner's distances, sort order and search positions stayed alive for every block
    until the backward pass. Measured at b = 4,096, d = 128 (benchmarks/backend_memory.py, 2-core
    AMD EPYC): the step's own memory, seen with glibc's mmap threshold fixed
    (``MALLOC_MMAP_THRESHOLD_=1048576``, so freed blocks go back to the system), was 663 MiB
    with checkpoint and is 405 MiB here; with glibc's defaults the resident peak grew from step to
    step (1,290 / 1,846 / 1,894 MiB after steps 1-3) and is now 1,339-1,546 MiB over 6 steps; a
    step takes ~5 s instead of ~14 s. Only `x` is differentiated: tensors `share` closes over
    get no gradient (the losses close over labels only), and there is no double backward."""

    class Blockwise(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            # Autograd is off inside `forward`: no block keeps state.
            total = torch.zeros((), dtype=x.dtype, device=x.device)
            for block in blocks:
                total = total + share(x, block)
            return total

        @staticmethod
        def backward(ctx, upstream):
            (x,) = ctx.saved_tensors
            gradient = torch.zeros_like(x)
            for block in blocks:
                with torch.enable_grad():
                    leaf = x.detach().requires_grad_(True)
                    value = share(leaf, block)
                    if not value.requires_grad:  # a block whose share is constant
                        continue
                    (block_gradient,) = torch.autograd.grad(value, leaf, allow_unused=True)
                if block_gradient is not None:
                    gradient += block_gradient
            return upstream * gradient

    return Blockwise.apply(x)


# PyTorch computes on concrete labels (it runs eagerly: nothing to assert at run time).
RUN_TIME_ASSERTIONS = False
# PyTorch's float64 SVD was both faster (5.5 ms against 6.9 ms for OLE and its gradient at
# 144 x 128, one CPU thread) and exact, where LAPACK's float32 eigenvectors missed the core's
# 1e-5: float64 eigenvectors for a float64 batch term.
FAST_FLOAT32_EIGH = False


def xla_eigh_is_fast():
    """False: Keras does not compile PyTorch with XLA."""
    return False


def slices_need_static_bounds():
    """False: PyTorch's shapes and values are concrete."""
    return False


# ---- Loss state (the moving centers of tf_svmax.losses.CenterLoss) ---------------------------

# A loss's variables live in a layer, to be saved with the model's weights.
LOSS_STATE_IN_LAYERS = True


def center_sum_and_update(x, batch_centers, move, training):
    """``0.5 * sum((x - batch_centers)^2)``, whose gradient w.r.t. `x` is ``upstream * (x -
    batch_centers)`` (the centers get none), calling ``move(x)`` (the centers' assignment) in
    the backward pass: exactly in training steps (`training`, the model's flag, is not
    needed)."""

    @ops.custom_gradient
    def forward(x):
        diff = x - batch_centers
        value = 0.5 * ops.sum(ops.square(diff))

        # Keras' PyTorch backend passes the upstream gradient by keyword.
        def grad(*args, upstream=None):
            move(x)
            return upstream * diff

        return value, grad

    return forward(x)
