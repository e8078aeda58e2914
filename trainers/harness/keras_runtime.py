"""The runtime on JAX and PyTorch: Keras' own distribution and checkpoint format, no TensorFlow.

- Distribution: ``--strategy=default`` is one device; ``--strategy=mirrored`` on JAX is
  `keras.distribution.DataParallel` over every device JAX sees (the step works on the global
  batch, sharded: a batch-level loss sees all of it, as the gathers of `tf_svmax.ops.replicas`
  give it on TensorFlow). PyTorch has no distribution in Keras 3.15, and multi-worker training
  is `tf.distribute`'s: both are refused in one sentence.
- Checkpoints (`WeightsCheckpoints`): ``ckpt-<step>.weights.h5`` (`Model.save_weights`: the
  model's variables and, the optimizer being built, its variables and step) and beside it
  ``ckpt-<step>.json``, the step record, written last: a checkpoint exists once its record
  does. The newest readable one is restored (damaged ones skipped with a note on stderr, none
  readable refused), the newest two kept.
"""

import contextlib
import glob
import json
import os
import re
import sys

import keras

from trainers.harness.config import ConfigError
from trainers.harness.run_dir import RunRefused
from trainers.harness.runtime import Placement

_RECORD = re.compile(r"ckpt-(\d+)\.json")


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


def _step_records(directory):
    """Steps with a step record in `directory`, oldest first."""
    names = (os.path.basename(p) for p in glob.glob(os.path.join(directory, "ckpt-*.json")))
    return sorted(int(m.group(1)) for m in map(_RECORD.fullmatch, names) if m)


def latest_step(directory):
    """The newest step recorded in `directory` (0 when none)."""
    steps = _step_records(directory)
    return steps[-1] if steps else 0


class WeightsCheckpoints:
    """A run's checkpoints in Keras' own format (see the module docstring), restored on
    construction: ``restored`` is the restored step's weights file (None when there was none).

    Args:
      model: The compiled model, its optimizer built (its variables are saved with it).
      directory: The checkpoint folder.
      max_to_keep: How many of the newest checkpoints are kept.

    Raises:
      RunRefused: checkpoints are on disk but none can be read.
    """

    def __init__(self, model, directory, max_to_keep=2):
        self._model, self._directory, self._keep = model, directory, max_to_keep
        os.makedirs(directory, exist_ok=True)
        self.restored = self._restore_newest_readable()

    def _path(self, step, suffix):
        return os.path.join(self._directory, f"ckpt-{step}{suffix}")

    def _restore_newest_readable(self):
        skipped = []
        for step in reversed(_step_records(self._directory)):
            path = self._path(step, ".weights.h5")
            try:
                self._model.load_weights(path)
                found = int(keras.ops.convert_to_numpy(self._model.optimizer.iterations.value))
                if found != step:
                    raise ValueError(f"its optimizer's step is {found}, not {step}")
            except Exception as error:  # noqa: BLE001 - h5py/Keras raise many kinds on a bad file
                first_line = (str(error).splitlines() or [""])[0]
                skipped.append(f"{path} ({type(error).__name__}: {first_line})")
                continue
            for note in skipped:
                print(
                    f"[checkpoints] skipped unreadable {note}; resuming from {path}",
                    file=sys.stderr,
                )
            return path
        if skipped:
            raise RunRefused(
                "No checkpoint in this run folder can be read: " + "; ".join(skipped) + ". Move "
                "the folder away to start anew."
            )
        return None

    def save(self, step):
        """Writes step `step`'s checkpoint (weights, then its record), then drops the oldest
        beyond `max_to_keep`."""
        weights = self._path(step, ".weights.h5")
        partial = self._path(step, ".partial.weights.h5")
        self._model.save_weights(partial)
        os.replace(partial, weights)  # a complete file under its name, or none
        record = self._path(step, ".json.partial")
        with open(record, "w") as f:
            json.dump({"step": step, "weights": os.path.basename(weights)}, f)
        os.replace(record, self._path(step, ".json"))
        for old in _step_records(self._directory)[: -self._keep]:
            for suffix in (".json", ".weights.h5"):  # the record first: no half checkpoint
                with contextlib.suppress(FileNotFoundError):
                    os.remove(self._path(old, suffix))

    def latest_step(self):
        return latest_step(self._directory)
