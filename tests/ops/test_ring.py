"""The ring-buffer rule (`tf_svmax.ops.ring`) against a Python deque-style reference, on every
backend: the slots a write takes, the next pointer, and a write that wraps past the last row
(where JAX's clamping `slice_update` would shift the rows)."""

import keras
import numpy as np
import pytest
from keras import ops

from tf_svmax.ops.ring import ring_slots, ring_write

pytestmark = pytest.mark.all_backends


@pytest.mark.parametrize(("pointer", "count", "size"), [(0, 3, 5), (3, 4, 5), (4, 5, 5), (2, 0, 5)])
def test_slots_and_next_pointer_follow_the_modular_rule(pointer, count, size):
    slots, after = ring_slots(pointer, count, size)
    assert ops.convert_to_numpy(slots).tolist() == [(pointer + i) % size for i in range(count)]
    assert int(ops.convert_to_numpy(after)) == (pointer + count) % size


def test_a_write_that_wraps_lands_on_the_slots_past_the_end_and_at_the_start(rng):
    size, pointer = 6, 4
    buffer = rng.standard_normal((size, 3)).astype(np.float32)
    rows = rng.standard_normal((4, 3)).astype(np.float32)
    slots, _ = ring_slots(pointer, len(rows), size)
    got = ops.convert_to_numpy(ring_write(ops.convert_to_tensor(buffer), slots, rows))
    want = buffer.copy()
    for i, row in enumerate(rows):
        want[(pointer + i) % size] = row  # rows 4, 5, then 0, 1
    np.testing.assert_array_equal(got, want)


def test_a_variable_written_by_assign_wraps_right():
    # The write as the memories do it: assign the scattered value to the variable.
    variable = keras.Variable(np.zeros((5, 2), np.float32), trainable=False)
    rows = np.arange(8, dtype=np.float32).reshape(4, 2) + 1.0
    slots, _ = ring_slots(3, 4, 5)
    variable.assign(ring_write(variable.value, slots, rows))
    want = np.zeros((5, 2), np.float32)
    want[[3, 4, 0, 1]] = rows
    np.testing.assert_array_equal(ops.convert_to_numpy(variable.value), want)
