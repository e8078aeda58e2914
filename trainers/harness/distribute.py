"""`--strategy` and `--cpu_devices`: the `tf.distribute` strategy a trainer builds its model in.

Batch flags stay global: P x K is the batch of one step, split evenly across the replicas, and
every batch-level loss of the library evaluates on the whole of it (see the README's
"Multiple devices"). Checkpoints do not depend on the strategy: a run may resume under another.
"""

import tensorflow as tf

from trainers.harness.config import ConfigError
from trainers.harness.flags import non_negative_int, option

STRATEGIES = ("default", "mirrored", "multi_worker")


def strategy_option():
    """The trainers' `strategy` field."""
    return option(
        "default",
        "tf.distribute strategy: default (one device), mirrored (every GPU of this machine, "
        "or --cpu_devices logical CPUs without one), multi_worker (not runnable with Keras 3 "
        "fit: refused).",
        choices=STRATEGIES,
        identity=False,  # the same steps on other hardware: a run resumes under another
    )


def cpu_devices_option():
    """The trainers' `cpu_devices` field."""
    return option(
        0,
        "Split the CPU into this many logical devices (0: as found), to try --strategy=mirrored "
        "on a machine without GPUs. They share the same cores: a test of the code path, not a "
        "speed-up.",
        check=non_negative_int,
        identity=False,
    )


def _split_cpu(count):
    cpu = tf.config.list_physical_devices("CPU")[0]
    current = tf.config.get_logical_device_configuration(cpu)
    if current is not None and len(current) == count:
        return
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * count
        )
    except RuntimeError:
        raise ConfigError(
            f"--cpu_devices={count}: TensorFlow was already initialized in this process, so "
            "the CPU can no longer be split; start a fresh process."
        ) from None


def make_strategy(strategy, cpu_devices):
    """The strategy to build and compile the model in (call before any TensorFlow op runs).

    Raises:
      ConfigError: multi_worker (Keras 3's `fit` cannot run on it), or --cpu_devices without
        --strategy=mirrored.
    """
    if strategy == "multi_worker":
        raise ConfigError(
            "--strategy=multi_worker: Keras 3's fit() does not run on "
            "MultiWorkerMirroredStrategy (keras-team/keras#20585, open upstream: its first-batch "
            "build fails on the distributed batch). The library's losses do support it in a "
            "custom training loop (README, 'Multiple devices'); on one machine use "
            "--strategy=mirrored."
        )
    if cpu_devices and strategy != "mirrored":
        raise ConfigError(f"--cpu_devices={cpu_devices} needs --strategy=mirrored.")
    if strategy == "default":
        return tf.distribute.get_strategy()
    if cpu_devices:
        _split_cpu(cpu_devices)
    gpus = tf.config.list_logical_devices("GPU")
    devices = [d.name for d in (gpus or tf.config.list_logical_devices("CPU"))]
    return tf.distribute.MirroredStrategy(devices)


def check_even_split(strategy, global_batch):
    """Raises ConfigError unless the global batch splits evenly across the replicas (Keras
    builds the model from the first batch and fails on unequal replica shares)."""
    replicas = strategy.num_replicas_in_sync
    if global_batch % replicas:
        raise ConfigError(
            f"The global batch ({global_batch} = --batch_p x --batch_k) must split evenly "
            f"across the {replicas} replicas of --strategy={_flag_name(strategy)}."
        )


def _flag_name(strategy):
    return "mirrored" if isinstance(strategy, tf.distribute.MirroredStrategy) else "default"


def description(strategy):
    """What the run records about its strategy."""
    replicas = int(strategy.num_replicas_in_sync)
    # The default strategy has no worker_devices (it raises): one device, wherever TF puts ops.
    devices = list(strategy.extended.worker_devices) if replicas > 1 else []
    return {"strategy": _flag_name(strategy), "replicas": replicas, "devices": devices}


def replica_batches(strategy, make_dataset, global_batch):
    """The global batches of ``make_dataset()`` split into the strategy's replica batches.

    Each global batch of `global_batch` rows is cut into `num_replicas_in_sync` consecutive
    slices, replica r taking the r-th, so the replicas together see exactly the batch one
    device would. `tf.distribute`'s automatic rebatching keeps the batch size but not the
    batches: it rewrites the P x K sampler's batch op (another class sequence) and re-seeds a
    cloned pipeline. Building the pipeline inside the input function keeps it as it is.
    """
    replicas = strategy.num_replicas_in_sync
    if replicas == 1:
        return make_dataset()
    check_even_split(strategy, global_batch)

    def per_replica(input_context):
        # One input pipeline per worker; consecutive elements go to consecutive replicas.
        # flat_map builds the pipeline anew for every iterator: Keras iterates once to build
        # the model and again to train, and a shared pipeline's reshuffling sampler would
        # start the second iterator on its next permutation.
        del input_context
        fresh = tf.data.Dataset.from_tensors(0).flat_map(lambda _: make_dataset())
        return fresh.unbatch().batch(global_batch // replicas, drop_remainder=True)

    return strategy.distribute_datasets_from_function(per_replica)
