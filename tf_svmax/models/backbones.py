"""Embedding networks: a backbone, a linear embedding layer and L2 normalisation.

``small_cnn`` is a three-convolution network for small images (the embedded sets),
``small_cnn_bn`` the same with batch normalization, and ``small_resnet`` a ResNet-18 layout
(four stages of two basic blocks) at a quarter of its widths for 32 x 32 images; the small ones
start from random weights or from a ``.weights.h5`` file of `build_backbone` (e.g. written by
``python -m trainers.pretrain_glyphs``). ``mnist_toy`` is the SVMax authors' MNIST network (one
valid convolution, flattened, a 128-unit dense layer; random weights only). The others are
`keras.applications` backbones with global average pooling, fed float32 RGB in [0, 255] and
normalised inside the model by the backbone's own `preprocess_input`.
"""

import keras

from tf_svmax import _backend, checks
from tf_svmax._args import (  # noqa: F401 (tf_svmax.models' names, re-exported)
    APPLICATIONS,
    BACKBONES,
    SMALL_BACKBONES,
    TOY_BACKBONES,
    WeightsFileError,
    check_backbone,
    check_weights_file,
    default_input_size,
)

# The backbone names, their input sizes and the weights-file check live in `tf_svmax._args` (read
# by the trainers' flags without Keras); the same objects are this module's.
# small_resnet's widths: ResNet-18's layout at 16-32-64-128 instead of 64-128-256-512.
SMALL_RESNET_WIDTHS = (16, 32, 64, 128)


@keras.saving.register_keras_serializable(package="tf_svmax")
class ApplicationPreprocessing(keras.layers.Layer):
    """`keras.applications.<module>.preprocess_input` as a layer (saved by module name)."""

    def __init__(self, module, **kwargs):
        super().__init__(**kwargs)
        if module not in {m for _, m, _ in APPLICATIONS.values()}:
            raise ValueError(checks.invalid("module", "a keras.applications module", module))
        self.module = module

    def call(self, images):
        return getattr(keras.applications, self.module).preprocess_input(images)

    def get_config(self):
        return {**super().get_config(), "module": self.module}


def _batch_norm():
    # Built under a multi-replica tf.distribute strategy: synchronized statistics (the global
    # batch's, as on one device). Not on one device, where Keras' synchronized path would swap
    # tf.nn.moments for E[x^2] - E[x]^2 and change the numbers, nor on JAX, whose DataParallel
    # computes the statistics on the global batch itself.
    synchronized = _backend.num_replicas_in_sync() > 1
    return keras.layers.BatchNormalization(synchronized=synchronized)


def _small_cnn_map(inputs, batch_norm=False):
    x = inputs
    for filters in (32, 64, 128):
        if batch_norm:
            x = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False)(x)
            x = keras.layers.ReLU()(_batch_norm()(x))
        else:
            x = keras.layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
        if x.shape[1] is not None and x.shape[1] >= 4:
            x = keras.layers.MaxPooling2D(2)(x)
    return x


def _conv_bn(x, filters, strides=1, kernel=3):
    x = keras.layers.Conv2D(filters, kernel, strides=strides, padding="same", use_bias=False)(x)
    return _batch_norm()(x)


def _small_resnet_map(inputs):
    """ResNet-18's basic blocks at `SMALL_RESNET_WIDTHS`: 32 x 32 -> a 4 x 4 map."""
    x = keras.layers.ReLU()(_conv_bn(inputs, SMALL_RESNET_WIDTHS[0]))
    for stage, filters in enumerate(SMALL_RESNET_WIDTHS):
        for block in range(2):
            strides = 2 if stage > 0 and block == 0 else 1
            shortcut = x
            if strides != 1 or x.shape[-1] != filters:
                shortcut = _conv_bn(x, filters, strides=strides, kernel=1)  # projection
            y = keras.layers.ReLU()(_conv_bn(x, filters, strides=strides))
            y = _conv_bn(y, filters)
            x = keras.layers.ReLU()(keras.layers.Add()([shortcut, y]))
    return x


def _small_backbone(backbone, inputs, weights):
    """``(map, pooled)`` of a small backbone on `inputs`, its weights loaded from `weights`
    (a `build_backbone` file) unless None."""
    if weights in ("imagenet",):
        raise ValueError(
            checks.invalid("weights", f"None or a .weights.h5 file for {backbone}", weights)
        )
    if backbone == "small_resnet":
        feature_map_ = _small_resnet_map(inputs)
    else:
        feature_map_ = _small_cnn_map(inputs, batch_norm=backbone == "small_cnn_bn")
    pooled = keras.layers.GlobalAveragePooling2D()(feature_map_)
    if weights not in (None, "none"):
        _load_backbone_weights(keras.Model(inputs, pooled, name=backbone), weights)
    return feature_map_, pooled


def _mnist_toy(backbone, inputs, weights):
    """``(map, features)`` of ``mnist_toy`` on `inputs`: the convolution's `[B, H-2, W-2, 32]`
    map and the `[B, 128]` dense features computed from it flattened (Keras' H, W, C order)."""
    if weights not in (None, "none"):
        raise ValueError(
            checks.invalid("weights", f"None ({backbone} starts from random weights)", weights)
        )
    feature_map_ = keras.layers.Conv2D(32, 3, activation="relu", padding="valid")(inputs)
    flat = keras.layers.Flatten()(feature_map_)
    return feature_map_, keras.layers.Dense(128, activation="relu")(flat)


def _load_backbone_weights(backbone_model, path):
    """Loads a weights file into `backbone_model`; raises WeightsFileError naming the file
    when it is unreadable (`check_weights_file`) or does not fit (another backbone's file,
    another number of input channels, another format)."""
    path = check_weights_file(path)
    if not path.endswith(".h5"):
        raise WeightsFileError(
            f"The weights file {path!r} is not a .weights.h5 file (what a backbone's "
            f"save_weights writes); backbone {backbone_model.name!r} loads no other format."
        )
    try:
        backbone_model.load_weights(path)
    except ValueError as error:
        raise WeightsFileError(
            f"The weights file {path!r} does not fit backbone {backbone_model.name!r} with input "
            f"shape {tuple(backbone_model.input.shape[1:])} (was it written for another backbone "
            f"or another number of channels?): {error}"
        ) from error


def build_backbone(backbone, *, input_shape, weights=None):
    """A small backbone as a `keras.Model` from images to its pooled features (`[B, C]`).

    Its ``save_weights`` file is what ``weights=<path>`` loads into `build_embedding_model`,
    `feature_map` and the two-head model (the layers are built in the same order there).

    Args:
      backbone: A name of `SMALL_BACKBONES`.
      input_shape: `(height, width, channels)`.
      weights: None (random) or a path to a ``.weights.h5`` file of this backbone.
    """
    if backbone not in SMALL_BACKBONES:
        raise ValueError(checks.invalid("backbone", f"one of {list(SMALL_BACKBONES)}", backbone))
    inputs = keras.Input(tuple(input_shape), name="images")
    _, pooled = _small_backbone(backbone, inputs, weights)
    return keras.Model(inputs, pooled, name=backbone)


def _application(backbone, inputs, weights, pooling):
    """The keras.applications backbone on `inputs` (its own preprocessing inside)."""
    name, module, _ = APPLICATIONS[backbone]
    input_shape = tuple(inputs.shape[1:])
    if input_shape[-1] != 3 or min(input_shape[:2]) < 32:
        raise ValueError(
            checks.invalid(
                "input_shape", f"RGB images of at least 32 x 32 for {backbone}", input_shape
            )
        )
    file_weights = weights not in (None, "none", "imagenet")
    if file_weights:
        check_weights_file(weights)
    net = getattr(keras.applications, name)(
        include_top=False,
        weights="imagenet" if weights == "imagenet" else None,
        input_shape=input_shape,
        pooling=pooling,
    )
    if file_weights:
        _load_backbone_weights(net, weights)
    return net(ApplicationPreprocessing(module)(inputs))


def feature_map(backbone, inputs, *, weights=None):
    """The backbone's last convolutional feature map ``h`` (unpooled, `[B, H', W', C]`) on
    the Keras tensor `inputs`; `weights` as in `build_embedding_model`."""
    check_backbone(backbone)
    if backbone in SMALL_BACKBONES:
        return _small_backbone(backbone, inputs, weights)[0]
    if backbone in TOY_BACKBONES:
        return _mnist_toy(backbone, inputs, weights)[0]
    return _application(backbone, inputs, weights, pooling=None)


def pooled_feature_map(embedding_model):
    """The Keras tensor of the last convolutional map that a small-backbone model of
    `build_embedding_model` pools (e.g. for `PrototypeHistograms` on the same map).

    Raises ValueError for a model without exactly one `GlobalAveragePooling2D` layer of its own
    (an applications backbone pools inside its nested model).
    """
    pools = [
        layer
        for layer in embedding_model.layers
        if isinstance(layer, keras.layers.GlobalAveragePooling2D)
    ]
    if len(pools) != 1:
        raise ValueError(
            checks.invalid(
                "embedding_model",
                f"a model of build_embedding_model with a backbone of {list(SMALL_BACKBONES)}",
                embedding_model.name,
            )
        )
    return pools[0].input


def build_embedding_model(backbone, *, input_shape, embedding_dim=128, weights=None):
    """A `keras.Model` from images to L2-normalised `[B, embedding_dim]` embeddings.

    Args:
      backbone: A name of `BACKBONES`: `SMALL_BACKBONES`, `TOY_BACKBONES` or a key of
        `APPLICATIONS`.
      input_shape: `(height, width, channels)`; applications need 3 channels and >= 32 px.
      embedding_dim: Size of the embedding (the papers: 128; the circle figure: 2).
      weights: None (random); for an applications backbone ``"imagenet"`` (downloads unless
        cached) or a path to a ``.weights.h5`` file of the keras.applications network; for a
        small backbone a path to a `build_backbone` ``.weights.h5`` file; ``mnist_toy`` takes
        None only.

    Raises:
      WeightsFileError: the `weights` file is empty, truncated, not HDF5, or does not fit the
        backbone (another backbone's file); the message names the file.
    """
    check_backbone(backbone)
    embedding_dim = checks.check_positive_int(embedding_dim, "embedding_dim")
    inputs = keras.Input(tuple(input_shape), name="images")
    if backbone in SMALL_BACKBONES:
        features = _small_backbone(backbone, inputs, weights)[1]
    elif backbone in TOY_BACKBONES:
        features = _mnist_toy(backbone, inputs, weights)[1]
    else:
        features = _application(backbone, inputs, weights, pooling="avg")
    embedding = keras.layers.Dense(embedding_dim, name="embedding")(features)
    # Unit-norm rows: the SVMax bounds and the ranking losses' margins assume them.
    outputs = keras.layers.UnitNormalization(name="l2_normalize")(embedding)
    return keras.Model(inputs, outputs, name=f"{backbone}_embedding")
