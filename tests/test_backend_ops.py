"""`tf_svmax._backend`'s two computing helpers on every backend, against NumPy: `matmul` (the
library's one matrix product: the operands' dtype, transposes, full float32 precision on JAX)
and `reduce_with_identity` (max/min that also takes an empty axis)."""

import keras
import numpy as np
import pytest

from tests import backends
from tf_svmax import _backend

pytestmark = pytest.mark.all_backends


@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("transpose_b", [False, True])
def test_matmul_is_numpys_product(rng, transpose_a, transpose_b):
    a, b = rng.normal(size=(5, 4)), rng.normal(size=(4, 3))
    a_in = a.T.copy() if transpose_a else a
    b_in = b.T.copy() if transpose_b else b
    got = _backend.matmul(
        keras.ops.convert_to_tensor(a_in.astype("float32")),
        keras.ops.convert_to_tensor(b_in.astype("float32")),
        transpose_a=transpose_a,
        transpose_b=transpose_b,
    )
    assert keras.backend.standardize_dtype(got.dtype) == "float32"
    backends.assert_close(backends.to_numpy(got), a @ b, backends.RTOL32)


@pytest.mark.skipif(backends.BACKEND == "jax", reason="JAX without x64 has no float64")
def test_matmul_keeps_float64():
    a = np.arange(6.0).reshape(2, 3) / 7
    got = _backend.matmul(keras.ops.convert_to_tensor(a), keras.ops.convert_to_tensor(a.T))
    assert keras.backend.standardize_dtype(got.dtype) == "float64"
    np.testing.assert_allclose(backends.to_numpy(got), a @ a.T, rtol=1e-15)


@pytest.mark.skipif(backends.BACKEND != "jax", reason="the precision request is JAX's")
def test_matmul_asks_jax_for_full_float32_precision():
    """JAX's default on a GPU is TF32 for float32 products (a CPU computes in full precision
    either way, so the request itself is what can be checked here)."""
    import jax

    a = np.ones((2, 2), "float32")
    jaxpr = str(jax.make_jaxpr(lambda x, y: _backend.matmul(x, y, transpose_b=True))(a, a))
    assert "dot_general" in jaxpr and "HIGHEST" in jaxpr, jaxpr


@pytest.mark.parametrize("name", ["max", "min"])
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("shape", [(3, 4), (0, 4), (3, 0)])
def test_reduce_with_identity_is_numpys_with_initial(rng, name, keepdims, shape):
    x = rng.normal(size=shape).astype("float32")
    identity = -np.inf if name == "max" else np.inf
    expected = getattr(np, name)(x, axis=1, keepdims=keepdims, initial=identity)
    got = _backend.reduce_with_identity(
        getattr(keras.ops, name), keras.ops.convert_to_tensor(x), 1, keepdims=keepdims
    )
    got = backends.to_numpy(got)
    assert got.shape == expected.shape
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, expected)
