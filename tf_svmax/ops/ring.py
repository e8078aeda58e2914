"""The FIFO ring-buffer rule of the library's memories (`tf_svmax.training.momentum.NegativeQueue`,
`tf_svmax.losses.CrossBatchMemoryBank`), on `keras.ops` (TensorFlow, JAX, PyTorch).

Rows are written by a scatter on explicit slot indices, never by `keras.ops.slice_update`: on JAX
that is `dynamic_update_slice`, which clamps its start index so that the whole update fits, and a
write that wraps past the last row would land on the wrong rows.
"""

from keras import ops

from tf_svmax import _backend


def index_dtype():
    """The dtype of ring positions: int64, or int32 on JAX without 64-bit types (which has no
    int64; a ring of more than 2**31 rows cannot be allocated there anyway)."""
    return "int32" if _backend.jax_without_x64() else "int64"


def ring_slots(pointer, count, size):
    """``(slots, next_pointer)`` of a FIFO ring buffer of `size` rows whose oldest row is at
    `pointer`: the `count` (<= `size`) slots the next rows overwrite, in order (`[count]`, of
    `index_dtype`), and where the oldest row is afterwards."""
    dtype = index_dtype()
    pointer = ops.cast(pointer, dtype)
    # A Python count stays one for `arange`: under `jax.jit` its length must be static (a cast
    # count is a traced value there).
    steps = ops.arange(count, dtype=dtype) if isinstance(count, int) else None
    count = ops.cast(count, dtype)
    if steps is None:
        steps = ops.arange(count, dtype=dtype)
    slots = (pointer + steps) % size
    return slots, (pointer + count) % size


def ring_write(buffer, slots, rows):
    """`buffer` (`[size, ...]`) with `rows` (`[count, ...]`) written at `slots` (`ring_slots`'
    first result): a scatter on the explicit indices, right where the write wraps."""
    return ops.scatter_update(buffer, ops.expand_dims(slots, 1), ops.cast(rows, buffer.dtype))
