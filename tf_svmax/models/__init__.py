"""Model pieces: embedding networks (backbone + L2-normalised embedding) and heads."""

# Not backend-neutral yet: on JAX/PyTorch a one-sentence refusal instead of a failure in fit.
from tf_svmax import _backend

_backend.require_tensorflow_backend("tf_svmax.models")

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
