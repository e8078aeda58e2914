"""MomentumEncoder and NegativeQueue against NumPy / deque references, in tf.function and
through a checkpoint."""

import collections

import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_svmax.training import MomentumEncoder, NegativeQueue


def _encoder(seed=0):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((3,))
    return keras.Model(inputs, keras.layers.Dense(2)(keras.layers.Dense(4)(inputs)))


def test_ema_follows_the_query_encoder():
    query = _encoder()
    ema = MomentumEncoder(query, momentum=0.9)
    want = [w.copy() for w in query.get_weights()]
    rng = np.random.default_rng(0)

    @tf.function
    def step():
        ema.update(query)

    for _ in range(3):
        new = [rng.standard_normal(w.shape).astype(np.float32) for w in want]
        query.set_weights(new)
        step()
        want = [0.9 * a + 0.1 * b for a, b in zip(want, new, strict=False)]
    for got, w in zip(ema.key_encoder.get_weights(), want, strict=False):
        np.testing.assert_allclose(got, w, rtol=1e-6)
    x = rng.standard_normal((5, 3)).astype(np.float32)
    with tf.GradientTape() as tape:
        out = ema(x)
    assert not ema.trainable_weights and tape.gradient(out, ema.key_encoder.weights[0]) is None


def test_queue_is_fifo_and_resumes_from_a_checkpoint(tmp_path):
    queue = NegativeQueue(size=5, dim=2, seed=3)
    initial = queue().numpy()
    np.testing.assert_allclose(np.linalg.norm(initial, axis=1), 1.0, rtol=1e-6)
    reference = collections.deque([tuple(r) for r in initial], maxlen=5)
    rng = np.random.default_rng(0)
    enqueue = tf.function(queue.enqueue)
    for count in (2, 3, 4):
        keys = rng.standard_normal((count, 2)).astype(np.float32)
        enqueue(keys)
        reference.extend(tuple(r) for r in keys)
    got = queue().numpy()
    # A ring buffer: the same set of rows as the deque's (order is by slot, not age).
    assert sorted(map(tuple, got)) == sorted(reference)
    assert int(queue.pointer.numpy()) == (2 + 3 + 4) % 5
    checkpoint = tf.train.Checkpoint(queue=queue)
    path = checkpoint.save(str(tmp_path / "q"))
    restored = NegativeQueue(size=5, dim=2, seed=99)
    tf.train.Checkpoint(queue=restored).restore(path).assert_consumed()
    np.testing.assert_array_equal(restored().numpy(), got)
    assert int(restored.pointer.numpy()) == 4


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="argument `momentum`"):
        MomentumEncoder(_encoder(), momentum=1.5)
    with pytest.raises(ValueError, match="argument `size`"):
        NegativeQueue(size=0, dim=2)
    with pytest.raises(ValueError, match="argument `keys`"):
        NegativeQueue(size=2, dim=2).enqueue(np.zeros((3, 2), np.float32))


def test_training_call_normalizes_by_the_batch_statistics():
    """Keys in training mode use the key batch's own BN statistics (as MoCo's key encoder), not
    the running ones, and the key encoder's weights stay out of the trainable set."""
    inputs = keras.Input((3,))
    encoder = keras.Model(inputs, keras.layers.BatchNormalization()(keras.layers.Dense(4)(inputs)))
    ema = MomentumEncoder(encoder, momentum=0.9)
    x = np.random.default_rng(1).normal(2.0, 3.0, size=(16, 3)).astype(np.float32)
    hidden = x @ encoder.layers[1].kernel.numpy() + encoder.layers[1].bias.numpy()
    expected = (hidden - hidden.mean(0)) / np.sqrt(hidden.var(0) + 1e-3)  # Keras' epsilon
    # Inference first: the training call moves the copy's running statistics.
    np.testing.assert_allclose(ema(x).numpy(), hidden / np.sqrt(1 + 1e-3), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ema(x, training=True).numpy(), expected, rtol=1e-4, atol=1e-4)
    assert not ema.trainable_weights and len(ema.non_trainable_weights) == len(encoder.weights)
