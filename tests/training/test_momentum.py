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


def test_a_model_with_a_queue_round_trips_through_a_keras_file(tmp_path):
    """`get_config` holds ``trainable``; `from_config` used to pass it twice and fail."""
    inputs = keras.Input((3,))
    embeddings = keras.layers.Dense(2)(inputs)
    queue = NegativeQueue(size=5, dim=2, seed=3)
    model = keras.Model(inputs, [embeddings, queue(embeddings)])
    queue.enqueue(np.arange(6, dtype=np.float32).reshape(3, 2))
    model.save(tmp_path / "queue.keras")
    again = keras.models.load_model(tmp_path / "queue.keras")
    loaded = again.get_layer(queue.name)
    assert isinstance(loaded, NegativeQueue) and not loaded.trainable
    np.testing.assert_array_equal(loaded.keys.numpy(), queue.keys.numpy())
    assert int(loaded.pointer.numpy()) == 3
    with pytest.raises(ValueError, match="argument `trainable`"):
        NegativeQueue(size=5, dim=2, trainable=True)


def test_a_model_with_a_momentum_encoder_round_trips_through_a_keras_file(tmp_path):
    """The key encoder's own (EMA) weights come back, not the query encoder's."""
    query = _encoder()
    ema = MomentumEncoder(query, momentum=0.5)
    query.set_weights([w + 1.0 for w in query.get_weights()])
    ema.update(query)  # the copy now differs from both the start and the query encoder
    inputs = keras.Input((3,))
    model = keras.Model(inputs, ema(inputs))
    model.save(tmp_path / "ema.keras")
    again = keras.models.load_model(tmp_path / "ema.keras")
    loaded = again.get_layer(ema.name)
    assert isinstance(loaded, MomentumEncoder) and loaded.momentum == 0.5
    for got, want in zip(
        loaded.key_encoder.get_weights(), ema.key_encoder.get_weights(), strict=True
    ):
        np.testing.assert_array_equal(got, want)
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    np.testing.assert_allclose(again.predict(x, verbose=0), model.predict(x, verbose=0))


@pytest.mark.parametrize("shape", [(2, 3), (2,), (1, 2, 2)])
def test_enqueue_refuses_keys_of_another_size_or_rank(shape):
    queue = NegativeQueue(size=4, dim=2)
    with pytest.raises(ValueError, match=r"argument `keys`.*Received: keys=.*" + str(shape[-1])):
        queue.enqueue(np.zeros(shape, np.float32))


def test_update_refuses_an_encoder_of_another_architecture():
    ema = MomentumEncoder(_encoder(), momentum=0.9)
    inputs = keras.Input((3,))
    wider = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.Dense(5)(inputs)))
    shallower = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    for other in (wider, shallower):
        with pytest.raises(ValueError, match="argument `encoder`"):
            ema.update(other)
