"""Model pieces: embedding networks (backbone + L2-normalised embedding) and heads.

Keras layers and `keras.ops` only: every name builds, trains and saves on Keras' TensorFlow, JAX
and PyTorch backends, with TensorFlow not installed too (a `.keras` file or a backbone's
``.weights.h5`` loads on any of them)."""

from tf_svmax.models.backbones import (
    APPLICATIONS,
    BACKBONES,
    SMALL_BACKBONES,
    SMALL_RESNET_WIDTHS,
    TOY_BACKBONES,
    ApplicationPreprocessing,
    WeightsFileError,
    build_backbone,
    build_embedding_model,
    default_input_size,
    feature_map,
    pooled_feature_map,
)
from tf_svmax.models.heads import CosineProxies, PrototypeHistograms
from tf_svmax.models.two_head import build_two_head_model

__all__ = [
    "APPLICATIONS",
    "BACKBONES",
    "SMALL_BACKBONES",
    "SMALL_RESNET_WIDTHS",
    "TOY_BACKBONES",
    "ApplicationPreprocessing",
    "CosineProxies",
    "PrototypeHistograms",
    "WeightsFileError",
    "build_backbone",
    "build_embedding_model",
    "build_two_head_model",
    "feature_map",
    "pooled_feature_map",
    "default_input_size",
]
