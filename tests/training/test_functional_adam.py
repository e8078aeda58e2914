"""FunctionalAdam and adam_update against Keras' own Adam."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_svmax import training


def test_adam_update_is_keras_adam():
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((3, 4)).astype(np.float32)
    var = keras.Variable(w0)
    opt = keras.optimizers.Adam(0.05, beta_1=0.5, beta_2=0.999, epsilon=1e-8)
    params, m, v, t = [tf.constant(w0)], [tf.zeros((3, 4))], [tf.zeros((3, 4))], tf.constant(0.0)
    for _ in range(3):
        g = rng.standard_normal((3, 4)).astype(np.float32)
        opt.apply([tf.constant(g)], [var])
        params, m, v, t = training.adam_update(
            params,
            [tf.constant(g)],
            m,
            v,
            t,
            learning_rate=0.05,
            beta_1=0.5,
            beta_2=0.999,
            epsilon=1e-8,
        )
    np.testing.assert_allclose(params[0], var.numpy(), rtol=1e-6, atol=1e-7)


def test_functional_adam_steps_like_keras_adam_and_keeps_its_state():
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal((5,)).astype(np.float32)
    ours, theirs = tf.Variable(w0), keras.Variable(w0)
    adam = training.FunctionalAdam([ours], 0.01, beta_1=0.8, beta_2=0.99, epsilon=1e-6)
    keras_adam = keras.optimizers.Adam(0.01, beta_1=0.8, beta_2=0.99, epsilon=1e-6)
    for _ in range(4):
        g = tf.constant(rng.standard_normal((5,)).astype(np.float32))
        adam.apply([g], [ours])
        keras_adam.apply([g], [theirs])
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6, atol=1e-7)
    assert float(adam.t.numpy()) == 4.0
    # A step on copies changes no variable until its state is adopted.
    m, v, t = adam.state()
    g = tf.ones((5,))
    params, m, v, t = adam.update([tf.convert_to_tensor(ours)], [g], m, v, t)
    assert float(adam.t.numpy()) == 4.0
    adam.assign_state(m, v, t)
    assert float(adam.t.numpy()) == 5.0
    np.testing.assert_array_equal(adam.m[0].numpy(), m[0].numpy())


def test_the_unrolled_step_has_a_finite_gradient_where_v_is_zero():
    """A weight with zero gradients so far (v = 0) gives 0, not NaN, through sqrt."""
    w = tf.constant([1.0, 2.0])
    with tf.GradientTape() as tape:
        tape.watch(w)
        params, _, _, _ = training.adam_update(
            [w],
            [w * tf.constant([0.0, 1.0])],
            [tf.zeros(2)],
            [tf.zeros(2)],
            tf.constant(0.0),
            learning_rate=0.1,
            beta_1=0.5,
            beta_2=0.999,
            epsilon=1e-8,
        )
        total = tf.reduce_sum(params[0])
    gradient = tape.gradient(total, w)
    assert np.isfinite(gradient.numpy()).all()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(learning_rate=0.0), "`learning_rate`"),
        (dict(beta_1=1.0), "`beta_1`.*in \\[0, 1\\)"),
        (dict(beta_2=-0.1), "`beta_2`"),
        (dict(epsilon=0.0), "`epsilon`"),
    ],
)
def test_functional_adam_refuses_bad_hyperparameters(kwargs, message):
    settings = {"learning_rate": 0.1, **kwargs}
    with pytest.raises(ValueError, match=message):
        training.FunctionalAdam([tf.Variable(1.0)], **settings)


def _numpy_adam(w, g, m, v, t, *, learning_rate, beta_1, beta_2, epsilon):
    """Float64 Adam in Keras' form (t counted from 1 after the step)."""
    m = beta_1 * m + (1 - beta_1) * g
    v = beta_2 * v + (1 - beta_2) * g * g
    step = learning_rate * np.sqrt(1 - beta_2**t) / (1 - beta_1**t)
    return w - step * m / (np.sqrt(v) + epsilon), m, v


def test_a_none_gradient_skips_its_variable_and_keeps_its_moments():
    rng = np.random.default_rng(2)
    hyper = dict(learning_rate=0.05, beta_1=0.8, beta_2=0.99, epsilon=1e-6)
    init = [rng.standard_normal(3), rng.standard_normal(3)]
    a, b = (tf.Variable(w.astype(np.float32)) for w in init)
    adam = training.FunctionalAdam([a, b], **hyper)
    ref = [[w.copy(), np.zeros(3), np.zeros(3)] for w in init]
    # Both, then only b (a's gradient None), then both again: the step count is shared.
    schedule = [(True, True), (False, True), (True, True)]
    for t, present in enumerate(schedule, start=1):
        grads = [rng.standard_normal(3).astype(np.float32) if p else None for p in present]
        adam.apply([None if g is None else tf.constant(g) for g in grads], [a, b])
        for state, g in zip(ref, grads, strict=True):
            if g is not None:
                w, m, v = state
                state[:] = _numpy_adam(w, g.astype(np.float64), m, v, t, **hyper)
        if not present[0]:
            np.testing.assert_allclose(adam.m[0].numpy(), ref[0][1], rtol=1e-6, atol=1e-7)
    assert float(adam.t.numpy()) == 3.0
    for variable, first, second, (w, m, v) in zip([a, b], adam.m, adam.v, ref, strict=True):
        np.testing.assert_allclose(variable.numpy(), w, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(first.numpy(), m, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(second.numpy(), v, rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match="argument `grads`.*at least one.*all None"):
        adam.apply([None, None], [a, b])


def test_apply_refuses_variables_other_than_the_built_ones_in_their_order():
    a, b = tf.Variable([1.0, 2.0], name="a"), tf.Variable([3.0, 4.0], name="b")
    adam = training.FunctionalAdam([a, b], 0.1)
    grads = [tf.ones(2), tf.ones(2)]
    with pytest.raises(ValueError, match=r"argument `variables`.*position 0: 'a:0'.*'b:0'"):
        adam.apply(grads, [b, a])
    other = tf.Variable([1.0, 2.0], name="a")  # the same name and shape: another variable
    with pytest.raises(ValueError, match="argument `variables`"):
        adam.apply(grads, [other, b])
    with pytest.raises(ValueError, match=r"argument `variables`.*<1 variables"):
        adam.apply(grads[:1], [a])
    with pytest.raises(ValueError, match="argument `grads`.*one gradient"):
        adam.apply(grads[:1], [a, b])
    # Nothing moved; the built order still steps (also traced).
    np.testing.assert_array_equal(a.numpy(), [1.0, 2.0])
    assert float(adam.t.numpy()) == 0.0
    tf.function(adam.apply)(grads, [a, b])
    assert float(adam.t.numpy()) == 1.0 and a.numpy()[0] < 1.0
