"""Model pieces: embedding networks (backbone + L2-normalised embedding) and heads."""

from tf_svmax.models.backbones import (
    APPLICATIONS,
    BACKBONES,
    ApplicationPreprocessing,
    build_embedding_model,
    default_input_size,
)
from tf_svmax.models.heads import CosineProxies

__all__ = [
    "APPLICATIONS",
    "BACKBONES",
    "ApplicationPreprocessing",
    "CosineProxies",
    "build_embedding_model",
    "default_input_size",
]
