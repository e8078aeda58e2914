"""What a result file records beside its numbers: the machine, the versions, atomic writes.

Shared by the trainers (``results.json``) and the benchmarks (``benchmarks/results/``):

    >>> from tf_svmax import records
    >>> records.write_json("out/result.json", {"seconds": 1.5, **records.environment()})
"""

import importlib.metadata
import json
import os
import platform

import numpy as np


def environment():
    """``{"machine": {...}, "versions": {...}}`` of this process (GPUs as TensorFlow sees them)."""
    import keras
    import tensorflow as tf

    import tf_svmax

    versions = {
        "tf_svmax": tf_svmax.__version__,
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "numpy": np.__version__,
    }
    # Installed versions from package metadata: importing them (torch above all) would load
    # another runtime into every training process just to read a string.
    for key, distribution in (("scipy", "scipy"), ("sklearn", "scikit-learn"), ("torch", "torch")):
        try:
            versions[key] = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            versions[key] = None
    return {
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "gpus": [gpu.name for gpu in tf.config.list_physical_devices("GPU")],
        },
        "versions": versions,
    }


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
    with open(tmp, "w") as f:
        json.dump(payload, f, indent=2, default=_plain)
    os.replace(tmp, path)
