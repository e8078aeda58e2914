"""Which Keras backend this process runs on, and the one-sentence refusals of the parts of the
library that need TensorFlow (installed, or as the backend).

Keras fixes its backend at its first import (``KERAS_BACKEND``, else ``~/.keras/keras.json``).
The backend-neutral library runs on TensorFlow, JAX and PyTorch; what is TensorFlow by nature
(tf.data input, tf.distribute gathers, TensorFlow train steps and checkpoints) says so here
instead of failing deep inside a stack.

Also the library's per-backend probes and dispatch, asked while computing: whether a trace will be
compiled by XLA (`in_xla_context`), whether JAX runs without 64-bit types (`jax_without_x64`),
and a matrix product in its operands' dtype on every backend (`matmul`).
"""

import types

import keras
import numpy as np
from keras import ops

BACKEND = keras.backend.backend()
# What runs on every backend today, as the refusal names it; docs/guide/backends.md has the table.
NEUTRAL = (
    "tf_svmax.ops, tf_svmax.checks, tf_svmax.losses, tf_svmax.regularizers, tf_svmax.metrics, "
    "tf_svmax.models and the schedules of tf_svmax.training"
)
# tf_svmax is installed from its repository's clone, not from PyPI.
INSTALL = (
    "pip install -e '.[cpu]' in the clone of the repository (or '.[gpu]', or your own "
    "tensorflow>=2.16)"
)


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


def tensorflow_backend_only(module, why=None):
    """The ImportError for `module` (or one of its names) that runs on Keras' TensorFlow
    backend only, with the reason `why` where one is given."""
    because = f" ({why})" if why else ""
    return ImportError(
        f"{module} runs on Keras' TensorFlow backend only{because}; this process uses "
        f"KERAS_BACKEND={BACKEND!r}. On {BACKEND} use the backend-neutral "
        f"{NEUTRAL}, or set KERAS_BACKEND=tensorflow before Keras is imported "
        "(see the Backends page of the docs)."
    )


def refusing_getattr(package, reasons):
    """A module ``__getattr__`` for a package that imports on every backend but some of whose
    public names are TensorFlow by nature: each name of `reasons` (name -> why) raises
    `tensorflow_backend_only`'s ImportError with its reason (so ``from package import Name``
    shows it too); any other name stays an AttributeError."""

    def __getattr__(name):
        if name not in reasons:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        raise tensorflow_backend_only(f"{package}.{name}", reasons[name])

    return __getattr__


def num_replicas_in_sync():
    """How many replicas each compute a part of the batch in the current distribution context:
    the `tf.distribute` strategy's on TensorFlow, else 1 (JAX's `keras.distribution.
    DataParallel` computes on the global batch, sharded by XLA, so a layer's batch statistics
    are the global batch's already; PyTorch: one device in Keras 3.15)."""
    if BACKEND != "tensorflow":
        return 1
    import tensorflow as tf  # noqa: PLC0415 (the TensorFlow backend only)

    return tf.distribute.get_strategy().num_replicas_in_sync


def jax_without_x64():
    """True on the JAX backend while `jax_enable_x64` is off (its default)."""
    if keras.backend.backend() != "jax":
        return False
    import jax  # noqa: PLC0415 (the JAX backend is loaded already)

    return not jax.config.jax_enable_x64


def concrete_values(x):
    """`x` as NumPy where its values are known in Python (NumPy, lists, eager tensors), else None
    (a TensorFlow graph or a JAX trace): for the checks that can only run on known values."""
    if not ops.is_tensor(x):
        return np.asarray(x)
    if BACKEND == "tensorflow":
        import tensorflow as tf  # noqa: PLC0415 (the TensorFlow backend only)

        if not tf.executing_eagerly():
            return None
    elif BACKEND == "jax":
        import jax  # noqa: PLC0415 (the JAX backend only)

        if isinstance(x, jax.core.Tracer):
            return None
    return np.asarray(ops.convert_to_numpy(x))


def in_stateless_scope():
    """True inside a Keras `StatelessScope` (a JAX train or evaluation step, Keras' symbolic
    build of a loss), where a `Variable.assign` reaches the step's outputs only for variables
    the model tracks. Keras has no public probe for it; the private one is read here."""
    from keras.src.backend.common.stateless_scope import (  # noqa: PLC0415 (private, see above)
        in_stateless_scope as keras_in_stateless_scope,
    )

    return keras_in_stateless_scope()


def dropped_by_step(variable):
    """True inside the `StatelessScope` of a Keras train or evaluation step on JAX (one that
    maps the model's variables to the step's values) that does not map `variable`: a variable
    outside the model, whose assignments the step drops (only the model's variables are carried
    out of it). False elsewhere, a bare `StatelessScope` (no mapping) included. Call it before
    any assignment in the step (an assignment adds its variable to the mapping). The private
    scope is read as in `in_stateless_scope`."""
    from keras.src.backend.common.stateless_scope import (  # noqa: PLC0415 (private, see above)
        get_stateless_scope,
    )

    scope = get_stateless_scope()
    if scope is None or not scope.state_mapping:
        return False
    return scope.get_current_value(variable) is None


def in_xla_context():
    """True while tracing a function that XLA will compile, per Keras backend.

    TensorFlow: inside a `tf.function(jit_compile=True)` (TensorFlow has no public API for this;
    the private helper is used when present, and its absence is reported as "not under XLA", so
    the library takes its default path). JAX: inside any `jax.jit` trace, since all JAX
    compilation is XLA (Keras compiles JAX train steps by default); eager `jax.grad` is not.
    PyTorch: never (Keras does not compile PyTorch with XLA).
    """
    backend = keras.backend.backend()
    if backend == "jax":
        import jax  # noqa: PLC0415 (the JAX backend only)

        # A new array is an abstract tracer exactly when a jit trace is being staged (also
        # under grad or vmap inside it); eagerly, jax.grad included, it is a concrete array.
        return isinstance(jax.numpy.zeros(()), jax.core.Tracer)
    if backend != "tensorflow":
        return False
    try:
        from tensorflow.python.ops import control_flow_util  # noqa: PLC0415 (private, optional)
    except ImportError:  # pragma: no cover - depends on the TensorFlow build
        return False
    import tensorflow as tf  # noqa: PLC0415 (TensorFlow backend only, see above)

    graph = tf.compat.v1.get_default_graph()
    return bool(control_flow_util.GraphOrParentsInXlaContext(graph))


def matmul(a, b, *, transpose_a=False, transpose_b=False):
    """``op(a) op(b)`` of two tensors (the transposes for rank 2), in their dtype on every
    backend, in full float32 precision on JAX: the library's one matrix product.

    Not `keras.ops.matmul`: on JAX and PyTorch Keras' type promotion (`result_type`) returns
    float32 for float64 operands, so the backend's own product is used there. On TensorFlow the
    transposes go to `tf.linalg.matmul`'s flags, as the TensorFlow code this library started
    from (and TFA) wrote them: a materialized transpose rounds differently in the last bit
    (eagerly, and in gradients), which flips ``max(., 0)`` masks of duplicate rows. TensorFlow
    is imported here, not at module level.

    On JAX the product asks for ``Precision.HIGHEST``: JAX's default on an Ampere/Hopper GPU
    is TF32 (a 10-bit mantissa) for float32 products, which put the SVMax gradient 3e-4 to
    1e-3 relative from the float64 one and the Newton-Schulz value 1.7e-4 (measured on an H200;
    ~1e-6 at HIGHEST), and moves the distances the miners compare. On a CPU it changes nothing.
    TensorFlow's TF32 switch is process-wide (`tf.config.experimental.
    enable_tensor_float_32_execution`) and PyTorch's float32 products are IEEE by default.
    """
    if BACKEND == "tensorflow":
        import tensorflow as tf  # noqa: PLC0415 (TensorFlow backend only, see above)

        return tf.linalg.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b)
    a = ops.transpose(a) if transpose_a else a
    b = ops.transpose(b) if transpose_b else b
    if BACKEND == "jax":
        import jax  # noqa: PLC0415 (JAX backend only)

        return jax.numpy.matmul(a, b, precision=jax.lax.Precision.HIGHEST)
    return a @ b


def reduce_with_identity(reduction, x, axis, keepdims=False):
    """``reduction(x, axis)`` for `reduction` `keras.ops.max` or `keras.ops.min`, also over an
    empty axis (a batch of no anchor rows), where it gives the identity (-inf for max, +inf for
    min); NaN propagates. Per backend:

    - TensorFlow: `tf.reduce_max`/`tf.reduce_min`, which give the identity over an empty axis
      themselves (Keras' `ops.max` asserts a non-empty tensor when eager, and with ``initial``
      adds a `maximum` and its gradient's select over the result: the original's graph is the
      plain reduction);
    - JAX: Keras' ``initial`` argument (JAX refuses an empty reduction without it);
    - PyTorch: not ``initial``: Keras 3.15.1 builds that tensor with `torch.full` on the CPU
      whatever the input's device, so a CUDA input fails ("Expected all tensors to be on the
      same device"). Its shapes are concrete: an input with no entries (whose reduction Keras
      refuses) is answered by `keras.ops.full` (on Keras' device), any other by the plain
      reduction.
    """
    if BACKEND == "tensorflow":
        import tensorflow as tf  # noqa: PLC0415 (TensorFlow backend only)

        reduce = tf.reduce_min if reduction is ops.min else tf.reduce_max
        return reduce(x, axis=axis, keepdims=keepdims)
    identity = float("inf") if reduction is ops.min else float("-inf")
    if BACKEND == "jax":
        return reduction(x, axis=axis, keepdims=keepdims, initial=identity)
    if 0 not in x.shape:
        return reduction(x, axis=axis, keepdims=keepdims)
    shape = list(x.shape)
    if keepdims:
        shape[axis] = 1
    else:
        del shape[axis]
    return ops.full(shape, identity, dtype=x.dtype)


# Off TensorFlow there is no replica context: a loss, regularizer or metric sees the batch it is
# given (under JAX's `keras.distribution.DataParallel` that is already the global batch, sharded by
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
