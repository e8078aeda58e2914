"""SVMaxLoss, OLELoss and RegularizedLoss on every Keras backend (TensorFlow, JAX, PyTorch),
against the float64 NumPy references: values, gradients, sample weights and reductions, one SGD
step of `fit` (eager and compiled), and a `.keras` file saved on one backend and loaded on the
other two (each in its own process, as Keras fixes its backend at import)."""

import json
import warnings

import keras
import numpy as np
import pytest

from benchmarks.reference_ole import ole_reference
from tests import backends
from tests import reference_spectral as ref
from tf_svmax import losses as L
from tf_svmax.losses import OLELoss, RegularizedLoss, SVMaxLoss, ole_loss, svmax_loss

pytestmark = pytest.mark.all_backends

# float32 against float64 references, relative to the largest reference entry.
RTOL = 1e-5


@pytest.fixture(autouse=True)
def _quiet_ole_float32():
    # JAX without jax_enable_x64 computes OLE in float32 and says so once (ops/ole.py).
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "tf_svmax: ole_loss computes in float64")
        yield


def _relative_error(got, expected):
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    return float(np.max(np.abs(got - expected)) / np.max(np.abs(expected)))


def _labels(n, classes):
    return np.repeat(np.arange(classes), n // classes).astype("int32")


@pytest.mark.parametrize("bounded", [True, False])
def test_svmax_loss_value_and_gradient_match_numpy(rng, bounded):
    e = ref.unit_rows(rng, 32, 8)
    loss = SVMaxLoss(lambda_=0.7, bounded=bounded)
    value, (grad,) = backends.value_and_grad(lambda x: loss(None, x), e)
    expected, expected_grad = ref.svmax_reference(e, ref.original_bounds(32, 8), bounded=bounded)
    assert _relative_error(value, 0.7 * expected) < RTOL
    assert _relative_error(grad, 0.7 * expected_grad) < RTOL


def test_ole_loss_value_and_gradient_match_the_reference(rng):
    x = rng.standard_normal((24, 6)).astype(np.float32)
    labels = _labels(24, 4)
    loss = OLELoss(lambda_=0.5)
    value, (grad,) = backends.value_and_grad(lambda e: loss(labels, e), x)
    expected, expected_grad = ole_reference(labels, x.astype(np.float64))
    assert _relative_error(value, 0.5 * expected) < RTOL
    assert _relative_error(grad, 0.5 * expected_grad) < RTOL


# float64 against the float64 references: agreement to rounding.
RTOL64 = 1e-10


@pytest.mark.parametrize("dtype", [np.float32, backends.FLOAT64])
@pytest.mark.parametrize("bounded", [True, False])
def test_svmax_loss_function_value_and_gradient_match_numpy(rng, bounded, dtype):
    e = ref.unit_rows(rng, 24, 8, dtype)
    value, (grad,) = backends.value_and_grad(
        lambda x: svmax_loss(None, x, lambda_=0.7, bounded=bounded), e
    )
    expected, expected_grad = ref.svmax_reference(e, ref.original_bounds(24, 8), bounded=bounded)
    rtol = RTOL if dtype == np.float32 else RTOL64
    assert value.dtype == dtype and grad.dtype == dtype
    assert _relative_error(value, 0.7 * expected) < rtol
    assert _relative_error(grad, 0.7 * expected_grad) < rtol
    # Default weight 1; the docstring's example: one direction is the maximum, e.
    assert _relative_error(backends.to_numpy(svmax_loss(None, e, bounded=bounded)), expected) < rtol
    assert float(backends.to_numpy(svmax_loss(None, [[1.0, 0.0]] * 4))) == pytest.approx(np.e)


@pytest.mark.parametrize("dtype", [np.float32, backends.FLOAT64])
def test_ole_loss_function_value_and_gradient_match_the_reference(rng, dtype):
    x = rng.standard_normal((24, 6)).astype(dtype)
    labels = _labels(24, 4)[rng.permutation(24)]
    rtol = RTOL if dtype == np.float32 else RTOL64
    # The default weight is the original's 0.25.
    value, (grad,) = backends.value_and_grad(lambda e: ole_loss(labels, e), x)
    expected, expected_grad = ole_reference(labels, x.astype(np.float64))
    assert value.dtype == dtype and grad.dtype == dtype
    assert _relative_error(value, 0.25 * expected) < rtol
    assert _relative_error(grad, 0.25 * expected_grad) < rtol
    # Every argument reaches the penalty: a delta above some classes' norms, the static ids.
    norms = [
        np.linalg.svd(x[labels == c].astype(np.float64), compute_uv=False).sum() for c in range(4)
    ]
    delta = float(np.median(norms))
    value, (grad,) = backends.value_and_grad(
        lambda e: ole_loss(labels, e, lambda_=0.5, delta=delta, num_classes=4), x
    )
    expected, expected_grad = ole_reference(labels, x.astype(np.float64), delta=delta)
    assert _relative_error(value, 0.5 * expected) < rtol
    assert _relative_error(grad, 0.5 * expected_grad) < rtol


def test_ole_loss_function_docstring_example():
    x = [[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]]
    got = float(backends.to_numpy(ole_loss([0, 0, 1, 1], x)))
    assert got == pytest.approx(0.25 * (4 - 2 * np.sqrt(2)) / 4, rel=RTOL)


def test_the_loss_functions_refuse_bad_arguments_by_name():
    x = np.eye(4, dtype=np.float32)
    labels = np.array([0, 0, 1, 1])
    for kwargs in (dict(lambda_=-1.0), dict(bounded=1), dict(method="qr")):
        (arg,) = kwargs
        with pytest.raises(ValueError, match=rf"argument `{arg}`.*Received"):
            svmax_loss(None, x, **kwargs)
    for kwargs in (dict(lambda_=-1.0), dict(delta=-1.0), dict(threshold="a"), dict(num_classes=0)):
        (arg,) = kwargs
        with pytest.raises(ValueError, match=rf"argument `{arg}`.*Received"):
            ole_loss(labels, x, **kwargs)
    with pytest.raises(ValueError, match=r"argument `y_true`.*integer class labels"):
        ole_loss(None, x)


@pytest.mark.skipif(backends.BACKEND == "torch", reason="Keras does not use XLA on PyTorch")
def test_ole_loss_function_under_xla_with_and_without_num_classes(rng):
    """Both static layouts XLA compiles (C class slots, or one per row) give the reference."""
    x = rng.standard_normal((16, 6)).astype(np.float32)
    labels = _labels(16, 4)
    want = 0.25 * ole_reference(labels, x.astype(np.float64))[0]
    for static in ({}, {"num_classes": 4}):
        got = backends.to_numpy(backends.compiled(lambda e, s=static: ole_loss(labels, e, **s))(x))
        assert _relative_error(got, want) < RTOL, static


def test_the_loss_functions_have_string_names_but_no_tensorflow_addons_ones(rng):
    assert L.get("tf_svmax>svmax_loss") is svmax_loss
    assert keras.losses.get("tf_svmax>ole_loss") is ole_loss
    custom = keras.saving.get_custom_objects()
    assert "Addons>svmax_loss" not in custom and "ole_loss" not in custom
    # `compile` by name: Keras evaluates the function on the batch (a scalar, its own mean).
    x = rng.standard_normal((32, 12)).astype(np.float32)
    model = _linear_model(rng)
    w0 = backends.to_numpy(model.layers[0].kernel).astype(np.float64)
    model.compile(loss="tf_svmax>svmax_loss", jit_compile=False)
    got = model.evaluate(x, np.zeros((32, 8), np.float32), batch_size=32, verbose=0)
    y = x.astype(np.float64) @ w0
    assert _relative_error(got, ref.svmax_reference(y, ref.original_bounds(32, 8))[0]) < RTOL


def test_regularized_loss_value_and_gradient(rng):
    e = ref.unit_rows(rng, 32, 8)
    target = rng.standard_normal((32, 8)).astype(np.float32)
    loss = RegularizedLoss("mse", [SVMaxLoss(lambda_=2.0)])
    value, (grad,) = backends.value_and_grad(lambda x: loss(target, x), e)
    svmax, svmax_grad = ref.svmax_reference(e, ref.original_bounds(32, 8))
    diff = e.astype(np.float64) - target
    assert _relative_error(value, np.mean(diff**2) + 2.0 * svmax) < RTOL
    assert _relative_error(grad, 2 * diff / diff.size + 2.0 * svmax_grad) < RTOL


def test_sample_weights_and_reductions_follow_the_closed_forms(rng):
    e = ref.unit_rows(rng, 20, 8)
    w = rng.uniform(size=20).astype(np.float32)
    value, _ = ref.svmax_reference(e, ref.original_bounds(20, 8))

    def run(reduction, weights):
        got = SVMaxLoss(reduction=reduction)(None, e, sample_weight=weights)
        return backends.to_numpy(got)

    assert _relative_error(run("sum_over_batch_size", None), value) < RTOL
    assert _relative_error(run("sum_over_batch_size", w), value * w.mean()) < RTOL
    assert _relative_error(run("sum_over_batch_size", w[:, None]), value * w.mean()) < RTOL
    assert _relative_error(run("sum", w), value * w.sum()) < RTOL
    assert _relative_error(run("none", w), value * w) < RTOL
    assert run("none", w).shape == (20,)
    assert _relative_error(run("sum", 2.0), 2 * value) < RTOL
    with pytest.raises(ValueError, match=r"argument `sample_weight`.*one weight per row"):
        run("sum", w[:7])
    with pytest.raises(ValueError, match=r"argument `reduction`"):
        SVMaxLoss(reduction="mean")


def test_a_batch_with_no_rows_gives_zero_with_a_zero_gradient():
    value, (grad,) = backends.value_and_grad(
        lambda x: SVMaxLoss()(None, x), np.zeros((0, 4), np.float32)
    )
    assert float(value) == 0.0 and grad.shape == (0, 4)


def _compile_kwargs(compiled):
    if not compiled:
        return {"run_eagerly": True}
    # XLA on TensorFlow and JAX; Keras runs PyTorch eagerly ("auto" does the same there).
    return {"jit_compile": backends.BACKEND != "torch"}


def _linear_model(rng):
    model = keras.Sequential([keras.Input((12,)), keras.layers.Dense(8, use_bias=False)])
    model.layers[0].kernel.assign(rng.standard_normal((12, 8)).astype(np.float32) * 0.3)
    return model


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_one_sgd_step_of_fit_equals_the_numpy_step(rng, compiled):
    """``mse + 0.5 * svmax`` on ``x @ W``: one full-batch SGD step moves W by
    ``-lr * x^T (dL/dy)``, dL/dy from the float64 references."""
    x = rng.standard_normal((32, 12)).astype(np.float32)
    target = rng.standard_normal((32, 8)).astype(np.float32)
    model = _linear_model(rng)
    w0 = backends.to_numpy(model.layers[0].kernel).astype(np.float64)
    model.compile(
        optimizer=keras.optimizers.SGD(0.1),
        loss=RegularizedLoss("mse", [SVMaxLoss(lambda_=0.5)]),
        **_compile_kwargs(compiled),
    )
    history = model.fit(x, target, batch_size=32, epochs=1, shuffle=False, verbose=0)
    y = x.astype(np.float64) @ w0
    svmax, svmax_grad = ref.svmax_reference(y, ref.original_bounds(32, 8))
    diff = y - target
    assert _relative_error(history.history["loss"][0], np.mean(diff**2) + 0.5 * svmax) < RTOL
    d_y = 2 * diff / diff.size + 0.5 * svmax_grad
    step = backends.to_numpy(model.layers[0].kernel) - w0
    assert _relative_error(step, -0.1 * x.T.astype(np.float64) @ d_y) < 1e-4


def _embedding_model():
    inputs = keras.Input((12,))
    x = keras.layers.Dense(16, activation="relu")(inputs)
    x = keras.layers.Dense(8)(x)
    return keras.Model(inputs, keras.layers.UnitNormalization()(x))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_fit_with_svmax_decreases_the_loss(rng, compiled):
    keras.utils.set_random_seed(0)
    x = rng.standard_normal((64, 12)).astype(np.float32)
    model = _embedding_model()
    model.compile(
        optimizer=keras.optimizers.SGD(0.5),
        loss=RegularizedLoss("mse", [SVMaxLoss(lambda_=1.0)]),
        **_compile_kwargs(compiled),
    )
    target = ref.unit_rows(rng, 64, 8)
    losses = model.fit(x, target, batch_size=64, epochs=8, verbose=0).history["loss"]
    assert np.all(np.isfinite(losses))
    assert losses[-1] < losses[0]


def test_fit_with_ole_and_svmax_decreases_the_loss(rng):
    keras.utils.set_random_seed(0)
    x = rng.standard_normal((64, 12)).astype(np.float32)
    model = _embedding_model()
    model.compile(
        optimizer=keras.optimizers.SGD(0.5),
        loss=RegularizedLoss(OLELoss(lambda_=1.0), [SVMaxLoss(lambda_=1.0)]),
        jit_compile=False,
    )
    losses = model.fit(x, _labels(64, 8), batch_size=64, epochs=8, verbose=0).history["loss"]
    assert np.all(np.isfinite(losses))
    assert losses[-1] < losses[0]


@pytest.mark.parametrize("num_classes", [8, None])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_one_sgd_step_of_fit_with_ole_equals_the_numpy_step(rng, compiled, num_classes):
    """``OLELoss(num_classes=8)`` on ``x @ W``, classes 6 and 7 absent from the batch, and
    ``OLELoss()`` on labels that are no class ids: one SGD step of `fit` (on JAX too, where
    Keras traces every loss; compiled: XLA on TensorFlow and JAX, with its static layouts)
    moves W by ``-lr * x^T (dL/dy)``, dL/dy from the float64 reference of the original."""
    x = rng.standard_normal((30, 12)).astype(np.float32)
    labels = _labels(30, 6)[rng.permutation(30)]
    if num_classes is None:
        labels = labels * 1000 - 7
    model = _linear_model(rng)
    w0 = backends.to_numpy(model.layers[0].kernel).astype(np.float64)
    lr = 1.0  # a step as large as the gradient: float32 weights keep its digits
    model.compile(
        optimizer=keras.optimizers.SGD(lr),
        loss=OLELoss(lambda_=0.5, num_classes=num_classes),
        **_compile_kwargs(compiled),
    )
    history = model.fit(x, labels, batch_size=30, epochs=1, shuffle=False, verbose=0)
    value, d_y = ole_reference(labels, x.astype(np.float64) @ w0)
    assert _relative_error(history.history["loss"][0], 0.5 * value) < RTOL
    step = backends.to_numpy(model.layers[0].kernel) - w0
    assert _relative_error(step, -lr * x.T.astype(np.float64) @ (0.5 * d_y)) < RTOL


@pytest.mark.parametrize(
    "loss",
    [
        SVMaxLoss(lambda_=0.3, bounded=False, reduction="sum"),
        OLELoss(lambda_=0.2, delta=0.5),
        OLELoss(num_classes=10),
        RegularizedLoss("mse", [SVMaxLoss(), OLELoss()]),
    ],
    ids=["svmax", "ole", "ole_num_classes", "regularized"],
)
def test_config_round_trip(loss):
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert type(restored) is type(loss)
    assert restored.get_config() == loss.get_config()


# Loads the .keras file on another backend: prints its predictions and evaluated loss.
LOAD = """
import json, sys, warnings
import numpy as np, keras
warnings.filterwarnings("ignore")
import tf_svmax.losses  # registers the classes
data = np.load(sys.argv[2])
model = keras.models.load_model(sys.argv[1])
result = model.evaluate(data["x"], data["y"], batch_size=16, verbose=0, return_dict=True)
print(json.dumps({
    "predict": np.asarray(model.predict(data["x"], verbose=0)).tolist(),
    "loss": result["loss"],
    "config": model.loss.get_config(),
}))
"""


def test_a_keras_file_loads_and_evaluates_the_same_on_the_next_backend(rng, tmp_path):
    x = rng.standard_normal((32, 12)).astype(np.float32)
    y = rng.permutation(np.arange(32) % 6)  # classes 0..5 of 8: two are absent
    model = _embedding_model()
    # A Keras loss inside ours, SVMax, and OLE with its static class count (its argument saved
    # and restored too).
    model.compile(
        optimizer=keras.optimizers.SGD(0.05),
        loss=RegularizedLoss(
            keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            [SVMaxLoss(lambda_=0.5), OLELoss(lambda_=0.5, num_classes=8)],
        ),
        jit_compile=False,
    )
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    path = tmp_path / "model.keras"
    model.save(path)
    np.savez(tmp_path / "data.npz", x=x, y=y)
    predicted = model.predict(x, verbose=0)
    loss = model.evaluate(x, y, batch_size=16, verbose=0, return_dict=True)["loss"]
    config = json.loads(json.dumps(model.loss.get_config()))
    backend = backends.next_backend()
    other = backends.run_script(LOAD, path, tmp_path / "data.npz", backend=backend, cwd=tmp_path)
    assert other["config"] == config, backend
    np.testing.assert_allclose(other["predict"], predicted, atol=1e-6, err_msg=backend)
    np.testing.assert_allclose(other["loss"], loss, rtol=1e-5, err_msg=backend)


# One SGD step of `mse + 0.5 * svmax` under JAX's DataParallel over 4 host CPU devices and on
# one device, from the same weights and global batch: prints both losses and kernels.
DATA_PARALLEL = """
import json, os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
import numpy as np, keras
from tf_svmax.losses import RegularizedLoss, SVMaxLoss

def step(devices):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 12)).astype("float32")
    target = rng.standard_normal((32, 8)).astype("float32")
    kernel = (rng.standard_normal((12, 8)) * 0.3).astype("float32")
    keras.distribution.set_distribution(
        keras.distribution.DataParallel(devices=devices) if len(devices) > 1 else None
    )
    model = keras.Sequential([keras.Input((12,)), keras.layers.Dense(8, use_bias=False)])
    model.layers[0].kernel.assign(kernel)
    loss = RegularizedLoss("mse", [SVMaxLoss(lambda_=0.5)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=loss, jit_compile=True)
    history = model.fit(x, target, batch_size=32, epochs=1, shuffle=False, verbose=0)
    return history.history["loss"][0], np.asarray(model.layers[0].kernel).tolist()

devices = keras.distribution.list_devices("cpu")
assert len(devices) == 4, devices
print(json.dumps([step(devices[:1]), step(devices)]))
"""


@pytest.mark.skipif(backends.BACKEND != "jax", reason="keras.distribution is JAX's here")
def test_jax_data_parallel_step_equals_one_device_step(tmp_path):
    """DataParallel shards the batch but the loss sees the global batch (no gather needed):
    SVMax, not a mean of per-row terms, gives the single-device loss and step on 4 devices."""
    (loss_1, kernel_1), (loss_4, kernel_4) = backends.run_script(
        # a fresh process: the script sets XLA_FLAGS before importing Keras
        DATA_PARALLEL,
        backend="jax",
        cwd=tmp_path,
        fresh=True,
    )
    assert loss_4 == pytest.approx(loss_1, rel=1e-6)
    np.testing.assert_allclose(kernel_4, kernel_1, rtol=1e-6, atol=1e-7)
