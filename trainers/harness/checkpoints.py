"""The trainers' checkpoints, one format on every Keras backend: Keras' own weights files.

A checkpoint is ``ckpt-<step>.weights.h5`` (`keras.Model.save_weights`: the model's variables
and, its optimizer being built, the optimizer's variables and step; with a job's state beside
the model, that state too, see `WeightsCheckpoints`) and ``ckpt-<step>.json``, its step record
(the step, the weights file's name, the Keras backend that wrote it), written last: a
checkpoint exists once its record does. On resume the newest readable one is restored (damaged
ones skipped with a note on stderr, none readable refused), and the newest two are kept.

A run folder written on another Keras backend is refused (its step records name the backend; a
record without one was written on JAX or PyTorch before TensorFlow used this format). A run
folder of an earlier version that holds TensorFlow's `tf.train.Checkpoint` files only
(``ckpt-<step>.index`` and ``.data-*``) is restored once through `tf.train` on TensorFlow and
goes on in Keras' format (the old files are then removed); elsewhere it is refused.
"""

import contextlib
import glob
import json
import os
import re
import sys
import warnings

import keras
import numpy as np

from trainers.harness.run_dir import RunRefused

_RECORD = re.compile(r"ckpt-(\d+)\.json")
_LEGACY_INDEX = re.compile(r"ckpt-(\d+)\.index")
# Step records written before they named their backend: TensorFlow then wrote tf.train files.
_UNNAMED_BACKEND = "JAX or PyTorch"
_BACKEND_NAMES = {"tensorflow": "TensorFlow", "jax": "JAX", "torch": "PyTorch"}


def _steps(directory, pattern):
    names = (os.path.basename(p) for p in glob.glob(os.path.join(directory, "ckpt-*")))
    return sorted(int(m.group(1)) for m in map(pattern.fullmatch, names) if m)


def latest_step(directory):
    """The newest step recorded in `directory` (0 when none)."""
    steps = _steps(directory, _RECORD)
    return steps[-1] if steps else 0


def _values(variable):
    """A variable's value in NumPy: a Keras variable's, or a `tf.Variable`'s (a job's state on
    TensorFlow; under a strategy the local copy's), each backend's way that Keras 3.15 reads
    without NumPy 2's copy-keyword warning (as `trainers.harness.loop.variable_value`)."""
    if isinstance(variable, keras.Variable) and keras.backend.backend() != "tensorflow":
        return keras.ops.convert_to_numpy(variable.value)
    return np.asarray(variable.numpy())


class _StateVariables(keras.layers.Layer):
    """Saves and loads the variables of a job's state that Keras does not walk itself (a
    `tf.Module`'s, e.g. a GAN's `FunctionalAdam`, or a bare variable, e.g. the center loss's
    centers on TensorFlow), through `Layer.save_own_variables` / `load_own_variables`."""

    def __init__(self, trackable, name):
        super().__init__(name=name)
        held = getattr(trackable, "variables", None)
        held = [trackable] if held is None else list(held)
        self._held = lambda: held  # a function: the layer tracks nothing of its own
        self.built = True

    def save_own_variables(self, store):
        for i, variable in enumerate(self._held()):
            store[str(i)] = _values(variable)

    def load_own_variables(self, store):
        held = self._held()
        shapes = [tuple(store[str(i)].shape) for i in range(len(store.keys()))]
        expected = [tuple(v.shape) for v in held]
        if shapes != expected:
            raise ValueError(
                f"the job's state {self.name!r} holds variables of shapes {expected}; the file "
                f"has {shapes}"
            )
        for i, variable in enumerate(held):
            variable.assign(store[str(i)])


class _RunState(keras.Model):
    """The trained model and a job's state beside it, as one object Keras saves and loads (it
    walks the attributes: layers, optimizers and `_StateVariables`)."""

    def __init__(self, model, state):
        super().__init__(name="run_state")
        self.trained = model
        walked = (keras.layers.Layer, keras.optimizers.Optimizer, keras.metrics.Metric)
        for name, trackable in sorted(state.items()):
            held = trackable if isinstance(trackable, walked) else _StateVariables(trackable, name)
            setattr(self, f"state_{name}", held)
        self.built = True


class WeightsCheckpoints:
    """A run's checkpoints in Keras' format (see the module docstring), the newest readable
    restored on construction: ``restored`` is the restored file (None when there was none).

    Args:
      model: The compiled model, its optimizer built (its variables are saved with it).
      directory: The checkpoint folder.
      max_to_keep: How many of the newest checkpoints are kept.
      state: Name -> what a job keeps beside the model and must survive a restart (a Keras
        layer or optimizer, a `tf.Module`, a variable): saved in the same weights file.
      keep_in: A non-chief worker's own folder: `directory` (the chief's) is only read and the
        saves go here.

    Raises:
      RunRefused: checkpoints are on disk but none can be read, or they were written on another
        Keras backend (or, off TensorFlow, by an earlier version's TensorFlow format).
    """

    def __init__(self, model, directory, max_to_keep=2, *, state=None, keep_in=None):
        self._model, self._state = model, dict(state or {})
        self._saved = _RunState(model, self._state) if self._state else model
        self._directory, self._keep = keep_in or directory, max_to_keep
        os.makedirs(self._directory, exist_ok=True)
        self._legacy = None  # a tf.train folder restored once: its files go after a save
        self.restored = self._restore_newest_readable(directory)

    def _path(self, step, suffix, directory=None):
        return os.path.join(directory or self._directory, f"ckpt-{step}{suffix}")

    def _refuse_another_backend(self, directory, step):
        record = self._path(step, ".json", directory)
        try:
            with open(record) as f:
                wrote = json.load(f).get("backend", _UNNAMED_BACKEND)
        except (OSError, ValueError, AttributeError):
            return  # an unreadable record: its weights file decides (skipped if unreadable)
        backend = keras.backend.backend()
        if wrote == backend or (wrote == _UNNAMED_BACKEND and backend != "tensorflow"):
            return
        raise RunRefused(
            f"The checkpoints in {directory} were written on {_BACKEND_NAMES.get(wrote, wrote)} "
            f"(another Keras backend than this process's {backend}); resume the run with the "
            "backend it began on, or move the folder away to start anew."
        )

    def _restore_newest_readable(self, directory):
        steps = _steps(directory, _RECORD)
        if not steps and _steps(directory, _LEGACY_INDEX):
            return self._restore_tensorflow_format(directory)
        if steps:
            self._refuse_another_backend(directory, steps[-1])
        paths = {self._path(step, ".weights.h5", directory): step for step in reversed(steps)}

        def load(path):
            self._saved.load_weights(path)
            found = int(_values(self._model.optimizer.iterations))
            if found != paths[path]:
                raise ValueError(f"its optimizer's step is {found}, not {paths[path]}")

        # Exception: h5py and Keras raise many kinds on a damaged file.
        return _first_readable(paths, load, Exception)

    def _restore_tensorflow_format(self, directory):
        """Restores the newest readable `tf.train.Checkpoint` of an earlier version's run
        folder (its model, optimizer and state, as that version saved them) on TensorFlow;
        elsewhere refuses it."""
        backend = keras.backend.backend()
        if backend != "tensorflow":
            raise RunRefused(
                f"The checkpoints in {directory} were written on TensorFlow (an earlier "
                f"version's tf.train format; this process uses {backend}); resume the run with "
                "KERAS_BACKEND=tensorflow, or move the folder away to start anew."
            )
        import tensorflow as tf

        checkpoint = tf.train.Checkpoint(
            model=self._model, optimizer=self._model.optimizer, **self._state
        )
        path = _first_readable(
            [
                self._path(step, "", directory)
                for step in reversed(_steps(directory, _LEGACY_INDEX))
            ],
            lambda path: checkpoint.restore(path).assert_existing_objects_matched(),
            # tf.errors (NotFound, DataLoss, a checksum mismatch as a bare OpError), an
            # IndexError when a .data file is shorter than its index says.
            (tf.errors.OpError, IndexError, AssertionError),
        )  # never None: the caller found these files
        print(
            f"[checkpoints] restored {path}, an earlier version's TensorFlow checkpoint; "
            "the run goes on in Keras' format (ckpt-<step>.weights.h5)",
            file=sys.stderr,
        )
        self._legacy = directory
        return path

    def save(self, step):
        """Writes step `step`'s checkpoint (weights, then its record), then drops the oldest
        beyond `max_to_keep` (and an earlier version's TensorFlow files once restored)."""
        weights = self._path(step, ".weights.h5")
        partial = self._path(step, ".partial.weights.h5")
        with warnings.catch_warnings():
            # Keras 3.15 reads each TensorFlow variable through np.array(copy=False), which
            # NumPy 2 answers with a DeprecationWarning per variable; the values are right.
            warnings.filterwarnings(
                "ignore", "__array__ implementation doesn't accept a copy", DeprecationWarning
            )
            self._saved.save_weights(partial)
        os.replace(partial, weights)  # a complete file under its name, or none
        record = self._path(step, ".json.partial")
        with open(record, "w") as f:
            json.dump(
                {
                    "step": step,
                    "weights": os.path.basename(weights),
                    "backend": keras.backend.backend(),
                },
                f,
            )
        os.replace(record, self._path(step, ".json"))
        for old in _steps(self._directory, _RECORD)[: -self._keep]:
            for suffix in (".json", ".weights.h5"):  # the record first: no half checkpoint
                with contextlib.suppress(FileNotFoundError):
                    os.remove(self._path(old, suffix))
        if self._legacy == self._directory:
            for path in (
                glob.glob(os.path.join(self._directory, "ckpt-*.index"))
                + glob.glob(os.path.join(self._directory, "ckpt-*.data-*"))
                + [os.path.join(self._directory, "checkpoint")]
            ):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)
            self._legacy = None

    def latest_step(self):
        return latest_step(self._directory)


def _first_readable(paths, restore, errors):
    """The first of `paths` (newest first) that `restore(path)` reads without raising one of
    `errors`, the unreadable ones before it noted on stderr; None when `paths` is empty.

    Raises:
      RunRefused: none of `paths` can be read.
    """
    skipped = []
    for path in paths:
        try:
            restore(path)
        except errors as error:
            skipped.append(_note(path, error))
            continue
        _report(skipped, path)
        return path
    if skipped:
        _refuse_unreadable(skipped)
    return None


def _note(path, error):
    first_line = (str(error).splitlines() or [""])[0]
    return f"{path} ({type(error).__name__}: {first_line})"


def _report(skipped, path):
    for note in skipped:
        print(f"[checkpoints] skipped unreadable {note}; resuming from {path}", file=sys.stderr)


def _refuse_unreadable(skipped):
    raise RunRefused(
        "No checkpoint in this run folder can be read: " + "; ".join(skipped) + ". Move the "
        "folder away to start anew."
    )
