"""`--strategy`, `--cpu_devices` and `--cluster_timeout`: the `tf.distribute` strategy a trainer
builds its model in.

Batch flags stay global: P x K is the batch of one step, split evenly across the replicas (of
every worker, under multi_worker), and every batch-level loss of the library evaluates on the
whole of it (see docs/guide/multiple-devices.md). Checkpoints do not depend on the strategy:
a run may resume under another.

Under ``--strategy=multi_worker`` every worker runs the same command with its own ``TF_CONFIG``
(the cluster and this worker's place in it, as `tf.distribute` documents it); the chief
(``task.type == "chief"``, or worker 0 when the cluster has no chief) keeps the run folder
(`is_chief`), the others train along and keep nothing (`trainers.harness.loop`). Every worker
must hold the chief's configuration (`check_same_config`), or all refuse.
"""

import dataclasses
import functools
import hashlib
import json
import os
import subprocess
import sys

import keras
import tensorflow as tf

from trainers.harness.config import ConfigError
from trainers.harness.run_dir import identity
from trainers.harness.runtime import Placement


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


def cluster_from_environment():
    """``(cluster, task)`` of the ``TF_CONFIG`` environment variable, checked.

    Raises:
      ConfigError: TF_CONFIG is unset, is not JSON, or does not name this task in its cluster.
    """
    example = (
        'e.g. TF_CONFIG=\'{"cluster": {"worker": ["host1:12345", "host2:12345"]}, '
        '"task": {"type": "worker", "index": 0}}\' on the first machine, index 1 on the second'
    )
    text = os.environ.get("TF_CONFIG")
    if not text:
        raise ConfigError(
            "--strategy=multi_worker needs the TF_CONFIG environment variable: the cluster's "
            f"addresses and this worker's place in it ({example})."
        )
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"TF_CONFIG is not valid JSON ({error}): {text!r} ({example}).") from None
    cluster = spec.get("cluster") if isinstance(spec, dict) else None
    task = spec.get("task") if isinstance(spec, dict) else None
    jobs = {"chief", "worker"}
    if (
        not isinstance(cluster, dict)
        or not cluster
        or not set(cluster) <= jobs
        or not all(
            isinstance(addresses, list)
            and addresses
            and all(isinstance(a, str) and ":" in a for a in addresses)
            for addresses in cluster.values()
        )
    ):
        raise ConfigError(
            "TF_CONFIG's 'cluster' must map 'worker' (and optionally 'chief') to lists of "
            f"'host:port' addresses; received {cluster!r} ({example})."
        )
    if (
        not isinstance(task, dict)
        or task.get("type") not in cluster
        or not isinstance(task.get("index"), int)
        or not 0 <= task["index"] < len(cluster[task["type"]])
    ):
        raise ConfigError(
            "TF_CONFIG's 'task' must name this worker's place in the cluster, a type of "
            f"{sorted(cluster)} and an index within its list; received {task!r} ({example})."
        )
    return cluster, task


# The watchdog of `_join_cluster`: a separate process, because TensorFlow's join blocks with
# Python's lock held, so no thread (or signal handler) of the joining process can run.
# argv: the joining process's id, the timeout in seconds, the message. Its stdin closes when
# the process has joined (or has ended some other way): then it has nothing to do.
_WATCHDOG = """
import os, select, signal, sys
pid, timeout, message = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
ready, _, _ = select.select([sys.stdin], [], [], timeout)
if not ready:
    print(message, file=sys.stderr, flush=True)
    os.kill(pid, signal.SIGKILL)
"""


def _join_cluster(cluster, task, timeout):
    """MultiWorkerMirroredStrategy for `cluster`, once every worker has joined it.

    TensorFlow waits for missing workers without a bound (a worker started alone waits for
    ever, deaf to SIGTERM), so a watchdog process kills this one (SIGKILL, exit status 137)
    after `timeout` seconds, with a message naming TF_CONFIG; nothing has been written yet.
    The first collective step proves that every worker is there (the strategy's constructor
    alone does not)."""
    addresses = ", ".join(a for job in ("chief", "worker") for a in cluster.get(job, []))
    message = (
        f"--strategy=multi_worker: this worker ({task['type']} {task['index']}) could not reach "
        f"every worker of the cluster in TF_CONFIG ({addresses}) within "
        f"--cluster_timeout={timeout} s, and was stopped. Start the same command on every "
        "machine, each with its own TF_CONFIG task, and check the addresses, ports and firewalls."
    )
    watchdog = subprocess.Popen(
        [sys.executable, "-c", _WATCHDOG, str(os.getpid()), str(timeout), message],
        stdin=subprocess.PIPE,
    )
    try:
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        values_of_every_replica(strategy, 1)
    finally:
        watchdog.stdin.close()  # joined (or failed otherwise): the watchdog ends
        watchdog.wait()
    return strategy


def _refuse_cpu_devices(cpu_devices):
    if cpu_devices:
        raise ConfigError(f"--cpu_devices={cpu_devices} needs --strategy=mirrored.")


# --strategy's constructors on TensorFlow (its records: `trainers.harness.strategies`), each
# called before any TensorFlow op runs; each refuses --cpu_devices without mirrored first.


def default_strategy(cpu_devices):
    """--strategy=default: TensorFlow's default strategy (one device)."""
    _refuse_cpu_devices(cpu_devices)
    return TensorFlowDistribution(tf.distribute.get_strategy())


def mirrored_strategy(cpu_devices):
    """--strategy=mirrored: every GPU of this machine, else its CPUs (with --cpu_devices the
    CPU split into that many logical devices first)."""
    if cpu_devices:
        _split_cpu(cpu_devices)
    gpus = tf.config.list_logical_devices("GPU")
    devices = [d.name for d in (gpus or tf.config.list_logical_devices("CPU"))]
    return TensorFlowDistribution(tf.distribute.MirroredStrategy(devices))


def multi_worker_strategy(cpu_devices, cluster_timeout):
    """--strategy=multi_worker: every worker of TF_CONFIG's cluster, once all have joined
    (within `cluster_timeout` seconds).

    Raises:
      ConfigError: without a valid TF_CONFIG.
    """
    _refuse_cpu_devices(cpu_devices)
    cluster, task = cluster_from_environment()
    return TensorFlowDistribution(_join_cluster(cluster, task, cluster_timeout))


def is_multi_worker(strategy):
    """Whether `strategy` spans workers (processes) as well as devices."""
    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)


def is_chief(strategy):
    """Whether this process keeps the run's records: always, except on the non-chief workers
    of a multi-worker cluster."""
    return bool(strategy.extended.should_checkpoint)


def placement(strategy):
    """The `trainers.harness.runtime.Placement` of this process in `strategy`."""
    return Placement(is_chief(strategy), is_multi_worker(strategy), description(strategy))


def local_copy(model, strategy):
    """``(evaluated, refresh)``: the model an evaluation runs, and what brings it up to date.

    Under multi_worker only the chief evaluates, but Keras' `predict` on a model built in the
    strategy's scope is a collective step (its outputs are gathered from every worker), which
    would wait for ever for the others: the chief evaluates a copy built outside the strategy,
    whose weights ``refresh()`` sets to the trained model's (the same values, so the same
    numbers as a one-process evaluation). Otherwise the model itself and a no-op. Call outside
    the strategy's scope.
    """
    if not is_multi_worker(strategy):
        return model, lambda: None
    if tf.distribute.has_strategy():
        raise RuntimeError("local_copy must be called outside the strategy's scope.")
    copy = keras.models.clone_model(model)

    def refresh():
        copy.set_weights(model.get_weights())

    refresh()
    return copy, refresh


def values_of_every_replica(strategy, value):
    """The integer `value` of every replica of `strategy`, in replica order (under
    multi_worker: every worker's, so all take the same decision). A collective step: every
    worker must call it at the same point of the program."""
    return [values[0] for values in vectors_of_every_replica(strategy, [value])]


def vectors_of_every_replica(strategy, values):
    """The list of integers `values` (each in [0, 2**24), the same length on every worker) of
    every replica of `strategy`, in replica order: a list of lists. A collective step, as
    `values_of_every_replica`."""
    # float32: exact for integers below 2**24. In a tf.function: run eagerly, a multi-worker
    # strategy warns of its overhead.
    gathered = tf.function(
        lambda local: strategy.gather(strategy.run(tf.identity, args=(local,)), axis=0)
    )(tf.constant([float(v) for v in values]))
    return [[int(v) for v in row] for row in gathered.numpy().reshape(-1, len(values))]


def _digest(value):
    """Two 24-bit integers of the SHA-256 of `value`'s JSON (48 bits: a chance collision of
    two different values is negligible; each part is exact in float32)."""
    digest = hashlib.sha256(json.dumps(value, sort_keys=True).encode()).digest()
    return [int.from_bytes(digest[0:3], "big"), int.from_bytes(digest[3:6], "big")]


def check_same_config(strategy, config):
    """Raises ConfigError on every worker of a multi-worker `strategy` unless every worker
    holds the same `config` (a config dataclass instance; its fields that define the run,
    `trainers.harness.run_dir.identity`): a worker started with other flags would train along
    under the chief's record without a word. Exchanges a digest of each field (one collective
    step; call it at the same point on every worker); the message names the fields that
    differ, with this worker's values. A no-op for the other strategies."""
    if not is_multi_worker(strategy):
        return
    fields = identity(dataclasses.asdict(config), type(config))
    names = sorted(fields)
    local = _digest(names) + [part for name in names for part in _digest(fields[name])]
    every = vectors_of_every_replica(strategy, local)
    if all(row == every[0] for row in every):
        return
    if any(row[:2] != every[0][:2] for row in every):
        raise ConfigError(
            "The workers of the cluster define different sets of flags (another version of "
            "the trainers on some machine?); install the same version on every worker."
        )
    differ = [
        name
        for i, name in enumerate(names)
        if len({tuple(row[2 + 2 * i : 4 + 2 * i]) for row in every}) > 1
    ]
    mine = ", ".join(f"--{name}={fields[name]!r}" for name in differ)
    raise ConfigError(
        f"--strategy=multi_worker: the workers of the cluster were started with different "
        f"flags: {', '.join('--' + name for name in differ)} differ between them (this worker: "
        f"{mine}). Every worker must run the same command (only --output_dir, --verbose and "
        "the other flags that do not change the run may differ); nothing was trained."
    )


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
    if is_multi_worker(strategy):
        return "multi_worker"
    return "mirrored" if isinstance(strategy, tf.distribute.MirroredStrategy) else "default"


def description(strategy):
    """What the run records about its strategy."""
    replicas = int(strategy.num_replicas_in_sync)
    # The default strategy has no worker_devices (it raises): one device, wherever TF puts ops.
    devices = list(strategy.extended.worker_devices) if replicas > 1 else []
    out = {"strategy": _flag_name(strategy), "replicas": replicas, "devices": devices}
    if is_multi_worker(strategy):
        resolver = strategy.cluster_resolver
        out["workers"] = {
            job: len(tasks) for job, tasks in resolver.cluster_spec().as_dict().items()
        }
        out["task"] = {"type": resolver.task_type, "index": int(resolver.task_id)}
    return out


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
        # One input pipeline per worker, each building every global batch (the same sampler,
        # the same seed) and keeping its workers' consecutive slices: replica r of the whole
        # cluster takes the r-th. flat_map builds the pipeline anew for every iterator: Keras
        # iterates once to build the model and again to train, and a shared pipeline's
        # reshuffling sampler would start the second iterator on its next permutation.
        pipelines, pipeline = input_context.num_input_pipelines, input_context.input_pipeline_id
        fresh = tf.data.Dataset.from_tensors(0).flat_map(lambda _: make_dataset())
        if pipelines > 1:
            fresh = fresh.unbatch().batch(global_batch // pipelines, drop_remainder=True)
            fresh = fresh.shard(pipelines, pipeline)
        return fresh.unbatch().batch(global_batch // replicas, drop_remainder=True)

    return strategy.distribute_datasets_from_function(per_replica)


# What a collective step raises under MultiWorkerMirroredStrategy when a peer is gone (killed,
# crashed, its machine down): TensorFlow aborts the pending collectives on every survivor.
WORKER_LOST = (
    tf.errors.UnavailableError,
    tf.errors.AbortedError,
    tf.errors.CancelledError,
    tf.errors.DeadlineExceededError,
)


class TensorFlowDistribution:
    """The runtime's distribution on TensorFlow (`trainers.harness.runtime.make_distribution`):
    a `tf.distribute` strategy and this process's place in it."""

    worker_lost = WORKER_LOST

    def __init__(self, strategy):
        self.strategy = strategy

    @functools.cached_property
    def placement(self):
        return placement(self.strategy)

    def scope(self):
        return self.strategy.scope()

    def check_same_config(self, config):
        check_same_config(self.strategy, config)

    def check_even_split(self, global_batch):
        check_even_split(self.strategy, global_batch)

    def local_copy(self, model):
        return local_copy(model, self.strategy)

    def values_of_every_replica(self, value):
        return values_of_every_replica(self.strategy, value)

    def vectors_of_every_replica(self, values):
        return vectors_of_every_replica(self.strategy, values)

    def replica_batches(self, make_dataset, global_batch):
        return replica_batches(self.strategy, make_dataset, global_batch)

    def fit(self, model, dataset, **settings):
        """`model.fit` on `dataset`, or under multi_worker `trainers.harness.custom_fit.fit`
        (Keras 3's `fit` cannot run there)."""
        if self.placement.multi_worker:
            from trainers.harness import custom_fit

            return custom_fit.fit(model, dataset, **settings)
        # shuffle=False: batches keep the layout their sampler gave them.
        return model.fit(dataset, shuffle=False, **settings)
