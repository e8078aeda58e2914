"""The trainers' runtime: the one interface through which the loop and the trainers distribute,
read their input and recognise a failed input, whatever Keras' backend.

    distribution = runtime.start(config)                # the distribution, then the seed
    with distribution.scope(): ...                      # build and compile the model
    batches = runtime.pk_batches(config, features, labels, map_fn=..., start_step=...)
    except runtime.input_errors(): ...                  # e.g. a corrupt image

Two implementations behind it:

- TensorFlow (the default backend): `tf.distribute` strategies (default, mirrored,
  multi-worker: `trainers.harness.distribute`), tf.data input.
- JAX and PyTorch (`trainers.harness.keras_runtime`): one device, or JAX's
  `keras.distribution.DataParallel`; the embedded sets from memory (`tf_svmax.data.PKBatches`,
  a `keras.utils.PyDataset`), image files through tf.data on the host where TensorFlow is
  installed, else refused naming what to install.

Checkpoints have one format on every backend, Keras' own weights files
(`trainers.harness.checkpoints`, which the loop opens itself): the optimizer's variables, a
job's state beside the model (a GAN's second optimizer, a contrastive queue, the center loss's
centers on TensorFlow) and a step record naming the backend. Under multi-worker every worker
restores the chief's newest checkpoint and saves at the same steps (a non-chief into a folder
of its own).

Nothing here imports TensorFlow on JAX or PyTorch unless tf.data input is asked for.
"""

import dataclasses
import importlib.util
import sys

import keras

from trainers.harness.config import ConfigError
from trainers.harness.strategies import STRATEGIES

BACKEND = keras.backend.backend()


@dataclasses.dataclass(frozen=True)
class Placement:
    """This process's place in a run's distribution, resolved once when the run starts.

    Attributes:
      chief: Whether this process keeps the run folder, evaluates and plots.
      multi_worker: Whether the run is one of a multi-worker cluster (the workers then take
        every decision together).
      description: What the run records about its distribution.
    """

    chief: bool
    multi_worker: bool
    description: dict


def on_tensorflow():
    """Whether this process's Keras backend is TensorFlow."""
    return BACKEND == "tensorflow"


def make_distribution(strategy, cpu_devices, cluster_timeout=600):
    """The run's distribution (``--strategy``, ``--cpu_devices``, ``--cluster_timeout``), made
    before any op runs: an object with ``scope()``, ``placement`` (a `Placement`),
    ``check_same_config(config)``, ``check_even_split(global_batch)``, ``local_copy(model)``,
    ``values_of_every_replica(value)``, ``vectors_of_every_replica(values)``,
    ``replica_batches(make_dataset, global_batch)``, ``fit(model, dataset, **settings)`` and
    ``worker_lost`` (the errors of a lost worker).

    Raises:
      ConfigError: a strategy this backend (or TF_CONFIG) cannot run, in one sentence (its
        record's constructor: `trainers.harness.strategies`).
    """
    record = STRATEGIES[strategy]  # its constructor on each backend
    make = record.tensorflow if on_tensorflow() else record.keras
    return make(cpu_devices, cluster_timeout)


def default_distribution(model):
    """The distribution of a `model` built without one (one device; on TensorFlow the
    strategy it was built in)."""
    if on_tensorflow():
        from trainers.harness import distribute

        return distribute.TensorFlowDistribution(model.distribute_strategy)
    from trainers.harness import keras_runtime

    return keras_runtime.KerasDistribution("default")


def tensorflow_installed():
    return importlib.util.find_spec("tensorflow") is not None


def require_tf_data(what):
    """Raises ConfigError unless tf.data can run here: `what` (e.g. ``--dataset=cub200``) reads
    image files through tf.data, which needs TensorFlow installed (on JAX and PyTorch it runs on
    the host, beside the backend)."""
    if not tensorflow_installed():
        raise ConfigError(
            f"{what} reads image files through tf.data, which needs TensorFlow installed (on "
            f"{BACKEND} too, on the host): pip install tensorflow-cpu, or use an embedded set "
            "(--dataset=glyphs or digits)."
        )


def _host_tensorflow():
    """TensorFlow for tf.data beside JAX or PyTorch, with the GPUs hidden from it (the backend
    owns them)."""
    import tensorflow as tf

    try:
        tf.config.set_visible_devices([], "GPU")
    except RuntimeError:
        pass  # TensorFlow was initialised earlier in this process: its devices are set
    return tf


def set_seed(seed, *, tf_data=False):
    """`keras.utils.set_random_seed(seed)`: Python's, NumPy's and Keras' generators (and
    PyTorch's on PyTorch). On JAX and PyTorch without tf.data input (`tf_data`: image files read
    by tf.data on the host) TensorFlow is kept out of the process: Keras' function would import it
    to seed it, when it is installed (tens of seconds, and on a GPU machine it would take the
    devices' memory), though nothing of the run would use it. Keras then treats TensorFlow as
    absent for the rest of the process (it caches that answer); TensorFlow's own seed is set only
    where a run reads through tf.data or runs on TensorFlow."""
    if on_tensorflow() or tf_data or "tensorflow" in sys.modules:
        keras.utils.set_random_seed(seed)
        return
    sys.modules["tensorflow"] = None  # `import tensorflow` fails: Keras skips its seed
    try:
        keras.utils.set_random_seed(seed)
    finally:
        del sys.modules["tensorflow"]


def start(config):
    """The start of an image run (retrieval, two-head): its distribution (`make_distribution`),
    made before any op runs, then the seed. A trainer reads its split after it and builds its
    model in `trainers.harness.config.model_scope`, in that order, so the same config always
    starts from the same weights. The fields read here (strategy, cpu_devices,
    cluster_timeout, seed, dataset, data_dir) are ones resolving never changes.

    Raises:
      ConfigError: a --strategy this backend cannot run, or a dataset of image files (a
        --data_dir) where tf.data cannot run (TensorFlow not installed), before any work.
    """
    if config.data_dir:  # the embedded sets take none; image files are read by tf.data
        require_tf_data(f"--dataset={config.dataset}")
    distribution = make_distribution(config.strategy, config.cpu_devices, config.cluster_timeout)
    set_seed(config.seed, tf_data=bool(config.data_dir))
    return distribution


def input_errors():
    """The errors a failed input raises (e.g. tf.data's on a corrupt image file): what a
    `Job.diagnose` is asked about."""
    if on_tensorflow() or "tensorflow" in sys.modules:  # elsewhere only tf.data loads it
        import tensorflow as tf

        return (tf.errors.InvalidArgumentError,)
    return ()


def pk_batches(
    config, features, labels, *, map_fn, start_step, outputs=None, num_parallel_calls=None
):
    """P x K training batches from batch `start_step` on, with the config's P, K and seed; with
    `outputs` (the output names of a model with several), each batch's labels are given to
    every one of them. On TensorFlow (and for image files, `map_fn`, anywhere) a tf.data
    pipeline (`tf_svmax.data.pk_batches`; `num_parallel_calls` is `map_fn`'s parallelism,
    tf.data's AUTOTUNE by default); on JAX and PyTorch, from memory, a `PKBatches`."""
    from tf_svmax import data

    # The same draws either way: P x K from the config's seed, from batch `start_step` on.
    draws = dict(
        batch_p=config.batch_p, batch_k=config.batch_k, seed=config.seed, start_batch=start_step
    )
    if not on_tensorflow() and map_fn is None:
        return data.PKBatches(features, labels, outputs=outputs, **draws)
    tf = _host_tensorflow() if not on_tensorflow() else importlib.import_module("tensorflow")
    parallel = tf.data.AUTOTUNE if num_parallel_calls is None else num_parallel_calls
    batches = data.pk_batches(features, labels, map_fn=map_fn, num_parallel_calls=parallel, **draws)
    if not outputs:
        return batches
    names = tuple(outputs)
    return batches.map(
        lambda x, y: (x, {name: y for name in names}), num_parallel_calls=tf.data.AUTOTUNE
    )


def jit_compile(flag):
    """What `Model.compile` gets for ``--jit_compile`` (`flag`): on TensorFlow the flag (off, the
    step is still a TensorFlow graph; on, XLA). JAX has no graph but XLA's, so there the step is
    always compiled (``"auto"`` unless the flag asks for it: `jax.jit`, except where a layer
    opts the model out, e.g. a cross-batch memory around a loss of one's own); eager, without
    the flag, its steps ran ~14x slower than TensorFlow's on the default job. PyTorch runs
    eagerly (``"auto"``), with the flag `torch.compile`."""
    if on_tensorflow() or flag:
        return flag
    return "auto"


def tensorboard(log_dir):
    """Keras' TensorBoard callback on TensorFlow (it writes through TensorFlow's summaries,
    which would load TensorFlow beside JAX or PyTorch): a list of zero or one callback."""
    if on_tensorflow():
        return [keras.callbacks.TensorBoard(log_dir)]
    return []
