"""What the image experiments (retrieval, two-head) share: how a run starts (distribution,
seed, data, model, in that order) and the loaders of image files (their P x K batches:
`trainers.harness.runtime.pk_batches`). Backend-neutral: through `trainers.harness.runtime`."""

import contextlib

from tf_svmax import data
from trainers.harness import runtime
from trainers.harness.config import weights_refusals


def file_loaders(input_size):
    """``(training, evaluation)`` `path -> image` loaders of image files at `input_size` (the
    resolved config's): random crop and flip for training, center crop for evaluation (tf.data:
    TensorFlow installed, `start` checks)."""
    return (
        data.image_loader(training=True, input_size=input_size),
        data.image_loader(training=False, input_size=input_size),
    )


def start(config):
    """The run's distribution (`runtime.make_distribution`), made before any op runs, then the
    seed. A trainer reads its split after it and builds its model in `model_scope`, in that
    order, so the same config always starts from the same weights. The fields read here
    (strategy, cpu_devices, cluster_timeout, seed, dataset, data_dir) are ones resolving never
    changes.

    Raises:
      ConfigError: a --strategy this backend cannot run, or a dataset of image files (a
        --data_dir) where tf.data cannot run (TensorFlow not installed), before any work.
    """
    if config.data_dir:  # the embedded sets take none; image files are read by tf.data
        runtime.require_tf_data(f"--dataset={config.dataset}")
    distribution = runtime.make_distribution(
        config.strategy, config.cpu_devices, config.cluster_timeout
    )
    runtime.set_seed(config.seed, tf_data=bool(config.data_dir))
    return distribution


@contextlib.contextmanager
def model_scope(distribution, config):
    """Where a trainer builds its model from its resolved `config`: the distribution's scope.

    Raises:
      ConfigError: the workers of a multi-worker cluster hold different configs
        (`check_same_config`: every worker holds the chief's, or all refuse, before any
        variable is made), the global batch P x K does not split evenly over the replicas, or
        (building) a --weights file that does not fit the backbone.
    """
    distribution.check_same_config(config)
    distribution.check_even_split(config.batch_p * config.batch_k)
    with distribution.scope(), weights_refusals(config):  # --weights of another backbone
        yield
