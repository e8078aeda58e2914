"""LORAC (seed 003, Eq. 11-13) against a float64 NumPy transcription of the equations."""

import json
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_svmax.losses import LORACLoss, lorac_loss
from tf_svmax.losses.lorac import batched_nuclear_norm


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _reference(q, k, neg, tau, log_h):
    """-1/(M-1) sum_m log(e^{qk+/tau} h / (e^{qk+/tau} h + sum_j e^{qk-_j/tau})), written with
    the ratio itself (float64, no log-sum-exp)."""
    q, k, neg = _unit(q), _unit(k), _unit(neg)
    out = []
    for i in range(len(q)):
        h = math.exp(log_h(np.concatenate([q[i], k[i][None]])))
        terms = []
        for m in range(q.shape[1]):
            pos = math.exp(q[i, m] @ k[i] / tau) * h
            terms.append(-math.log(pos / (pos + np.exp(neg @ q[i, m] / tau).sum())))
        out.append(np.mean(terms))
    return np.array(out)


def _inputs(rng, n=5, views=3, c=8, negatives=20):
    return (
        rng.standard_normal((n, views, c)),
        rng.standard_normal((n, c)),
        rng.standard_normal((negatives, c)),
    )


def _nuclear(x):
    return np.linalg.svd(x, compute_uv=False).sum()


@pytest.mark.parametrize("beta", [0.5, 2.0])
def test_laplace_prior_is_eq_12(rng, beta):
    q, k, neg = _inputs(rng)
    m = q.shape[1] + 1
    want = _reference(q, k, neg, 0.2, lambda Q: -_nuclear(Q) / (m * beta * 0.2))
    got = lorac_loss(q, k, neg, temperature=0.2, beta=beta)
    np.testing.assert_allclose(got, want, rtol=1e-10)


def test_gaussian_and_margin_priors(rng):
    q, k, neg = _inputs(rng, views=4)
    m = 5
    gauss = _reference(q, k, neg, 0.2, lambda Q: -((_nuclear(Q) - np.sqrt(5)) ** 2) / (2 * m * 0.2))
    np.testing.assert_allclose(lorac_loss(q, k, neg, beta=2.0, prior="gaussian"), gauss, rtol=1e-10)
    margin = _reference(q, k, neg, 0.2, lambda Q: -3.0 / (m * 2.0 * 0.2))
    np.testing.assert_allclose(lorac_loss(q, k, neg, beta=2.0, prior="margin"), margin, rtol=1e-10)


def test_infinite_beta_is_multi_query_infonce_and_m2_is_mocos(rng):
    q, k, neg = _inputs(rng, views=3)
    qn, kn, nn = _unit(q), _unit(k), _unit(neg)
    ce = keras.losses.CategoricalCrossentropy(from_logits=True, reduction=None)
    per_view = []
    for v in range(3):
        logits = np.concatenate([(qn[:, v] * kn).sum(1, keepdims=True), qn[:, v] @ nn.T], 1) / 0.2
        onehot = np.zeros_like(logits)
        onehot[:, 0] = 1
        per_view.append(ce(onehot, logits).numpy())
    got = lorac_loss(q, k, neg, beta=float("inf"))
    np.testing.assert_allclose(got, np.mean(per_view, axis=0), rtol=1e-6)
    moco = lorac_loss(q[:, :1], k, neg, beta=float("inf"))
    np.testing.assert_allclose(moco, per_view[0], rtol=1e-6)


def test_nuclear_norm_of_unit_rows_is_within_sqrt_m_and_m(rng):
    for m, c in [(4, 16), (8, 128), (3, 3)]:
        x = _unit(rng.standard_normal((50, m, c)))
        norms = batched_nuclear_norm(tf.constant(x)).numpy()
        np.testing.assert_allclose(norms, [_nuclear(a) for a in x], rtol=1e-10)
        assert (norms >= np.sqrt(m) - 1e-9).all() and (norms <= m + 1e-9).all()
        same = np.repeat(x[:, :1], m, axis=1)  # coinciding rows: rank 1, the minimum
        np.testing.assert_allclose(batched_nuclear_norm(tf.constant(same)), np.sqrt(m), rtol=1e-9)
    orthonormal = np.eye(6)[None, :4]  # orthogonal unit rows: the maximum M
    np.testing.assert_allclose(batched_nuclear_norm(tf.constant(orthonormal)), [4.0], rtol=1e-12)


@pytest.mark.parametrize("dtype, rtol", [("float16", 2e-3), ("bfloat16", 1e-2)])
@pytest.mark.parametrize("graph", [False, True], ids=["eager", "tf_function"])
def test_nuclear_norm_of_half_precision_input_is_computed_in_float32(rng, dtype, rtol, graph):
    # TensorFlow has no float16/bfloat16 SVD kernel (ContrastiveModel under mixed precision).
    x = tf.cast(tf.constant(_unit(rng.standard_normal((6, 4, 8)))), dtype)
    fn = tf.function(batched_nuclear_norm) if graph else batched_nuclear_norm
    norms = fn(x)
    assert norms.dtype == dtype  # cast back, as the library's half-precision convention
    # Against float64 NumPy on the same (rounded) half-precision values; the tolerance is the
    # result's rounding to the half dtype.
    want = [_nuclear(a) for a in tf.cast(x, tf.float64).numpy()]
    np.testing.assert_allclose(tf.cast(norms, tf.float64).numpy(), want, rtol=rtol)


def test_gradients_reach_the_queries_only_and_match_finite_differences(rng):
    q, k, neg = (tf.Variable(a) for a in _inputs(rng, n=2, views=2, c=5, negatives=6))
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(lorac_loss(q, k, neg, beta=1.0))
    gq, gk, gn = tape.gradient(loss, [q, k, neg])
    assert gk is None and gn is None
    base = q.numpy()
    numeric = np.zeros_like(base)
    for index in np.ndindex(base.shape):
        for sign in (1, -1):
            shifted = base.copy()
            shifted[index] += sign * 1e-6
            value = np.mean(lorac_loss(shifted, k.numpy(), neg.numpy(), beta=1.0))
            numeric[index] += sign * value / 2e-6
    np.testing.assert_allclose(gq, numeric, rtol=1e-5, atol=1e-8)


def test_gradient_is_finite_at_coinciding_views(rng):
    """The prior's minimum (all rows equal, rank 1) has repeated zero singular values."""
    k = _unit(rng.standard_normal((3, 8)))
    q = tf.Variable(np.repeat(k[:, None], 4, axis=1).astype(np.float32))
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(lorac_loss(q, k, rng.standard_normal((10, 8)), beta=2.0))
    assert np.isfinite(tape.gradient(loss, q).numpy()).all()


def test_keras_class_is_the_mean_and_round_trips(rng):
    q, k, neg = (a.astype(np.float32) for a in _inputs(rng))
    loss = LORACLoss(beta=2.0)
    value = loss(None, {"queries": q, "positive_keys": k, "negative_keys": neg})
    np.testing.assert_allclose(value, np.mean(lorac_loss(q, k, neg, beta=2.0)), rtol=1e-6)
    again = LORACLoss.from_config(loss.get_config())
    assert again.get_config() == loss.get_config()
    assert keras.losses.deserialize(keras.losses.serialize(loss)).beta == 2.0


@pytest.mark.parametrize(
    "kwargs, name",
    [(dict(beta=0.0), "beta"), (dict(temperature=0.0), "temperature"), (dict(prior="x"), "prior")],
)
def test_bad_arguments_are_named(kwargs, name):
    with pytest.raises(ValueError, match=f"argument `{name}`"):
        LORACLoss(**kwargs)


def _float32_inputs(rng, **kwargs):
    return tuple(a.astype(np.float32) for a in _inputs(rng, **kwargs))


@pytest.mark.parametrize(
    "change, name",
    [
        (lambda q, k, n: (q, k[:, :-1], n), "positive_keys"),  # C differs
        (lambda q, k, n: (q, k, n[:, :-1]), "negative_keys"),  # C differs
        (lambda q, k, n: (q, k[:-1], n), "positive_keys"),  # N differs
        (lambda q, k, n: (q[:, :0], k, n), "queries"),  # M = 1: no query view (NaN before)
        (lambda q, k, n: (q[0], k, n), "queries"),  # rank
    ],
)
def test_mismatched_or_degenerate_inputs_are_named(rng, change, name):
    q, k, n = change(*_float32_inputs(rng))
    with pytest.raises(ValueError, match=f"argument `{name}`.*Received"):
        lorac_loss(q, k, n)


def test_row_mismatch_in_a_traced_function_is_named(rng):
    q, k, n = _float32_inputs(rng)
    fn = tf.function(lambda q, k, n: lorac_loss(q, k, n)).get_concrete_function(
        tf.TensorSpec([None, 3, 8]), tf.TensorSpec([None, 8]), tf.TensorSpec([None, 8])
    )
    np.testing.assert_allclose(fn(q, k, n), lorac_loss(q, k, n), rtol=1e-6)
    with pytest.raises(tf.errors.InvalidArgumentError, match="argument `positive_keys`"):
        fn(q, k[:-1], n)


@pytest.mark.parametrize(
    "y_pred, match",
    [
        (lambda q, k, n: (q, k, n), "a mapping"),  # a tuple
        (lambda q, k, n: {"queries": q, "positive_keys": k}, "negative_keys"),
    ],
)
def test_keras_class_names_a_malformed_y_pred(rng, y_pred, match):
    with pytest.raises(ValueError, match=f"argument `y_pred`.*{match}"):
        LORACLoss()(None, y_pred(*_float32_inputs(rng)))


def test_keras_class_refuses_sample_weights_of_another_length(rng):
    q, k, n = _float32_inputs(rng)
    y_pred = {"queries": q, "positive_keys": k, "negative_keys": n}
    loss = LORACLoss()
    weighted = loss(None, y_pred, sample_weight=np.arange(5.0).reshape(5, 1))
    want = np.mean(lorac_loss(q, k, n) * np.arange(5.0))
    np.testing.assert_allclose(weighted, want, rtol=1e-6)
    for weights in (np.ones(3), np.ones(1)):
        with pytest.raises(ValueError, match="argument `sample_weight`"):
            loss(None, y_pred, sample_weight=weights)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(prior="gaussian", center=float("nan")), "center"),
        (dict(prior="gaussian", center=-1.0), "center"),  # c0 is a nuclear norm (>= 0)
        (dict(prior="margin", constant=float("nan")), "constant"),
        (dict(prior="margin", constant=-1e9), "constant"),  # a bonus, not a margin: loss 0
        (dict(prior="margin", constant=float("inf")), "constant"),
        (dict(beta=float("nan")), "beta"),
        (dict(beta=True), "beta"),
        (dict(temperature=float("inf")), "temperature"),
        (dict(temperature=np.float32(-1.0)), "temperature"),
    ],
)
def test_hyperparameters_outside_the_papers_range_are_named(rng, kwargs, name):
    with pytest.raises(ValueError, match=f"argument `{name}`"):
        lorac_loss(*_float32_inputs(rng), **kwargs)


def test_numpy_floats_are_accepted_as_python_floats(rng):
    q, k, n = _float32_inputs(rng)
    kwargs = dict(temperature=0.2, beta=2.0, center=2.0, constant=3.0)
    for prior in ("laplace", "gaussian", "margin"):
        want = lorac_loss(q, k, n, prior=prior, **kwargs)
        numpy_kwargs = {key: np.float32(value) for key, value in kwargs.items()}
        got = lorac_loss(q, k, n, prior=prior, **numpy_kwargs)
        np.testing.assert_allclose(got, want, rtol=1e-6)
    config = LORACLoss(beta=np.float32(2.0), constant=np.float32(3.0)).get_config()
    assert type(config["beta"]) is float and type(config["constant"]) is float
    json.dumps(config)  # what a .keras file does with it
