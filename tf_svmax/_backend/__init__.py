"""Which Keras backend this process runs on, and every backend-specific primitive of the library,
laid out as Keras lays out its own backends (`keras/src/backend/{tensorflow,jax,torch}`): this
package picks, at import, the module of the running backend, and each module (`tensorflow`,
`jax`, `torch`) defines the same primitives; `common` holds what they share.

Keras fixes its backend at its first import (``KERAS_BACKEND``, else ``~/.keras/keras.json``).
The backend-neutral library (`tf_svmax.ops`, `tf_svmax.losses`, `tf_svmax.regularizers`,
`tf_svmax.metrics`, `tf_svmax.checks`) is written in `keras.ops` and calls these primitives; it
never compares backend names or imports TensorFlow itself. What is TensorFlow by nature (tf.data
input, tf.distribute gathers, TensorFlow train steps and checkpoints) says so with the
refusals of `common` instead of failing deep inside a stack.

The primitives, the same names on every backend:

- probes: `in_xla_context` (whether a trace will be compiled by XLA), `jax_without_x64`,
  `concrete_values` (a tensor's values where Python can know them), `in_stateless_scope`,
  `in_a_step`, `dropped_by_step`, `slices_need_static_bounds`, `xla_eigh_is_fast`;
- capabilities: `RUN_TIME_ASSERTIONS` (traced functions check values when they run: class
  labels stay graph tensors), `STATE_ONLY_IN_MODEL` (a train step carries out only the model's
  variables), `LOSS_STATE_IN_LAYERS`, `FAST_FLOAT32_EIGH`;
- numerics in the operands' dtype: `matmul`, `reduce_with_identity`, `at_least`, `hinge`,
  `maximum`, `set_diagonal`, `l2_normalize_rows`, `mean_in_dtype`, `float64_squared` (squared
  distances' expansion in float64, also on JAX without 64-bit types), `finite_scaled` (the
  spectral ops' guard: non-finite entries zeroed, extreme magnitudes divided by a power of two);
- rows: `take` (at non-negative indices), `stable_argsort_rows`, `searchsorted_rows`,
  `take_rows`, `boolean_mask_rows`, `class_layout`, and `sum_over_row_blocks`
  (``sum_blocks share(x, (start, count))`` over blocks of the anchors `rows` with its gradient
  w.r.t. `x`, in one block's memory: a small static batch, or any under TensorFlow's
  `jit_compile`, is one block; otherwise TensorFlow and PyTorch recompute each block's share
  for the gradient, JAX sums the blocks without recomputation);
- checks and ordering: `checked_when_run`, `checked_integer_floats`, `after`;
- state: `center_sum_and_update` (the moving class centers' value and update);
- replicas: `num_replicas_in_sync`, `gather_global_batch` and
  `scale_loss_for_distribution`, the library's one distribution scaling (`tf_svmax.ops.replicas`
  is their public face); on TensorFlow also the replica context's helpers (`own_row_range`,
  `own_rows`, `per_row_penalty_factor`, `sum_over_replicas`, ..., called with the context
  `gather_global_batch` returned, which is None elsewhere) and `first_replica_variable`;
- summaries: `write_tensorboard_scalars`.
"""

import keras

from tf_svmax._backend.common import (  # noqa: F401 (this package's API)
    INSTALL,
    NEUTRAL,
    in_stateless_scope,
    refusing_getattr,
    require_tensorflow,
    tensorflow_backend_only,
)

BACKEND = keras.backend.backend()

if BACKEND == "tensorflow":
    require_tensorflow("tf_svmax")
    from tf_svmax._backend.tensorflow import *  # noqa: F403
elif BACKEND == "jax":
    from tf_svmax._backend.jax import *  # noqa: F403
elif BACKEND == "torch":
    from tf_svmax._backend.torch import *  # noqa: F403
else:
    raise ImportError(
        f"tf_svmax runs on Keras' TensorFlow, JAX and PyTorch backends; this process uses "
        f"KERAS_BACKEND={BACKEND!r}. Set KERAS_BACKEND to 'tensorflow', 'jax' or 'torch' before "
        "Keras is imported (see the Backends page of the docs)."
    )
