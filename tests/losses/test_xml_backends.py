"""XMLLoss (seed 004, Eq. 2.10-2.11) on every Keras backend (TensorFlow, JAX, PyTorch) against a
float64 NumPy composition of the ridge fit and an explicit-loop batch-hard reference: value and
gradient eagerly, one SGD step of `fit` where the backend can run it (TensorFlow without XLA,
PyTorch), and the refusals where it cannot (XLA; any JAX trace, which `fit` always is)."""

import keras
import numpy as np
import pytest
import scipy.linalg
from keras import ops

from tests import backends
from tests import reference_ranking as ref
from tf_svmax.losses import BatchHardTripletLoss, XMLLoss
from tf_svmax.losses.xml import class_halves

# float32 against float64 references, relative to the largest reference entry.
RTOL = 1e-5
E, M = 6, 4  # embedding columns, prototype (histogram) columns
LAMBDA, RIDGE = 0.3, 0.05


def _base():
    return BatchHardTripletLoss(margin="soft", metric="sqeuclidean")


def _xml(**kwargs):
    return XMLLoss(_base(), num_prototypes=M, lambda_=LAMBDA, ridge=RIDGE, **kwargs)


def _ridge(z, y):
    a = np.concatenate([z, np.sqrt(RIDGE) * np.eye(z.shape[1])])
    return scipy.linalg.lstsq(a, np.concatenate([y, np.zeros((z.shape[1], y.shape[1]))]))[0]


def _reference(labels, y_pred):
    """Eq. 2.11 in float64: halves by first appearance, each predicted from the ridge fit to
    the other, L2-normalised, the base loss the mean of the explicit-loop batch-hard rows."""
    y_pred = np.asarray(y_pred, np.float64)
    emb, hist = y_pred[:, :-M], y_pred[:, -M:]
    _, first_rows = np.unique(labels, return_index=True)
    classes = labels[np.sort(first_rows)]
    first = np.isin(labels, classes[: (len(classes) + 1) // 2])
    predicted = np.empty_like(emb)
    for part in (first, ~first):
        predicted[part] = hist[part] @ _ridge(hist[~part], emb[~part])
    predicted /= np.linalg.norm(predicted, axis=1, keepdims=True)

    def f(y, x):
        return ref.batch_hard(y, x, "soft", "sqeuclidean").mean()

    cross = f(labels[first], predicted[first]) + f(labels[~first], predicted[~first])
    return (1 - LAMBDA) * f(labels, emb) + LAMBDA * cross


def _batch(rng, classes=4, k=4):
    labels = np.repeat(np.array([7, 2, 9, 4, 11, 0])[:classes], k)[rng.permutation(classes * k)]
    return labels.astype("int32"), rng.standard_normal((classes * k, E + M)).astype(np.float32)


def _relative_error(got, expected):
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    return float(np.max(np.abs(got - expected)) / np.max(np.abs(expected)))


def test_class_halves_split_the_classes_in_order_of_first_appearance():
    labels = np.array([5, 5, 2, 2, 9, 9, 1, 1, 4, 4], "int32")
    got = backends.to_numpy(class_halves(ops.convert_to_tensor(labels)))
    np.testing.assert_array_equal(got, [1, 1, 1, 1, 1, 1, 0, 0, 0, 0])


def test_value_and_gradient_match_numpy(rng):
    labels, y_pred = _batch(rng)
    value, (grad,) = backends.value_and_grad(lambda y: _xml()(labels, y), y_pred)
    assert _relative_error(value, _reference(labels, y_pred)) < RTOL
    want = backends.numpy_gradient(lambda y: _reference(labels, y), y_pred)
    assert _relative_error(grad, want) < RTOL


def test_zero_lambda_is_the_base_loss_on_every_backend_and_under_xla(rng):
    labels, y_pred = _batch(rng)
    xml = XMLLoss(_base(), num_prototypes=M, lambda_=0.0)
    fn = backends.compiled(lambda y: xml(labels, y))  # no halves: nothing data-dependent
    want = ref.batch_hard(labels, y_pred[:, :-M], "soft", "sqeuclidean").mean()
    assert _relative_error(backends.to_numpy(fn(y_pred)), want) < RTOL


def _model(rng):
    model = keras.Sequential([keras.Input((12,)), keras.layers.Dense(E + M, use_bias=False)])
    model.layers[0].kernel.assign(rng.standard_normal((12, E + M)).astype(np.float32) * 0.3)
    return model


@pytest.mark.skipif(backends.BACKEND == "jax", reason="JAX traces every loss in fit (below)")
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_one_sgd_step_of_fit_equals_the_numpy_step(rng, compiled):
    """One full-batch SGD step moves W by ``-lr * x^T dL/dy``; "compiled" is a TensorFlow graph
    (tf.function, no XLA: the halves' sizes are data-dependent); PyTorch runs eagerly."""
    labels, _ = _batch(rng)
    x = rng.standard_normal((len(labels), 12)).astype(np.float32)
    model = _model(rng)
    w0 = backends.to_numpy(model.layers[0].kernel).astype(np.float64)
    lr = 1.0  # a step as large as the gradient: float32 weights keep its digits
    kwargs = {"jit_compile": False} if compiled else {"run_eagerly": True}
    model.compile(optimizer=keras.optimizers.SGD(lr), loss=_xml(), **kwargs)
    history = model.fit(x, labels, batch_size=len(labels), shuffle=False, verbose=0)
    y = x.astype(np.float64) @ w0
    assert _relative_error(history.history["loss"][0], _reference(labels, y)) < RTOL
    d_y = backends.numpy_gradient(lambda y: _reference(labels, y), y)
    step = backends.to_numpy(model.layers[0].kernel) - w0
    assert _relative_error(step, -lr * x.T.astype(np.float64) @ d_y) < RTOL


@pytest.mark.skipif(backends.BACKEND == "torch", reason="Keras does not use XLA on PyTorch")
def test_xla_and_jax_fit_are_refused_with_the_fix(rng):
    labels, _ = _batch(rng)
    x = rng.standard_normal((len(labels), 12)).astype(np.float32)
    model = _model(rng)
    fix = "jit_compile=False" if backends.BACKEND == "tensorflow" else "On JAX call it eagerly"
    for kwargs in ({"jit_compile": True},) + (
        ({"jit_compile": False}, {"run_eagerly": True}) if backends.BACKEND == "jax" else ()
    ):
        model.compile(optimizer="sgd", loss=_xml(), **kwargs)
        with pytest.raises(ValueError, match=f"XMLLoss cannot .*{fix}"):
            model.fit(x, labels, batch_size=len(labels), verbose=0)
