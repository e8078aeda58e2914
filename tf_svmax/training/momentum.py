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

from tf_svmax import checks
from tf_svmax.ops.ring import ring_slots, ring_write


@keras.saving.register_keras_serializable(package="tf_svmax")
class MomentumEncoder(keras.layers.Layer):
    """A copy of `encoder` that follows it by an exponential moving average of the weights,
    ``theta_k <- m theta_k + (1 - m) theta_q`` (every weight, trainable or not, position by
    position), and never receives gradients.

    It is training state (checkpointed with `tf.train.Checkpoint`); a model that contains it
    also round-trips through a ``.keras`` file (the config holds the encoder's architecture, the
    file the copy's own EMA weights). Its weights are all non-trainable for the enclosing model
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
        self.momentum = checks.check_fraction(momentum, "momentum")
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
        """One EMA step towards `encoder`'s current weights (the encoder the copy was made
        from: the same weights, position by position, of the same shapes)."""
        keys = self.key_encoder.weights
        queries = getattr(encoder, "weights", None)
        expected = [tuple(w.shape) for w in keys]
        if queries is None or [tuple(w.shape) for w in queries] != expected:
            received = (
                encoder
                if queries is None
                else f"<{type(encoder).__name__} with weights of shapes "
                f"{[tuple(w.shape) for w in queries]}>"
            )
            raise ValueError(
                checks.invalid(
                    "encoder",
                    f"the query encoder this copy was made from (weights of shapes {expected})",
                    received,
                )
            )
        m = self.momentum
        for key, query in zip(keys, queries, strict=True):
            key.assign(m * key.value + (1.0 - m) * query.value)

    def get_config(self):
        # The architecture only: the copy's own (EMA) weights are this layer's saved variables.
        return {
            **super().get_config(),
            "encoder": keras.saving.serialize_keras_object(self.key_encoder),
            "momentum": self.momentum,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        return cls(**config)


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
        # `get_config` (hence a `.keras` file) carries ``trainable=False``; passing it again as
        # well would make `from_config` fail. The queue is only ever written by `enqueue`.
        if checks.check_bool(kwargs.pop("trainable", False), "trainable"):
            raise ValueError(
                checks.invalid("trainable", "False (the queue is written by `enqueue`)", True)
            )
        super().__init__(trainable=False, **kwargs)
        self.size = checks.check_positive_int(size, "size")
        self.dim = checks.check_positive_int(dim, "dim")
        self.seed = checks.check_non_negative_int(seed, "seed")
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
        # Checked where the shape is static (an unknown dimension is left to the scatter).
        shape = keys.shape
        if shape.rank is not None and (
            shape.rank != 2 or shape[1] not in (None, self.dim) or (shape[0] or 0) > self.size
        ):
            raise ValueError(
                checks.invalid(
                    "keys",
                    f"a [b, {self.dim}] tensor with b <= {self.size}",
                    f"<tensor of shape {shape}>",
                )
            )
        count = tf.shape(keys, out_type=tf.int64)[0]
        slots, pointer = ring_slots(self.pointer.value, count, self.size)
        self.keys.assign(ring_write(self.keys.value, slots, keys))
        self.pointer.assign(pointer)

    def get_config(self):
        return {**super().get_config(), "size": self.size, "dim": self.dim, "seed": self.seed}
