"""The trainers' checkpoints on TensorFlow (Keras' weights files, `trainers.harness.checkpoints`):
a job's state beside the model survives, resume from folders a user or a crash damaged, and a
run folder of an earlier version in `tf.train`'s format restored once, then continued in Keras'
(the other backends: tests/trainers/harness/test_runtime.py)."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from trainers.harness.checkpoints import WeightsCheckpoints, latest_step
from trainers.harness.run_dir import RunRefused


class _Moments(tf.Module):
    """State Keras does not walk itself, as the GAN's `FunctionalAdam`: variables of a module."""

    def __init__(self):
        super().__init__()
        self.m = [tf.Variable(tf.zeros(3)), tf.Variable(tf.zeros((2, 2)))]
        self.t = tf.Variable(0.0)


class _Run:
    """A model with its optimizer built, and a job's state: a module, a bare variable (the
    center loss's centers on TensorFlow) and a Keras layer (a contrastive queue)."""

    def __init__(self):
        self.model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        self.model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9), loss="mse")
        self.model.optimizer.build(self.model.trainable_variables)
        self.moments = _Moments()
        self.centers = tf.Variable(tf.zeros((4, 2)), trainable=False)
        self.queue = keras.layers.Dense(3, name="queue")
        self.queue.build((None, 5))
        self.state = {"moments": self.moments, "centers": self.centers, "queue": self.queue}

    def variables(self):
        return [
            *self.model.weights,
            self.model.optimizer.iterations,
            *self.model.optimizer.variables,
            *self.moments.variables,
            self.centers,
            *self.queue.weights,
        ]

    def set(self, step):
        """Every variable to a value of `step`; returns the values (the reference)."""
        values = []
        for i, v in enumerate(self.variables()):
            value = np.full(
                v.shape, step * 100 + i, v.dtype.name if hasattr(v.dtype, "name") else v.dtype
            )
            if v is self.model.optimizer.iterations:
                value = np.asarray(step, "int64")
            v.assign(value)
            values.append(value)
        return values

    def values(self):
        return [np.asarray(v.numpy()) for v in self.variables()]

    def open(self, directory, **kwargs):
        return WeightsCheckpoints(self.model, str(directory), 2, state=self.state, **kwargs)


def _folder(directory, steps=(50, 100)):
    """A checkpoint folder as a run leaves it, and each step's values."""
    run, saved = _Run(), {}
    checkpoints = run.open(directory)
    for step in steps:
        saved[step] = run.set(step)
        checkpoints.save(step)
    return saved


def _assert_values(run, expected):
    for got, want in zip(run.values(), expected, strict=True):
        np.testing.assert_array_equal(got, want)


def test_the_model_optimizer_and_state_are_restored_from_the_newest(tmp_path):
    saved = _folder(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ckpt-100.json",
        "ckpt-100.weights.h5",
        "ckpt-50.json",
        "ckpt-50.weights.h5",
    ]
    record = json.loads((tmp_path / "ckpt-100.json").read_text())
    assert record == {"step": 100, "weights": "ckpt-100.weights.h5", "backend": "tensorflow"}
    run = _Run()
    checkpoints = run.open(tmp_path)
    assert checkpoints.restored == str(tmp_path / "ckpt-100.weights.h5")
    _assert_values(run, saved[100])
    run.set(150)
    checkpoints.save(150)  # the oldest goes: two kept
    assert latest_step(str(tmp_path)) == 150
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["ckpt-100.json", "ckpt-150.json"]


@pytest.mark.parametrize(
    "damage",
    [lambda b: b[: len(b) // 2], lambda b: b"\0" * len(b)],
    ids=["truncated", "zeroed"],
)
def test_a_damaged_newest_weights_file_is_skipped_for_the_one_before(tmp_path, capfd, damage):
    saved = _folder(tmp_path)
    newest = tmp_path / "ckpt-100.weights.h5"
    newest.write_bytes(damage(newest.read_bytes()))
    run = _Run()
    assert run.open(tmp_path).restored == str(tmp_path / "ckpt-50.weights.h5")
    _assert_values(run, saved[50])
    assert f"skipped unreadable {newest}" in capfd.readouterr().err


def test_state_of_other_shapes_is_not_restored(tmp_path, capfd):
    _folder(tmp_path, steps=(50,))
    run = _Run()
    run.state["moments"].t = tf.Variable(tf.zeros(2))  # not what was saved
    with pytest.raises(RunRefused, match="No checkpoint in this run folder can be read"):
        run.open(tmp_path)


def test_every_checkpoint_unreadable_refuses_the_run(tmp_path):
    _folder(tmp_path)
    for step in (50, 100):
        (tmp_path / f"ckpt-{step}.weights.h5").write_bytes(b"")
    with pytest.raises(RunRefused, match="No checkpoint in this run folder can be read"):
        _Run().open(tmp_path)


def test_an_empty_folder_restores_nothing(tmp_path):
    run = _Run()
    before = run.values()
    assert run.open(tmp_path).restored is None
    _assert_values(run, before)


def test_steps_are_ordered_by_number_not_by_name(tmp_path):
    saved = _folder(tmp_path, steps=(9, 10))
    run = _Run()
    assert run.open(tmp_path).restored.endswith("ckpt-10.weights.h5")
    _assert_values(run, saved[10])


def test_a_non_chief_reads_the_chiefs_folder_and_saves_in_its_own(tmp_path):
    saved = _folder(tmp_path / "chief")
    run = _Run()
    checkpoints = run.open(tmp_path / "chief", keep_in=str(tmp_path / "worker"))
    _assert_values(run, saved[100])
    checkpoints.save(101)
    assert checkpoints.latest_step() == 101 and latest_step(str(tmp_path / "chief")) == 100
    assert sorted(p.name for p in (tmp_path / "worker").iterdir()) == [
        "ckpt-101.json",
        "ckpt-101.weights.h5",
    ]


def _legacy_folder(directory, steps=(50, 100)):
    """A run folder of an earlier version: tf.train.Checkpoint files of the model, its optimizer
    and the job's state, as its `CheckpointManager` left them; and each step's values."""
    run, saved = _Run(), {}
    checkpoint = tf.train.Checkpoint(model=run.model, optimizer=run.model.optimizer, **run.state)
    manager = tf.train.CheckpointManager(checkpoint, str(directory), max_to_keep=2)
    for step in steps:
        saved[step] = run.set(step)
        manager.save(checkpoint_number=step)
    return saved


def test_an_earlier_versions_tensorflow_folder_is_restored_once_then_goes_on_in_keras(
    tmp_path, capfd
):
    saved = _legacy_folder(tmp_path)
    run = _Run()
    checkpoints = run.open(tmp_path)
    assert checkpoints.restored == str(tmp_path / "ckpt-100")
    _assert_values(run, saved[100])
    assert "an earlier version's TensorFlow checkpoint" in capfd.readouterr().err
    run.model.optimizer.iterations.assign(101)  # a step trained on
    expected = run.values()
    checkpoints.save(101)
    # Keras' format from now on; the old files are gone once the new checkpoint is written.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt-101.json", "ckpt-101.weights.h5"]
    again = _Run()
    assert again.open(tmp_path).restored == str(tmp_path / "ckpt-101.weights.h5")
    _assert_values(again, expected)


def test_an_earlier_versions_damaged_newest_is_skipped_and_none_readable_refused(tmp_path, capfd):
    saved = _legacy_folder(tmp_path)
    (data,) = tmp_path.glob("ckpt-100.data-*")
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    run = _Run()
    assert run.open(tmp_path).restored == str(tmp_path / "ckpt-100")[: -len("100")] + "50"
    _assert_values(run, saved[50])
    assert f"skipped unreadable {tmp_path / 'ckpt-100'}" in capfd.readouterr().err
    for path in tmp_path.glob("*.data-*"):
        path.write_bytes(b"")
    with pytest.raises(RunRefused, match="No checkpoint in this run folder can be read"):
        _Run().open(tmp_path)
