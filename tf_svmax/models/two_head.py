"""The two-head architecture (dissertation Sec. 5.3.2, Fig. 5.6): one backbone, a classification
head on the pooled last feature map and an embedding head on the unpooled one.

    x = pool(h);  logits = W_logits · flatten(x)        (Eq. 5.8)
    embedding = normalize(W_emb · flatten(h))            (Eq. 5.9)

`h` is the backbone's last convolutional map; the embedding is L2-normalised (unit rows, the
ranking losses' margins and the SVMax bounds assume them). Without the embedding head this is
the single-head softmax network the dissertation compares against.
"""

import keras

from tf_svmax import checks
from tf_svmax.models.backbones import feature_map


def build_two_head_model(
    backbone, *, input_shape, num_classes, embedding_dim=256, embedding_head=True, weights=None
):
    """A `keras.Model` from images to ``{"logits", "features", "embedding"}``.

    Args:
      backbone: A name of `tf_svmax.models.BACKBONES`.
      input_shape: `(height, width, channels)`.
      num_classes: Classes of the classification head.
      embedding_dim: Size of the embedding head (the dissertation: 256).
      embedding_head: False builds the single-head network (no ``"embedding"`` output).
      weights: Backbone weights, as in `build_embedding_model`.

    Outputs: ``logits`` `[B, num_classes]`; ``features`` `[B, C]`, the pooled map ``x`` (the
    pre-logit features that OLÉ regularizes); ``embedding`` `[B, embedding_dim]`, unit rows.
    """
    num_classes = checks.check_positive_int(num_classes, "num_classes")
    embedding_dim = checks.check_positive_int(embedding_dim, "embedding_dim")
    embedding_head = checks.check_bool(embedding_head, "embedding_head")
    inputs = keras.Input(tuple(input_shape), name="images")
    h = feature_map(backbone, inputs, weights=weights)
    pooled = keras.layers.GlobalAveragePooling2D(name="features")(h)
    outputs = {
        "logits": keras.layers.Dense(num_classes, name="logits")(pooled),  # Eq. 5.8
        "features": pooled,
    }
    if embedding_head:
        embedding = keras.layers.Dense(embedding_dim, name="embedding_dense")(
            keras.layers.Flatten(name="flatten_h")(h)
        )  # Eq. 5.9
        outputs["embedding"] = keras.layers.UnitNormalization(name="embedding")(embedding)
    name = "two_head" if embedding_head else "single_head"
    return keras.Model(inputs, outputs, name=f"{backbone}_{name}")
