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
