"""SVMaxRegularizer on every Keras backend (TensorFlow, JAX, PyTorch), against the float64 NumPy
references: value and gradient (eager and compiled), the activity penalty Keras adds (divided by
the batch size on Keras >= 3.14), one SGD step of `fit` as a layer's activity and kernel
regularizer (eager and compiled), and a `.keras` file with the regularizer and the spectral
metrics saved on one backend and loaded on the other two (each in its own process)."""

import json

import keras
import numpy as np
import pytest

from tests import backends
from tests import reference_spectral as ref
from tf_svmax.metrics import svmax_metrics
from tf_svmax.regularizers import SVMaxRegularizer

pytestmark = pytest.mark.all_backends

RTOL = backends.RTOL32


def _keras_divides_activity_loss_by_batch_size():
    major, minor = (int(p) for p in keras.__version__.split(".")[:2])
    return (major, minor) >= (3, 14)


def _compiled_value_and_grad(fn, x):
    """`backends.value_and_grad` inside the backend's compiler (XLA on TensorFlow and JAX;
    PyTorch runs eagerly, as Keras' jit_compile="auto" does there)."""
    if backends.BACKEND == "tensorflow":
        import tensorflow as tf

        @tf.function(jit_compile=True)
        def step(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                value = fn(x)
            return value, tape.gradient(value, x)

        value, grad = step(tf.constant(x))
        return backends.to_numpy(value), backends.to_numpy(grad)
    if backends.BACKEND == "jax":
        import jax

        value, grad = jax.jit(jax.value_and_grad(fn))(x)
        return backends.to_numpy(value), backends.to_numpy(grad)
    value, (grad,) = backends.value_and_grad(fn, x)
    return value, grad


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("bounded", [True, False])
def test_value_and_gradient_match_numpy(rng, bounded, mode):
    e = ref.unit_rows(rng, 40, 16)
    reg = SVMaxRegularizer(lambda_=0.7, bounded=bounded)
    if mode == "compiled":
        # "auto" under XLA: Newton-Schulz (TensorFlow's jit_compile; jax.jit off a CPU), Gram
        # (jax.jit on a CPU).
        value, grad = _compiled_value_and_grad(reg, e)
    else:
        value, (grad,) = backends.value_and_grad(reg, e)
    expected, expected_grad = ref.svmax_reference(e, ref.original_bounds(40, 16), bounded=bounded)
    backends.assert_close(value, 0.7 * expected, RTOL)
    backends.assert_close(grad, 0.7 * expected_grad, RTOL)


def test_half_precision_output_is_penalized_in_float32(rng):
    e = ref.unit_rows(rng, 12, 4)
    value = SVMaxRegularizer(lambda_=0.5)(e.astype(np.float16))
    assert keras.backend.standardize_dtype(value.dtype) == "float32"
    expected, _ = ref.svmax_reference(e.astype(np.float16), ref.original_bounds(12, 4))
    backends.assert_close(backends.to_numpy(value), 0.5 * expected, RTOL)


@pytest.mark.skipif(backends.BACKEND != "jax", reason="only JAX has no float64 by default")
def test_float64_output_on_jax_without_x64_is_float32_and_says_so(rng):
    from tf_svmax import _backend, checks  # noqa: PLC0415

    assert _backend.jax_without_x64()
    checks._WARNED.discard("jax-float64")
    e = ref.unit_rows(rng, 12, 4, dtype=np.float64)
    with pytest.warns(RuntimeWarning, match=r"float64 input \(`x`\) is computed in float32"):
        value = SVMaxRegularizer(lambda_=0.5)(e)
    assert keras.backend.standardize_dtype(value.dtype) == "float32"
    expected, _ = ref.svmax_reference(e, ref.original_bounds(12, 4))
    backends.assert_close(backends.to_numpy(value), 0.5 * expected, RTOL)


def test_activity_penalty_keras_adds_on_the_installed_keras(rng):
    """Documented rule: Keras >= 3.14 divides the activity penalty by the batch size."""
    b = 24
    e = ref.unit_rows(rng, b, 6)
    layer = keras.layers.Activation("linear", activity_regularizer=SVMaxRegularizer(lambda_=2.0))
    layer(e)
    (added,) = layer.losses
    expected, _ = ref.svmax_reference(e, ref.original_bounds(b, 6))
    divisor = b if _keras_divides_activity_loss_by_batch_size() else 1
    backends.assert_close(backends.to_numpy(added), 2.0 * expected / divisor, RTOL)


def test_one_row_and_empty_outputs_get_the_defined_penalties():
    one = SVMaxRegularizer(lambda_=0.5)(np.ones((1, 4), np.float32))
    assert float(backends.to_numpy(one)) == 0.5
    value, (grad,) = backends.value_and_grad(SVMaxRegularizer(), np.zeros((0, 4), np.float32))
    assert float(value) == 0.0 and grad.shape == (0, 4)


def _compile_kwargs(compiled):
    if not compiled:
        return {"run_eagerly": True}
    # XLA on TensorFlow and JAX; Keras runs PyTorch eagerly ("auto" does the same there).
    return {"jit_compile": backends.BACKEND != "torch"}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_one_sgd_step_with_an_activity_regularizer_equals_the_numpy_step(rng, compiled):
    """``mse(x @ W, t) + lambda * svmax(x @ W) / b`` (Keras >= 3.14's division, else without
    it): one full-batch SGD step moves W by ``-lr * x^T dL/dy``, dL/dy from the references."""
    b, lam, lr = 32, 0.5, 0.1
    x = rng.standard_normal((b, 12)).astype(np.float32)
    target = rng.standard_normal((b, 8)).astype(np.float32)
    model = keras.Sequential(
        [
            keras.Input((12,)),
            keras.layers.Dense(8, use_bias=False, activity_regularizer=SVMaxRegularizer(lam)),
        ]
    )
    w0 = (rng.standard_normal((12, 8)) * 0.3).astype(np.float32)
    model.layers[0].kernel.assign(w0)
    model.compile(optimizer=keras.optimizers.SGD(lr), loss="mse", **_compile_kwargs(compiled))
    history = model.fit(x, target, batch_size=b, epochs=1, shuffle=False, verbose=0)
    y = x.astype(np.float64) @ w0
    svmax, svmax_grad = ref.svmax_reference(y, ref.original_bounds(b, 8))
    divisor = b if _keras_divides_activity_loss_by_batch_size() else 1
    diff = y - target
    backends.assert_close(
        history.history["loss"][0], np.mean(diff**2) + lam * svmax / divisor, RTOL
    )
    d_y = 2 * diff / diff.size + lam * svmax_grad / divisor
    step = backends.to_numpy(model.layers[0].kernel) - w0
    backends.assert_close(step, -lr * x.T.astype(np.float64) @ d_y, 1e-4)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_one_sgd_step_with_a_kernel_regularizer_equals_the_numpy_step(rng, compiled):
    """As a kernel regularizer Keras adds ``lambda * svmax(W)`` undivided: the step is
    ``-lr * (x^T dmse/dy + lambda * dsvmax/dW)``."""
    lam, lr = 0.3, 0.1
    x = rng.standard_normal((16, 12)).astype(np.float32)
    target = rng.standard_normal((16, 8)).astype(np.float32)
    reg = SVMaxRegularizer(lam, bounded=False)
    model = keras.Sequential(
        [keras.Input((12,)), keras.layers.Dense(8, use_bias=False, kernel_regularizer=reg)]
    )
    w0 = (rng.standard_normal((12, 8)) * 0.3).astype(np.float32)
    model.layers[0].kernel.assign(w0)
    model.compile(optimizer=keras.optimizers.SGD(lr), loss="mse", **_compile_kwargs(compiled))
    history = model.fit(x, target, batch_size=16, epochs=1, shuffle=False, verbose=0)
    w64 = w0.astype(np.float64)
    svmax, svmax_grad = ref.svmax_reference(w64, None, bounded=False)
    diff = x.astype(np.float64) @ w64 - target
    backends.assert_close(history.history["loss"][0], np.mean(diff**2) + lam * svmax, RTOL)
    d_w = x.T.astype(np.float64) @ (2 * diff / diff.size) + lam * svmax_grad
    step = backends.to_numpy(model.layers[0].kernel) - w0
    backends.assert_close(step, -lr * d_w, 1e-4)


def test_config_round_trip_and_bad_arguments():
    reg = SVMaxRegularizer(lambda_=0.3, bounded=False, method="svd", global_batch=False)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(reg))
    assert type(restored) is SVMaxRegularizer
    assert restored.get_config() == reg.get_config()
    with pytest.raises(ValueError, match=r"argument `lambda_`"):
        SVMaxRegularizer(lambda_=-0.1)
    with pytest.raises(ValueError, match=r"argument `method`"):
        SVMaxRegularizer(method="x")


# Loads the .keras file on another backend: prints its predictions, evaluated loss and metrics
# and the regularizer's config. `import tf_svmax` registers the library's classes.
LOAD = """
import json, sys, warnings
import numpy as np, keras
warnings.filterwarnings("ignore")
import tf_svmax
data = np.load(sys.argv[2])
model = keras.models.load_model(sys.argv[1])
result = model.evaluate(data["x"], data["y"], batch_size=16, verbose=0, return_dict=True)
print(json.dumps({
    "predict": np.asarray(model.predict(data["x"], verbose=0)).tolist(),
    "evaluate": result,
    "regularizer": model.layers[1].activity_regularizer.get_config(),
}))
"""


def _regularized_model():
    inputs = keras.Input((12,))
    x = keras.layers.Dense(8, activity_regularizer=SVMaxRegularizer(lambda_=0.5))(inputs)
    return keras.Model(inputs, keras.layers.UnitNormalization()(x))


def test_a_keras_file_loads_and_evaluates_the_same_on_the_next_backend(rng, tmp_path):
    """The regularizer and the spectral metrics in one file: the loss (with the activity
    penalty) and the metrics evaluated on another backend equal this backend's."""
    x = rng.standard_normal((32, 12)).astype(np.float32)
    y = ref.unit_rows(rng, 32, 8)
    model = _regularized_model()
    model.compile(
        optimizer=keras.optimizers.SGD(0.05),
        loss="mse",
        metrics=svmax_metrics(),
        jit_compile=False,
    )
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    path = tmp_path / "model.keras"
    model.save(path)
    np.savez(tmp_path / "data.npz", x=x, y=y)
    predicted = model.predict(x, verbose=0)
    evaluated = model.evaluate(x, y, batch_size=16, verbose=0, return_dict=True)
    assert set(evaluated) == {
        "loss",
        "mean_singular_value",
        "svmax_lower_bound",
        "svmax_upper_bound",
    }
    config = json.loads(json.dumps(model.layers[1].activity_regularizer.get_config()))
    backend = backends.next_backend()
    other = backends.run_script(LOAD, path, tmp_path / "data.npz", backend=backend, cwd=tmp_path)
    assert other["regularizer"] == config, backend
    np.testing.assert_allclose(other["predict"], predicted, atol=1e-6, err_msg=backend)
    assert set(other["evaluate"]) == set(evaluated), backend
    for name, value in evaluated.items():
        np.testing.assert_allclose(other["evaluate"][name], value, rtol=1e-5, err_msg=name)


# One SGD step of `mse` with an SVMax activity regularizer and the spectral metrics, under JAX's
# DataParallel over 4 host CPU devices and on one device, from the same weights and global batch
# (argv: the .npz file): prints both runs' logs and kernels.
DATA_PARALLEL = """
import json, os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
import numpy as np, keras
from tf_svmax.metrics import svmax_metrics
from tf_svmax.regularizers import SVMaxRegularizer

data = np.load(sys.argv[1])

def step(devices):
    keras.distribution.set_distribution(
        keras.distribution.DataParallel(devices=devices) if len(devices) > 1 else None
    )
    dim, out = data["w0"].shape
    reg = SVMaxRegularizer(float(data["lam"]))
    dense = keras.layers.Dense(out, use_bias=False, activity_regularizer=reg)
    model = keras.Sequential([keras.Input((dim,)), dense])
    model.layers[0].kernel.assign(data["w0"])
    model.compile(
        optimizer=keras.optimizers.SGD(float(data["lr"])),
        loss="mse",
        metrics=svmax_metrics(),
        jit_compile=True,
    )
    history = model.fit(
        data["x"], data["t"], batch_size=len(data["x"]), epochs=1, shuffle=False, verbose=0
    )
    logs = {name: values[0] for name, values in history.history.items()}
    return logs, np.asarray(model.layers[0].kernel).tolist()

devices = keras.distribution.list_devices("cpu")
assert len(devices) == 4, devices
print(json.dumps([step(devices[:1]), step(devices)]))
"""


@pytest.mark.skipif(backends.BACKEND != "jax", reason="keras.distribution is JAX's here")
def test_jax_data_parallel_step_equals_one_device_and_numpy(rng, tmp_path):
    """DataParallel shards the batch, but the regularizer and the metrics see the global batch:
    the 4-device logs and step are one device's, and the float64 NumPy ones."""
    b, lam, lr = 16, 0.5, 0.1
    x = rng.standard_normal((b, 12)).astype(np.float32)
    t = rng.standard_normal((b, 8)).astype(np.float32)
    w0 = (rng.standard_normal((12, 8)) * 0.3).astype(np.float32)
    np.savez(tmp_path / "data.npz", x=x, t=t, w0=w0, lam=lam, lr=lr)
    (logs_1, kernel_1), (logs_4, kernel_4) = backends.run_script(
        # a fresh process: the script sets XLA_FLAGS before importing Keras
        DATA_PARALLEL,
        tmp_path / "data.npz",
        backend="jax",
        cwd=tmp_path,
        fresh=True,
    )
    assert set(logs_4) == set(logs_1)
    for name, value in logs_1.items():
        assert logs_4[name] == pytest.approx(value, rel=1e-6), name
    np.testing.assert_allclose(kernel_4, kernel_1, rtol=1e-6, atol=1e-7)
    y = x.astype(np.float64) @ w0
    svmax, svmax_grad = ref.svmax_reference(y, ref.original_bounds(b, 8))
    divisor = b if _keras_divides_activity_loss_by_batch_size() else 1
    diff = y - t
    backends.assert_close(logs_4["loss"], np.mean(diff**2) + lam * svmax / divisor, RTOL)
    backends.assert_close(logs_4["mean_singular_value"], ref.singular_values(y).mean(), RTOL)
    backends.assert_close(logs_4["svmax_upper_bound"], ref.original_bounds(b, 8)[1], 1e-6)
    # Per-shard metrics (4 rows each, b < d) would log other bounds: the test can fail.
    assert not np.isclose(ref.small_batch_bounds(4, 8)[1], ref.original_bounds(b, 8)[1])
    d_y = 2 * diff / diff.size + lam * svmax_grad / divisor
    step = np.asarray(kernel_4) - w0
    backends.assert_close(step, -lr * x.T.astype(np.float64) @ d_y, 1e-4)
