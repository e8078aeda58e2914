"""tests/backends.py, the autodiff and compilation every backend's core tests rely on, against
closed forms: d/dx sum(x^2 * y) = 2xy, d/dy = x^2."""

import keras
import numpy as np
import pytest

from tests import backends

pytestmark = pytest.mark.all_backends


def _f(x, y):
    return keras.ops.sum(keras.ops.square(x) * y)


def test_value_and_grad_is_the_closed_form_on_this_backend(rng):
    # float32: JAX has no float64 unless x64 is enabled.
    x, y = (rng.normal(size=(3, 4)).astype("float32") for _ in range(2))
    value, (gx, gy) = backends.value_and_grad(_f, x, y)
    x, y = x.astype(float), y.astype(float)
    np.testing.assert_allclose(value, np.sum(x**2 * y), rtol=1e-5)
    np.testing.assert_allclose(gx, 2 * x * y, rtol=1e-5)
    np.testing.assert_allclose(gy, x**2, rtol=1e-5)


def test_compiled_and_graph_give_the_eager_value(rng):
    x, y = rng.normal(size=(3, 4)).astype("float32"), rng.normal(size=(3, 4)).astype("float32")
    for wrap in (backends.compiled, backends.graph):
        value = backends.to_numpy(wrap(_f)(x, y))
        np.testing.assert_allclose(value, np.sum(x.astype(float) ** 2 * y), rtol=1e-5)


def test_the_process_runs_the_backend_it_was_asked_for():
    import os

    assert (
        backends.BACKEND == keras.backend.backend() == os.environ.get("KERAS_BACKEND", "tensorflow")
    )
