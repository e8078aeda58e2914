"""Which Keras backend this process runs on, and the one-sentence refusals of the parts of the
library that need TensorFlow (installed, or as the backend).

Keras fixes its backend at its first import (``KERAS_BACKEND``, else ``~/.keras/keras.json``).
The backend-neutral core runs on TensorFlow, JAX and PyTorch; what is TensorFlow by nature
(tf.data input, tf.distribute gathers, TensorFlow train steps and checkpoints) and what is not yet
ported say so here instead of failing deep inside a stack.
"""

import types

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


# Off TensorFlow there is no replica context: a regularizer or metric sees the batch it is given
# (under JAX's `keras.distribution.DataParallel` that is already the global batch, sharded by
# XLA), and Keras scales by 1/replicas only under `tf.distribute`.
ONE_REPLICA = types.SimpleNamespace(
    gather_global_batch=lambda enabled, *values: (None, values),
    scale_to_replicas=lambda value: value,
)


def replicas():
    """`tf_svmax.ops.replicas` (the `tf.distribute` global-batch gather, TensorFlow by nature) on
    the TensorFlow backend, else `ONE_REPLICA`, which gathers and scales nothing. Imported here,
    not at module level, so that its callers import without TensorFlow on JAX and PyTorch."""
    if BACKEND != "tensorflow":
        return ONE_REPLICA
    from tf_svmax.ops import replicas as tf_replicas  # noqa: PLC0415 (TensorFlow only, above)

    return tf_replicas
