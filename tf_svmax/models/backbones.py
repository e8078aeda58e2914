"""Embedding networks: a backbone, a linear embedding layer and L2 normalisation.

``small_cnn`` is a three-convolution network for small images (the embedded 8 x 8 digits);
the others are `keras.applications` backbones with global average pooling, fed float32 RGB in
[0, 255] and normalised inside the model by the backbone's own `preprocess_input`.
"""

import os

import keras

from tf_svmax.ops import _checks

# name -> (keras.applications constructor, preprocess module, default input size)
APPLICATIONS = {
    "resnet50": ("ResNet50", "resnet", 224),
    "mobilenet_v2": ("MobileNetV2", "mobilenet_v2", 224),
    "inception_v3": ("InceptionV3", "inception_v3", 299),
    "densenet121": ("DenseNet121", "densenet", 224),
}
BACKBONES = ("small_cnn", *APPLICATIONS)


def default_input_size(backbone):
    """The input side length a backbone was designed for (None for small_cnn: any size)."""
    _check_backbone(backbone)
    return APPLICATIONS[backbone][2] if backbone in APPLICATIONS else None


def _check_backbone(backbone):
    if backbone not in BACKBONES:
        raise ValueError(_checks.invalid("backbone", f"one of {list(BACKBONES)}", backbone))


@keras.saving.register_keras_serializable(package="tf_svmax")
class ApplicationPreprocessing(keras.layers.Layer):
    """`keras.applications.<module>.preprocess_input` as a layer (saved by module name)."""

    def __init__(self, module, **kwargs):
        super().__init__(**kwargs)
        if module not in {m for _, m, _ in APPLICATIONS.values()}:
            raise ValueError(_checks.invalid("module", "a keras.applications module", module))
        self.module = module

    def call(self, images):
        return getattr(keras.applications, self.module).preprocess_input(images)

    def get_config(self):
        return {**super().get_config(), "module": self.module}


def _small_cnn(inputs):
    x = inputs
    for filters in (32, 64, 128):
        x = keras.layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
        if x.shape[1] is not None and x.shape[1] >= 4:
            x = keras.layers.MaxPooling2D(2)(x)
    return keras.layers.GlobalAveragePooling2D()(x)


def build_embedding_model(backbone, *, input_shape, embedding_dim=128, weights=None):
    """A `keras.Model` from images to L2-normalised `[B, embedding_dim]` embeddings.

    Args:
      backbone: ``"small_cnn"`` or a key of `APPLICATIONS`.
      input_shape: `(height, width, channels)`; applications need 3 channels and >= 32 px.
      embedding_dim: Size of the embedding (the papers: 128).
      weights: None (random), ``"imagenet"`` (downloads unless cached) or a path to a
        ``.weights.h5`` file for the backbone.
    """
    _check_backbone(backbone)
    embedding_dim = _checks.check_positive_int(embedding_dim, "embedding_dim")
    inputs = keras.Input(tuple(input_shape), name="images")
    if backbone == "small_cnn":
        if weights not in (None, "none"):
            raise ValueError(_checks.invalid("weights", "None for small_cnn", weights))
        features = _small_cnn(inputs)
    else:
        name, module, _ = APPLICATIONS[backbone]
        if input_shape[-1] != 3 or min(input_shape[:2]) < 32:
            raise ValueError(
                _checks.invalid(
                    "input_shape", f"RGB images of at least 32 x 32 for {backbone}", input_shape
                )
            )
        file_weights = weights not in (None, "none", "imagenet")
        if file_weights and not os.path.isfile(weights):
            raise FileNotFoundError(f"Backbone weights file not found: {weights!r}.")
        net = getattr(keras.applications, name)(
            include_top=False,
            weights="imagenet" if weights == "imagenet" else None,
            input_shape=tuple(input_shape),
            pooling="avg",
        )
        if file_weights:
            net.load_weights(weights)
        features = net(ApplicationPreprocessing(module)(inputs))
    embedding = keras.layers.Dense(embedding_dim, name="embedding")(features)
    # Unit-norm rows: the SVMax bounds and the ranking losses' margins assume them.
    outputs = keras.layers.UnitNormalization(name="l2_normalize")(embedding)
    return keras.Model(inputs, outputs, name=f"{backbone}_embedding")
