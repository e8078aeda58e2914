"""tf_svmax: SVD-based feature-embedding regularizers (SVMax, OLE) for Keras 3 / TensorFlow."""

__version__ = "0.1.0"

from tf_svmax import losses, metrics, ops, regularizers  # noqa: E402

__all__ = ["losses", "metrics", "ops", "regularizers", "__version__"]
