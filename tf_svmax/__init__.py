"""tf_svmax: SVD-based feature-embedding regularizers (SVMax, OLE) for Keras 3 / TensorFlow."""

__version__ = "0.1.0"

try:
    import tensorflow as _tf
except ImportError as _error:  # pragma: no cover - depends on the environment
    raise ImportError(
        "tf_svmax needs TensorFlow >= 2.16: pip install 'tf_svmax[cpu]' (or '[gpu]'), "
        "or install tensorflow / tensorflow-cpu yourself."
    ) from _error
if tuple(int(p) for p in _tf.__version__.split(".")[:2]) < (2, 16):  # pragma: no cover
    raise ImportError(
        f"tf_svmax needs TensorFlow >= 2.16 with Keras 3; found TensorFlow {_tf.__version__}."
    )

from tf_svmax import (  # noqa: E402
    data,
    losses,
    metrics,
    models,
    ops,
    records,
    regularizers,
    training,
)

__all__ = [
    "data",
    "losses",
    "metrics",
    "models",
    "ops",
    "records",
    "regularizers",
    "training",
    "__version__",
]
