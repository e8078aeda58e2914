"""LORAC (seed 003, Eq. 11-13) on every Keras backend (TensorFlow, JAX, PyTorch) against a
float64 NumPy transcription: values and gradients of `lorac_loss` and
`ops.batched_nuclear_norm`, eager and compiled, and one SGD step of `fit` whose model hands the
mapping ``y_pred`` to `LORACLoss` from `compute_loss` (each backend in its own process)."""

import math

import keras
import numpy as np
import pytest
from keras import ops

from tests import backends
from tf_svmax.losses import LORACLoss, lorac_loss
from tf_svmax.ops import batched_nuclear_norm

pytestmark = pytest.mark.all_backends

# float32 against float64 references, relative to the largest reference entry.
RTOL = 1e-5
# The Gaussian prior's centre c0 = sqrt(5) (seed 003, Sec. 6), the library's default.
SQRT5 = math.sqrt(5.0)
PRIORS = [
    dict(prior="laplace", beta=2.0),
    dict(prior="laplace", beta=math.inf),
    dict(prior="gaussian", beta=2.0, center=2.0),
    dict(prior="margin", beta=2.0, constant=3.0),
]


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _log_prior(stacked, tau, prior, beta, center=SQRT5, constant=3.0):
    """log h(Q_i) of every instance (Eq. 11 and Sec. 6), from a float64 SVD."""
    m = stacked.shape[1]
    if math.isinf(beta):
        return np.zeros(len(stacked))
    if prior == "margin":
        return np.full(len(stacked), -constant / (m * beta * tau))
    norms = np.linalg.svd(stacked, compute_uv=False).sum(axis=-1)
    if prior == "laplace":
        return -norms / (m * beta * tau)
    return -((norms - center) ** 2) / (beta * m * tau)


def _reference(q, k, neg, tau=0.2, **prior):
    """Per-instance Eq. 12 in float64, written with the softmax ratio itself."""
    q, k, neg = (_unit(np.asarray(a, np.float64)) for a in (q, k, neg))
    log_h = _log_prior(np.concatenate([q, k[:, None]], axis=1), tau, **prior)
    positive = np.exp(np.einsum("nvc,nc->nv", q, k) / tau) * np.exp(log_h)[:, None]
    negative = np.exp(np.einsum("nvc,kc->nvk", q, neg) / tau).sum(axis=-1)
    return np.mean(-np.log(positive / (positive + negative)), axis=1)


def _inputs(rng, n=4, views=3, c=6, negatives=10):
    return (
        rng.standard_normal((n, views, c)).astype(np.float32),
        rng.standard_normal((n, c)).astype(np.float32),
        rng.standard_normal((negatives, c)).astype(np.float32),
    )


def _relative_error(got, expected):
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    return float(np.max(np.abs(got - expected)) / np.max(np.abs(expected)))


@pytest.mark.parametrize("prior", PRIORS, ids=lambda p: f"{p['prior']}-{p['beta']}")
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_value_and_query_gradient_match_numpy(rng, prior, compiled):
    q, k, neg = _inputs(rng)

    def mean_loss(queries):
        return ops.mean(lorac_loss(queries, k, neg, **prior))

    fn = backends.compiled(mean_loss) if compiled else mean_loss
    value, (grad,) = backends.value_and_grad(fn, q)
    expected = lambda x: np.mean(_reference(x, k, neg, **prior))  # noqa: E731
    assert _relative_error(value, expected(q)) < RTOL
    assert _relative_error(grad, backends.numpy_gradient(expected, q)) < RTOL
    per_instance = backends.to_numpy(lorac_loss(q, k, neg, **prior))
    assert _relative_error(per_instance, _reference(q, k, neg, **prior)) < RTOL


@pytest.mark.parametrize("scale", [1e20, 1e30, 1e38])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_rows_whose_squares_overflow_keep_their_direction(rng, scale, compiled):
    """A query view and a key scaled by 1e20 (float32 squares overflow above ~1e19): the rows
    are normalized, so the float64 reference is the unscaled one; before, ``rsqrt(inf) = 0``
    zeroed those rows (the all-zero input's value)."""
    q, k, neg = _inputs(rng)
    big_q, big_k = q.copy(), k.copy()
    big_q[0, 1] *= np.float32(scale)
    big_k[2] *= np.float32(scale)
    assert np.isfinite(big_q).all() and np.isfinite(big_k).all()
    fn = backends.compiled(lorac_loss) if compiled else lorac_loss
    got = backends.to_numpy(fn(big_q, big_k, neg))
    assert _relative_error(got, _reference(big_q, big_k, neg, beta=2.0, prior="laplace")) < RTOL
    # Its gradient stays finite (the rescale is piecewise constant).
    _, (grad,) = backends.value_and_grad(lambda x: ops.mean(lorac_loss(x, big_k, neg)), big_q)
    assert np.isfinite(grad).all()


def test_batched_nuclear_norm_and_its_gradient_match_numpy(rng):
    x = _unit(rng.standard_normal((5, 4, 7))).astype(np.float32)
    value, (grad,) = backends.value_and_grad(lambda a: ops.sum(batched_nuclear_norm(a)), x)
    svd = [np.linalg.svd(a.astype(np.float64), full_matrices=False) for a in x]
    assert _relative_error(value, sum(s.sum() for _, s, _ in svd)) < RTOL
    assert _relative_error(grad, np.stack([u @ vt for u, _, vt in svd])) < RTOL
    # Coinciding rows (the prior's minimum, rank 1: repeated zero singular values).
    same = np.repeat(x[:, :1], 4, axis=1)
    value, (grad,) = backends.value_and_grad(lambda a: ops.sum(batched_nuclear_norm(a)), same)
    assert _relative_error(value, 5 * 2.0) < RTOL  # ||Q||_* = sqrt(M) = 2 each
    assert np.isfinite(grad).all()


def test_batched_nuclear_norm_of_a_non_finite_matrix_is_nan(rng):
    """NaN in gives NaN out, on every backend (PyTorch's SVD raised a raw `_LinAlgError`, issue
    59 item 10); the other matrices keep their norms (NumPy's, the reference)."""
    x = _unit(rng.standard_normal((3, 4, 7))).astype(np.float32)
    x[1, 2, 3] = np.nan
    x[2, 0, 0] = np.inf
    got = backends.to_numpy(batched_nuclear_norm(x))
    assert np.isnan(got[1:]).all()
    assert _relative_error(got[0], np.linalg.svd(x[0].astype(np.float64))[1].sum()) < RTOL


def test_keras_class_reduces_and_weights_as_the_numpy_mean(rng):
    q, k, neg = _inputs(rng)
    y_pred = {"queries": q, "positive_keys": k, "negative_keys": neg}
    weights = np.arange(1.0, 5.0, dtype=np.float32)
    want = _reference(q, k, neg, prior="laplace", beta=2.0)
    got = backends.to_numpy(LORACLoss(beta=2.0)(None, y_pred))
    assert _relative_error(got, want.mean()) < RTOL
    got = backends.to_numpy(LORACLoss(beta=2.0)(None, y_pred, sample_weight=weights))
    assert _relative_error(got, np.mean(want * weights)) < RTOL
    with pytest.raises(ValueError, match="argument `sample_weight`"):
        LORACLoss()(None, y_pred, sample_weight=np.ones(3, np.float32))
    # Two weights per instance: named, not broadcast nor a raw shape error (issue 59 item 10).
    rows = len(y_pred["queries"])
    with pytest.raises(ValueError, match=rf"`sample_weight`.*\[B, 1\].*shape \({rows}, 2\)"):
        LORACLoss()(None, y_pred, sample_weight=np.ones((rows, 2), np.float32))
    with pytest.raises(ValueError, match="argument `y_pred`.*a mapping"):
        LORACLoss()(None, (q, k, neg))


class _QueryModel(keras.Model):
    """A linear query encoder; `compute_loss` (Keras' hook, on every backend) hands LORAC its
    mapping: the model's queries, the keys given as the second input, a fixed queue."""

    def __init__(self, negatives, loss, **kwargs):
        super().__init__(**kwargs)
        self.dense = keras.layers.Dense(negatives.shape[1], use_bias=False)
        self.negatives = negatives
        self.lorac = loss

    def call(self, inputs):
        features, _ = inputs
        return self.dense(features)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        _, keys = x
        y_pred = {"queries": y_pred, "positive_keys": keys, "negative_keys": self.negatives}
        return self.lorac(None, y_pred, sample_weight)


@pytest.mark.parametrize("prior", PRIORS[:1] + PRIORS[2:3], ids=["laplace", "gaussian"])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_one_sgd_step_of_fit_equals_the_numpy_step(rng, prior, compiled):
    """One full-batch SGD step moves the query encoder's W by ``-lr * dL/dW``, dL/dW by float64
    finite differences of the NumPy reference."""
    n, views, din, c = 4, 3, 5, 6
    features = rng.standard_normal((n, views, din)).astype(np.float32)
    _, keys, negatives = _inputs(rng, n=n, views=views, c=c)
    model = _QueryModel(negatives, LORACLoss(**prior), name="query_model")
    model([features, keys])  # builds the Dense layer
    w0 = (rng.standard_normal((din, c)) * 0.5).astype(np.float32)
    model.dense.kernel.assign(w0)
    if compiled:  # XLA on TensorFlow and JAX; Keras runs PyTorch eagerly
        kwargs = {"jit_compile": backends.BACKEND != "torch"}
    else:
        kwargs = {"run_eagerly": True}
    lr = 1.0  # a step as large as the gradient: float32 weights keep its digits
    model.compile(optimizer=keras.optimizers.SGD(lr), **kwargs)
    history = model.fit([features, keys], None, batch_size=n, shuffle=False, verbose=0)

    def expected(w):
        return np.mean(_reference(features @ w, keys, negatives, **prior))

    w0 = w0.astype(np.float64)
    assert _relative_error(history.history["loss"][0], expected(w0)) < RTOL
    step = backends.to_numpy(model.dense.kernel).astype(np.float64) - w0
    assert _relative_error(step, -lr * backends.numpy_gradient(expected, w0)) < RTOL
