"""Layers that sit on top of an embedding."""

import keras
import tensorflow as tf

from tf_svmax.ops import _checks


@keras.saving.register_keras_serializable(package="tf_svmax")
class CosineProxies(keras.layers.Layer):
    """One learnable proxy per class; outputs cosine similarities ``[B, num_classes]``.

    For `tf_svmax.losses.ProxyAnchorLoss`. Proxies start from He-normal draws, as in the
    Proxy-Anchor original.
    """

    def __init__(self, num_classes, **kwargs):
        super().__init__(**kwargs)
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(_checks.invalid("num_classes", "an int >= 1", num_classes))
        self.num_classes = num_classes

    def build(self, input_shape):
        self.proxies = self.add_weight(
            shape=(self.num_classes, input_shape[-1]), initializer="he_normal", name="proxies"
        )

    def call(self, embeddings):
        x = tf.math.l2_normalize(embeddings, axis=-1)
        p = tf.math.l2_normalize(tf.cast(self.proxies, x.dtype), axis=-1)
        return tf.matmul(x, p, transpose_b=True)

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes}
