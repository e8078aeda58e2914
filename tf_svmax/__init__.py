"""tf_svmax: SVD-based feature-embedding regularizers (SVMax, OLE) and metric-learning losses for
Keras 3.

On Keras' TensorFlow backend every subpackage is imported here (and its Keras objects
registered, so ``.keras`` files load without ``custom_objects``). On JAX and PyTorch the
backend-neutral part is, and no TensorFlow: `tf_svmax.ops`, `tf_svmax.checks`,
`tf_svmax.losses`, `tf_svmax.regularizers`, `tf_svmax.metrics`, `tf_svmax.models` and
`tf_svmax.training` (whose TensorFlow-only names refuse one by one); `tf_svmax.data` and
`tf_svmax.records` are imported on first use (`tf_svmax.data` needs TensorFlow installed, and
refuses in one sentence where it is not: `tf_svmax._backend`).
"""

# The argument layer (no Keras), bound here also where a program loaded it first by itself
# (`trainers.harness.lazy.library_args`), as an import through this package would bind it.
from tf_svmax import _args  # noqa: F401

__version__ = "0.1.0"

from tf_svmax import _backend  # noqa: E402

if _backend.BACKEND == "tensorflow":
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
    from tf_svmax import (  # noqa: E402
        checks,
        losses,
        metrics,
        models,
        ops,
        regularizers,
        training,
    )

    __all__ = [
        "checks",
        "losses",
        "metrics",
        "models",
        "ops",
        "regularizers",
        "training",
        "__version__",
    ]

    def __getattr__(name):
        """``tf_svmax.data`` and the other subpackages not imported above on JAX/PyTorch: imported
        on first use (or their import's one-sentence refusal) instead of an AttributeError."""
        if name in ("data", "records"):
            import importlib

            return importlib.import_module(f"tf_svmax.{name}")
        raise AttributeError(f"module 'tf_svmax' has no attribute {name!r}")
