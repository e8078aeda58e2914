"""tf_svmax: SVD-based feature-embedding regularizers (SVMax, OLE) and metric-learning losses for
Keras 3.

On Keras' TensorFlow backend every subpackage is imported here (and its Keras objects
registered, so ``.keras`` files load without ``custom_objects``). On JAX and PyTorch the
backend-neutral part is, and no TensorFlow: `tf_svmax.ops`, `tf_svmax.checks`,
`tf_svmax.regularizers`, and
`tf_svmax.losses` and `tf_svmax.metrics` whose TensorFlow-only names refuse one by one; the other
subpackages refuse with one sentence when imported (`tf_svmax._backend`).
"""

__version__ = "0.1.0"

from tf_svmax import _backend  # noqa: E402

if _backend.BACKEND == "tensorflow":
    _backend.require_tensorflow("tf_svmax")
    from tf_svmax import (  # noqa: E402
        checks,
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
        "checks",
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
else:
    from tf_svmax import checks, losses, metrics, ops, regularizers  # noqa: E402

    __all__ = ["checks", "losses", "metrics", "ops", "regularizers", "__version__"]

    def __getattr__(name):
        """``tf_svmax.models`` and the other TensorFlow subpackages on JAX/PyTorch: their import's
        one-sentence refusal instead of an AttributeError."""
        if name in ("data", "models", "records", "training"):
            import importlib

            return importlib.import_module(f"tf_svmax.{name}")
        raise AttributeError(f"module 'tf_svmax' has no attribute {name!r}")
