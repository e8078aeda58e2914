"""Which Keras backend this process runs on, and the one-sentence refusals of the parts of the
library that need TensorFlow (installed, or as the backend).

Keras fixes its backend at its first import (``KERAS_BACKEND``, else ``~/.keras/keras.json``).
The backend-neutral core runs on TensorFlow, JAX and PyTorch; what is TensorFlow by nature
(tf.data input, tf.distribute gathers, TensorFlow train steps and checkpoints) and what is not yet
ported say so here instead of failing deep inside a stack.
"""

import keras

BACKEND = keras.backend.backend()
# The backend-neutral modules today; docs/guide/backends.md has the table.
NEUTRAL = ("tf_svmax.ops",)
INSTALL = "pip install 'tf_svmax[cpu]' (or 'tf_svmax[gpu]', or your own tensorflow>=2.16)"


def require_tensorflow(module):
    """Imports and returns TensorFlow (>= 2.16), or raises ImportError naming `module` and the
    install command."""
    try:
        import tensorflow as tf
    except ImportError as error:
        raise ImportError(
            f"{module} needs TensorFlow, which is not installed in this environment: {INSTALL}."
        ) from error
    version = tuple(int(part) for part in tf.__version__.split(".")[:2])
    if version < (2, 16):
        raise ImportError(
            f"{module} needs TensorFlow >= 2.16 (Keras 3); found TensorFlow {tf.__version__}."
        )
    return tf


def require_tensorflow_backend(module):
    """Raises ImportError unless Keras runs on TensorFlow: `module` computes with TensorFlow
    tensors, which the JAX and PyTorch backends cannot train through. Returns TensorFlow."""
    if BACKEND != "tensorflow":
        raise tensorflow_backend_only(module)
    return require_tensorflow(module)


def tensorflow_backend_only(module):
    """The ImportError of `require_tensorflow_backend`, for `module` (or one of its names)."""
    return ImportError(
        f"{module} runs on Keras' TensorFlow backend only; this process uses "
        f"KERAS_BACKEND={BACKEND!r}. On {BACKEND} use the backend-neutral "
        f"{', '.join(NEUTRAL)}, or set KERAS_BACKEND=tensorflow before Keras is imported "
        "(see the Backends page of the docs)."
    )


def refusing_getattr(package):
    """A module ``__getattr__`` for a package that imports on every backend but whose public
    names are TensorFlow-only for now: each such name raises `tensorflow_backend_only`'s
    ImportError (so ``from package import Name`` shows it too); dunder and private names stay
    AttributeErrors."""

    def __getattr__(name):
        if name.startswith("_"):
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        raise tensorflow_backend_only(f"{package}.{name}")

    return __getattr__
