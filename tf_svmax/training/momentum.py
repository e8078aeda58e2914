"""MoCo-style state for contrastive pre-training (LORAC seed `003`, Algorithm 1; He et al. 2020):
a momentum (EMA) key encoder and a FIFO queue of negative keys. Both are Keras layers whose state
is in variables, so they are checkpointed with the model, resume exactly and run inside
`tf.function`.

    key_encoder = MomentumEncoder(encoder, momentum=0.999)
    queue = NegativeQueue(size=65536, dim=128, seed=0)
    ...  # in the train step, after the query encoder's update:
    key_encoder.update(encoder)
    queue.enqueue(keys)
"""

import keras
import tensorflow as tf

from tf_svmax.ops import _checks


class MomentumEncoder(keras.layers.Layer):
    """A copy of `encoder` that follows it by an exponential moving average of the weights,
    ``theta_k <- m theta_k + (1 - m) theta_q`` (every weight, trainable or not, position by
    position), and never receives gradients.

    It is training state (checkpointed with `tf.train.Checkpoint`), not part of a saved
    model: save the query encoder. Its weights are all non-trainable for the enclosing model
    (no optimizer slot, no gradient), but its layers stay trainable so that
    ``call(x, training=True)`` normalizes a batch by the batch's statistics as the query
    encoder does (Keras runs a non-trainable BatchNormalization in inference mode, with running
    statistics that lag the encoder by the EMA; MoCo's key encoder runs in training mode).

    Args:
      encoder: The query encoder (a built `keras.Model`); the copy starts from its weights.
      momentum: m (LORAC and MoCo: 0.999).
    """

    def __init__(self, encoder, momentum=0.999, **kwargs):
        super().__init__(**kwargs)
        self.momentum = _checks.check_non_negative_number(momentum, "momentum")
        if self.momentum > 1:
            raise ValueError(_checks.invalid("momentum", "a float in [0, 1]", momentum))
        self.key_encoder = keras.models.clone_model(encoder)
        self.key_encoder.set_weights(encoder.get_weights())

    @property
    def trainable_weights(self):
        return []

    @property
    def non_trainable_weights(self):
        return self.key_encoder.weights

    def call(self, inputs, training=False):
        return tf.stop_gradient(self.key_encoder(inputs, training=training))

    def update(self, encoder):
        """One EMA step towards `encoder`'s current weights."""
        m = self.momentum
        for key, query in zip(self.key_encoder.weights, encoder.weights, strict=True):
            key.assign(m * key.value + (1.0 - m) * query.value)


@keras.saving.register_keras_serializable(package="tf_svmax")
class NegativeQueue(keras.layers.Layer):
    """A FIFO ring buffer of `size` keys of `dim` (the oldest are overwritten first), filled at
    construction with random unit vectors (as MoCo starts).

    Args:
      size: K, the number of negatives (LORAC: 65,536; at most the number of training images
        is sensible, or the queue holds stale copies of the same instances).
      dim: C, the key size.
      seed: Seed of the initial random keys.
    """

    def __init__(self, size, dim, seed=0, **kwargs):
        super().__init__(trainable=False, **kwargs)
        self.size = _checks.check_positive_int(size, "size")
        self.dim = _checks.check_positive_int(dim, "dim")
        self.seed = _checks.check_non_negative_int(seed, "seed")
        initial = tf.math.l2_normalize(
            tf.random.stateless_normal([self.size, self.dim], [self.seed, 0]), axis=1
        )
        self.keys = self.add_weight(
            shape=(self.size, self.dim),
            initializer=lambda *_, **__: initial,
            trainable=False,
            name="keys",
        )
        self.pointer = self.add_weight(
            shape=(), initializer="zeros", dtype="int64", trainable=False, name="pointer"
        )

    def call(self, inputs=None):
        return tf.stop_gradient(tf.convert_to_tensor(self.keys))

    def enqueue(self, keys):
        """Writes `keys` (`[b, dim]`, b <= size) over the oldest entries."""
        keys = tf.cast(tf.stop_gradient(keys), self.keys.dtype)
        count = tf.shape(keys, out_type=tf.int64)[0]
        if keys.shape[0] is not None and keys.shape[0] > self.size:
            raise ValueError(_checks.invalid("keys", f"at most {self.size} rows", keys.shape[0]))
        slots = (self.pointer.value + tf.range(count)) % self.size
        self.keys.assign(tf.tensor_scatter_nd_update(self.keys.value, slots[:, None], keys))
        self.pointer.assign((self.pointer.value + count) % self.size)

    def get_config(self):
        return {**super().get_config(), "size": self.size, "dim": self.dim, "seed": self.seed}
