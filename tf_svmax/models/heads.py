"""Layers that sit on top of an embedding."""

import keras
from keras import ops

from tf_svmax import _backend, checks
from tf_svmax.ops import prototypes
from tf_svmax.ops.distances import l2_normalize_rows


@keras.saving.register_keras_serializable(package="tf_svmax")
class CosineProxies(keras.layers.Layer):
    """One learnable proxy per class; outputs cosine similarities ``[B, num_classes]``.

    For `tf_svmax.losses.ProxyAnchorLoss`. Proxies start from He-normal draws, as in the
    Proxy-Anchor original.
    """

    def __init__(self, num_classes, **kwargs):
        super().__init__(**kwargs)
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(checks.invalid("num_classes", "an int >= 1", num_classes))
        self.num_classes = num_classes

    def build(self, input_shape):
        self.proxies = self.add_weight(
            shape=(self.num_classes, input_shape[-1]), initializer="he_normal", name="proxies"
        )

    def call(self, embeddings):
        # tf.math.l2_normalize's formula (a zero row stays zero), on every backend.
        x = l2_normalize_rows(embeddings)
        p = l2_normalize_rows(ops.cast(self.proxies, x.dtype))
        return _backend.matmul(x, p, transpose_b=True)

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes}


@keras.saving.register_keras_serializable(package="tf_svmax")
class PrototypeHistograms(keras.layers.Layer):
    """XML's histograms (seed 004, Eq. 2.4): a `[B, H, W, d]` feature map's soft assignment to
    `num_prototypes` learnable prototypes, `[B, num_prototypes]` rows that sum to 1
    (`tf_svmax.ops.prototype_histograms`). Prototypes start from Glorot-normal draws.

    Args:
      num_prototypes: m (paper: 64 CUB/CARS, 128 SOP/InShop).
      epsilon: Inverse temperature of the assignment (paper: 10).
    """

    def __init__(self, num_prototypes, epsilon=10.0, **kwargs):
        super().__init__(**kwargs)
        self.num_prototypes = checks.check_positive_int(num_prototypes, "num_prototypes")
        self.epsilon = checks.check_non_negative_number(epsilon, "epsilon")

    def build(self, input_shape):
        if len(input_shape) != 4:
            raise ValueError(checks.invalid("input_shape", "a [B, H, W, d] map", input_shape))
        self.prototypes = self.add_weight(
            shape=(self.num_prototypes, input_shape[-1]),
            initializer="glorot_normal",
            name="prototypes",
        )

    def call(self, feature_map):
        shape = ops.shape(feature_map)  # the batch is a tensor where it is not static
        features = ops.reshape(feature_map, (shape[0], -1, shape[-1]))
        return prototypes.prototype_histograms(features, self.prototypes, epsilon=self.epsilon)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.num_prototypes)

    def get_config(self):
        return {
            **super().get_config(),
            "num_prototypes": self.num_prototypes,
            "epsilon": self.epsilon,
        }
