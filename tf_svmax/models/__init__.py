"""Model pieces: embedding heads (backbones arrive with the retrieval trainer)."""

from tf_svmax.models.heads import CosineProxies

__all__ = ["CosineProxies"]
