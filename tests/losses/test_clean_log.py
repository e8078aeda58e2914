"""A clean `fit` with each loss class logs nothing of ours: no C++ warning from the loss's
graph (TensorFlow's `Type inference failed ...` line, which an empty-batch `tf.cond` around
the triplet losses printed once per trace) and no Python warning raised in tf_svmax.

Each run is a fresh process with TensorFlow's full C++ log (TF_CPP_MIN_LOG_LEVEL=0), fed by a
`tf.data` pipeline as in the tensorflow-addons tutorial: the batch size is then unknown when the
step is traced, so the loss takes its dynamic-shape path. TensorFlow prints a type-inference
failure once per process, so a group of classes in one process fails if any of them logs (the
first one's line shows); the classes that once logged go first in their group.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tf_svmax import losses
from tf_svmax.losses import _registry

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = r"""
import sys
import warnings

import numpy as np
import tensorflow as tf
import keras

import tf_svmax
from tf_svmax import losses

PACKAGE = tf_svmax.__file__.rsplit("/", 1)[0]
ours = []


def record(message, category, filename, lineno, file=None, line=None):
    if filename.startswith(PACKAGE) or "tf_svmax" in str(message):
        ours.append(f"{filename}:{lineno}: {category.__name__}: {message}")


warnings.showwarning = record
warnings.simplefilter("always")

rng = np.random.default_rng(0)
b, dim = 16, 4
x = rng.standard_normal((32, 6)).astype("float32")
labels = np.tile(np.repeat(np.arange(4), 4), 2).astype("int32")
INPUTS = {  # (output units, normalize, labels) per loss whose y_pred is not an embedding
    "ContrastiveLoss": (1, False, (labels % 2).reshape(-1, 1).astype("float32")),
    "NpairsLoss": (b, False, labels),
    "NpairsMultilabelLoss": (b, False, np.eye(4, dtype="float32")[labels]),
}
for name in sys.argv[1:]:
    units, normalize, y = INPUTS.get(name, (dim, True, labels))
    layers = [keras.Input((6,)), keras.layers.Dense(units)]
    if normalize:
        layers.append(keras.layers.UnitNormalization())
    model = keras.Sequential(layers)
    model.compile(keras.optimizers.SGD(0.01), loss=getattr(losses, name)())
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(b)
    history = model.fit(data, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][-1]), name
    print("fitted", name, flush=True)
for line in ours:
    print("OUR WARNING", line, flush=True)
"""

# The registry's tensorflow-addons classes (`register(tfa=True)`).
TFA_CLASSES = tuple(e.name for e in _registry.entries("loss") if e.tfa)


def _fit(names):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, *names],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


# The library's classes that `compile` can name on labels and embeddings (or proxy
# similarities, which the program's 4-wide output serves): the registry's `LabelLoss` classes
# constructible with their defaults.
LIBRARY_CLASSES = tuple(
    e.name
    for e in _registry.entries("loss")
    if not e.tfa and not e.required_arguments and issubclass(e.obj, losses.LabelLoss)
)


# One process per group: TensorFlow logs the type-inference failure once per process, so a
# group fails if any of its classes logs, and the line shown names the first. The classes that
# once printed it (the TFA triplet losses; OLELoss, a float64 branch beside a float32 one in
# the empty-batch `tf.cond`; SVMaxLoss, `where` on a boolean, whose gradient kept it) go first.
FIRST = ("TripletSemiHardLoss", "TripletHardLoss", "OLELoss", "SVMaxLoss")


def _first(names):
    return tuple(sorted(names, key=lambda name: name not in FIRST))


@pytest.mark.parametrize(
    "names", [_first(TFA_CLASSES), _first(LIBRARY_CLASSES)], ids=["tfa-classes", "library"]
)
def test_fit_logs_no_warning_of_ours(names):
    done = _fit(names)
    fitted = [line.split()[-1] for line in done.stdout.splitlines() if line.startswith("fitted")]
    assert fitted == list(names)
    log = done.stderr
    assert "Type inference failed" not in log, log[-3000:]
    # A C++ warning about one of our loss's nodes names it under `compile_loss/`.
    flagged = [line for line in log.splitlines() if "compile_loss" in line]
    assert not flagged, "\n".join(flagged)
    assert "OUR WARNING" not in done.stdout, done.stdout
