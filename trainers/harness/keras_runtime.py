"""The runtime's distribution on JAX and PyTorch: Keras' own, no TensorFlow (the checkpoints,
Keras' weights files on every backend, are `trainers.harness.checkpoints`).

- Distribution: ``--strategy=default`` is one device; ``--strategy=mirrored`` on JAX is
  `keras.distribution.DataParallel` over every device JAX sees (the step works on the global
  batch, sharded: a batch-level loss sees all of it, as the gathers of `tf_svmax.ops.replicas`
  give it on TensorFlow). PyTorch has no distribution in Keras 3.15, and multi-worker training
  is `tf.distribute`'s: both are refused in one sentence.
"""

import contextlib

import keras

from trainers.harness.config import ConfigError
from trainers.harness.runtime import Placement


class KerasDistribution:
    """One device, or JAX's `keras.distribution.DataParallel` (the global batch sharded over
    the devices, the step written for one device)."""

    worker_lost = ()  # no cluster: nothing is lost in a collective step

    def __init__(self, name, data_parallel=None):
        self._data_parallel = data_parallel
        devices = list(data_parallel.device_mesh.devices.flatten()) if data_parallel else []
        self.replicas = max(1, len(devices))
        self.placement = Placement(
            chief=True,
            multi_worker=False,
            description={
                "strategy": name,
                "replicas": self.replicas,
                "devices": [str(d) for d in devices] if self.replicas > 1 else [],
                "backend": keras.backend.backend(),
            },
        )

    def scope(self):
        if self._data_parallel is None:
            return contextlib.nullcontext()
        return self._data_parallel.scope()

    def check_same_config(self, config):
        del config  # one process: nothing to compare with

    def check_even_split(self, global_batch):
        if global_batch % self.replicas:
            raise ConfigError(
                f"The global batch ({global_batch} = --batch_p x --batch_k) must split evenly "
                f"across the {self.replicas} devices of --strategy=mirrored."
            )

    def local_copy(self, model):
        return model, lambda: None

    def values_of_every_replica(self, value):
        return [value] * self.replicas

    def vectors_of_every_replica(self, values):
        return [list(values)] * self.replicas

    def replica_batches(self, make_dataset, global_batch):
        del global_batch  # DataParallel shards the global batch itself
        return make_dataset()

    def fit(self, model, dataset, **settings):
        with self.scope():
            # shuffle=False: batches keep the layout their sampler gave them.
            return model.fit(dataset, shuffle=False, **settings)


# --strategy's constructors on JAX and PyTorch (its records: `trainers.harness.strategies`):
# what this backend cannot run is refused in one sentence each.


def refuse_multi_worker():
    raise ConfigError(
        "--strategy=multi_worker is tf.distribute's MultiWorkerMirroredStrategy: it runs "
        f"with KERAS_BACKEND=tensorflow only (this process uses {keras.backend.backend()})."
    )


def _refuse_cpu_devices(cpu_devices):
    if cpu_devices:
        raise ConfigError(
            f"--cpu_devices={cpu_devices} splits the CPU for TensorFlow only; on JAX set "
            "XLA_FLAGS=--xla_force_host_platform_device_count=N before the run instead."
        )


def one_device(cpu_devices):
    """--strategy=default: one device."""
    _refuse_cpu_devices(cpu_devices)
    return KerasDistribution("default")


def data_parallel(cpu_devices):
    """--strategy=mirrored: JAX's `keras.distribution.DataParallel` over every device JAX sees
    (PyTorch has none in Keras)."""
    _refuse_cpu_devices(cpu_devices)
    backend = keras.backend.backend()
    if backend != "jax":
        raise ConfigError(
            f"--strategy=mirrored needs a Keras distribution, which Keras has for JAX only "
            f"(this process uses {backend}): use --strategy=default (one device) or "
            "KERAS_BACKEND=jax."
        )
    devices = keras.distribution.list_devices()
    return KerasDistribution("mirrored", keras.distribution.DataParallel(devices=devices))
