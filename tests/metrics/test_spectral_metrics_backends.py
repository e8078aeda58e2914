"""The spectral metrics (`MeanSingularValue`, `SingularValueBound`, `svmax_metrics`) on every
Keras backend (TensorFlow, JAX, PyTorch), against the float64 NumPy references: eagerly, under
the backend's compiler, and as compiled metrics in `fit` (eager and compiled). Their `.keras`
round trip across backends is tested with the regularizer's
(tests/regularizers/test_spectral_regularizers_backends.py)."""

import keras
import numpy as np
import pytest

from tests import backends
from tests import reference_spectral as ref
from tf_svmax.metrics import MeanSingularValue, SingularValueBound, svmax_metrics

pytestmark = pytest.mark.all_backends

RTOL = backends.RTOL32


def _result(metric):
    return float(backends.to_numpy(metric.result()))


def test_running_mean_over_batches_matches_numpy(rng):
    batches = [ref.unit_rows(rng, 40, 16), ref.unit_rows(rng, 10, 16)]
    metric = MeanSingularValue()
    for batch in batches:
        metric.update_state(None, batch)
    expected = np.mean([ref.singular_values(b).mean() for b in batches])
    backends.assert_close(_result(metric), expected, RTOL)
    metric.reset_state()
    assert _result(metric) == 0.0


def test_bounds_follow_each_batch_shape(rng):
    lower, upper = SingularValueBound("lower"), SingularValueBound("upper")
    for b in (40, 10):
        e = ref.unit_rows(rng, b, 16)
        lower.update_state(None, e)
        upper.update_state(None, e)
    bounds = [ref.original_bounds(40, 16), ref.small_batch_bounds(10, 16)]
    backends.assert_close(_result(lower), np.mean([b[0] for b in bounds]), 1e-6)
    backends.assert_close(_result(upper), np.mean([b[1] for b in bounds]), 1e-6)


def test_stateless_update_under_the_compiler_matches_numpy(rng):
    """Keras' stateless metric API (what JAX's train step uses) inside the backend's compiler
    (XLA on TensorFlow and JAX: "auto" is Newton-Schulz there, the Gram path on JAX's CPU)."""
    batches = [ref.unit_rows(rng, 40, 16), ref.unit_rows(rng, 24, 16)]
    metrics = svmax_metrics()

    def update(variables, y_pred):
        return [
            m.stateless_update_state(v, None, y_pred)
            for m, v in zip(metrics, variables, strict=True)
        ]

    step = backends.compiled(update)
    variables = [[v.value for v in m.variables] for m in metrics]
    for batch in batches:
        variables = step(variables, keras.ops.convert_to_tensor(batch))
    got = [
        float(backends.to_numpy(m.stateless_result(v)))
        for m, v in zip(metrics, variables, strict=True)
    ]
    bounds = [ref.original_bounds(40, 16), ref.original_bounds(24, 16)]
    backends.assert_close(got[0], np.mean([ref.singular_values(b).mean() for b in batches]), RTOL)
    backends.assert_close(got[1], np.mean([b[0] for b in bounds]), 1e-6)
    backends.assert_close(got[2], np.mean([b[1] for b in bounds]), 1e-6)


@pytest.mark.skipif(backends.BACKEND != "jax", reason="only JAX has no float64 by default")
def test_float64_input_on_jax_without_x64_is_float32_and_says_so(rng):
    from tf_svmax import _backend, checks  # noqa: PLC0415

    assert _backend.jax_without_x64()
    checks._WARNED.discard("jax-float64")
    e = ref.unit_rows(rng, 12, 4, dtype=np.float64)
    metric = MeanSingularValue()
    with pytest.warns(RuntimeWarning, match=r"float64 input \(`y_pred`\) is computed in float32"):
        metric.update_state(None, e)
    backends.assert_close(_result(metric), ref.singular_values(e).mean(), RTOL)


def test_a_batch_with_no_rows_is_skipped():
    metric, bound = MeanSingularValue(), SingularValueBound("upper")
    for y in (np.zeros((0, 4), np.float32), np.eye(4, dtype=np.float32)):
        metric.update_state(None, y)
        bound.update_state(None, y)
    assert _result(metric) == pytest.approx(1.0, rel=RTOL)  # s_mu of the identity
    assert _result(bound) == pytest.approx(1.0, rel=1e-6)  # U(b=4, d=4) = sqrt(4 / 4)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_fit_logs_the_numpy_values_of_the_batch(rng, compiled):
    """One full batch: the logged metrics are those of ``x @ W0`` (metrics see the forward
    pass before the update), against the float64 references."""
    b, d = 32, 8
    x = rng.standard_normal((b, 12)).astype(np.float32)
    model = keras.Sequential([keras.Input((12,)), keras.layers.Dense(d, use_bias=False)])
    w0 = (rng.standard_normal((12, d)) * 0.3).astype(np.float32)
    model.layers[0].kernel.assign(w0)
    compile_kwargs = (
        {"jit_compile": backends.BACKEND != "torch"} if compiled else {"run_eagerly": True}
    )
    model.compile(keras.optimizers.SGD(0.1), "mse", metrics=svmax_metrics(), **compile_kwargs)
    target = rng.standard_normal((b, d)).astype(np.float32)
    history = model.fit(x, target, batch_size=b, epochs=1, shuffle=False, verbose=0).history
    s = ref.singular_values(x.astype(np.float64) @ w0)
    lower, upper = ref.original_bounds(b, d)
    backends.assert_close(history["mean_singular_value"][0], s.mean(), RTOL)
    backends.assert_close(history["svmax_lower_bound"][0], lower, 1e-6)
    backends.assert_close(history["svmax_upper_bound"][0], upper, 1e-6)


def test_compiled_fit_over_batches_of_changing_size_logs_the_numpy_values(rng):
    """``jit_compile=True`` (PyTorch: `torch.compile`, which turns the changing batch size into
    a symbolic int: the metrics crashed at the second size, then logged NaN bounds) over
    batches of 8, 8 and 4 rows, d = 6 (the last batch has b < d): each logged metric is the
    mean over the batches of the float64 references, the embeddings fixed (learning rate 0)."""
    d = 6
    x = rng.standard_normal((20, 12)).astype(np.float32)
    model = keras.Sequential([keras.Input((12,)), keras.layers.Dense(d, use_bias=False)])
    w0 = (rng.standard_normal((12, d)) * 0.3).astype(np.float32)
    model.layers[0].kernel.assign(w0)
    model.compile(
        keras.optimizers.SGD(0.0),
        lambda y_true, y_pred: keras.ops.mean(y_pred),
        metrics=svmax_metrics(),
        jit_compile=True,
    )
    history = model.fit(x, np.zeros(20), batch_size=8, shuffle=False, verbose=0).history
    batches = np.split(x.astype(np.float64) @ w0, [8, 16])
    bounds = [ref.original_bounds(8, d), ref.original_bounds(8, d), ref.small_batch_bounds(4, d)]
    want = np.mean([ref.singular_values(b).mean() for b in batches])
    backends.assert_close(history["mean_singular_value"][0], want, RTOL)
    lower, upper = np.mean(bounds, axis=0)
    backends.assert_close(history["svmax_lower_bound"][0], lower, 1e-6)
    backends.assert_close(history["svmax_upper_bound"][0], upper, 1e-6)


def test_config_round_trip_and_bad_arguments():
    for metric in svmax_metrics(method="gram", global_batch=False):
        restored = keras.saving.deserialize_keras_object(
            keras.saving.serialize_keras_object(metric)
        )
        assert type(restored) is type(metric)
        assert restored.get_config() == metric.get_config()
    with pytest.raises(ValueError, match=r"argument `bound`"):
        SingularValueBound("middle")
    with pytest.raises(ValueError, match=r"argument `method`"):
        MeanSingularValue(method="x")
    with pytest.raises(ValueError, match=r"argument `y_pred`.*rank-2"):
        SingularValueBound("upper").update_state(None, np.zeros((2, 3, 4), np.float32))
