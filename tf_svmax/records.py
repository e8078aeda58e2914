"""What a result file records beside its numbers: the machine, the versions, atomic writes.

Shared by the trainers (``results.json``) and the benchmarks (``benchmarks/results/``):

    >>> from tf_svmax import records
    >>> records.write_json("out/result.json", {"seconds": 1.5, **records.environment()})
"""

import contextlib
import importlib.metadata
import json
import os
import platform

import numpy as np


def environment():
    """``{"machine": {...}, "versions": {...}}`` of this process: its Keras backend, and the GPUs
    as that backend sees them. TensorFlow is imported only when it is the backend."""
    import keras

    import tf_svmax

    backend = keras.backend.backend()
    versions = {
        "tf_svmax": tf_svmax.__version__,
        "keras": keras.__version__,
        "keras_backend": backend,
        "numpy": np.__version__,
    }
    # Installed versions from package metadata: importing them (torch above all) would load
    # another runtime into every training process just to read a string.
    for key, distributions in (
        ("tensorflow", ("tensorflow", "tensorflow-cpu")),
        ("jax", ("jax",)),
        ("scipy", ("scipy",)),
        ("sklearn", ("scikit-learn",)),
        ("torch", ("torch",)),
    ):
        versions[key] = _installed_version(distributions)
    return {
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "gpus": _gpus(backend),
        },
        "versions": versions,
    }


def _installed_version(distributions):
    """The version of the first installed of `distributions` (None if none is)."""
    for distribution in distributions:
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _gpus(backend):
    """The GPUs' names as the Keras backend's own runtime lists them."""
    if backend == "tensorflow":
        import tensorflow as tf

        return [gpu.name for gpu in tf.config.list_physical_devices("GPU")]
    if backend == "jax":
        import jax

        return [device.device_kind for device in jax.devices() if device.platform == "gpu"]
    if backend == "torch":
        import torch

        return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return []


def device(machine):
    """One line for people: the GPUs, else the CPU and its core count."""
    if machine["gpus"]:
        return ", ".join(machine["gpus"])
    return f"CPU ({machine['processor']}, {machine['cpu_count']} cores)"


def _plain(value):
    """NumPy scalars and arrays as JSON numbers and lists (json refuses them)."""
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def write_json(path, payload):
    """Writes `payload` to `path` atomically: a temporary file renamed over the old one, so a
    reader (or a run killed mid-write) never sees a half-written file."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "w") as f:
            json.dump(payload, f, indent=2, default=_plain)
        os.replace(tmp, path)
    except BaseException:
        # A full disk, an unserializable value, Ctrl-C: the old file stays, the half one goes.
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
