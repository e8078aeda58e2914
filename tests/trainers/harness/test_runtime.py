"""The runtime seam on every backend (TensorFlow, JAX, PyTorch): the shared loop trains a toy
job, checkpoints it and resumes it through `trainers.harness.runtime` alone, with weights equal
to plain SGD in NumPy; Keras' checkpoint format skips a damaged file; and what a backend cannot
distribute is refused in one sentence."""

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import keras
import numpy as np
import pytest

from trainers.harness import runtime
from trainers.harness.checkpoints import latest_step
from trainers.harness.config import ConfigError
from trainers.harness.flags import option
from trainers.harness.loop import Job, run_job
from trainers.harness.run_dir import RunRefused

pytestmark = pytest.mark.all_backends

X = np.random.default_rng(0).normal(size=(64, 2)).astype("float32")
Y = X @ np.array([[1.0], [-2.0]], "float32")
LEARNING_RATE, BATCH = 0.1, 8


@dataclasses.dataclass(frozen=True)
class ToyConfig:
    output_dir: str = option("", "Where.", identity=False)
    train_steps: int = option(6, "Steps.")
    eval_every: int = option(3, "Interval.")
    trace_every: int = option(1, "Trace interval.")
    evaluate_untrained: bool = option(True, "Step 0.")
    verbose: int = option(0, "Quiet.", identity=False)


class Batches(keras.utils.PyDataset):
    """Batch i: rows 8i .. 8i + 7 (mod 64), from `start` on."""

    def __init__(self, start):
        super().__init__()
        self.start = start

    @property
    def num_batches(self):
        return None

    def __getitem__(self, index):
        rows = (np.arange(BATCH) + BATCH * (self.start + index)) % len(X)
        return X[rows], Y[rows]


class StopAfter(keras.callbacks.Callback):
    """A Ctrl-C after `steps` steps of this attempt (counted: JAX's fit brings the optimizer's
    step back to the model only at an epoch's end)."""

    def __init__(self, steps):
        super().__init__()
        self.steps, self.done = steps, 0

    def on_train_batch_end(self, batch, logs=None):
        self.done += 1
        if self.done == self.steps:
            raise KeyboardInterrupt


def _job(config, callbacks=(), distribution=None):
    keras.utils.set_random_seed(0)
    with distribution.scope() if distribution else contextlib.nullcontext():
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.SGD(LEARNING_RATE), loss="mse")

    def evaluate(step, epoch):
        mse = float(np.mean((model.predict(X, verbose=0) - Y) ** 2))
        return {"metrics": {"mse": mse}, "info": {}}

    return Job(
        name="toy",
        config=config,
        model=model,
        schedule=lambda step: LEARNING_RATE,
        batches=Batches,
        distribution=distribution or runtime.default_distribution(model),
        global_batch=BATCH,
        evaluate=evaluate,
        plot=lambda results, folder: None,
        save_models=lambda folder: None,
        callbacks=callbacks,
    )


def _numpy_sgd(model, steps):
    """The reference: `steps` plain SGD steps on the mean squared error, in NumPy, from the
    model's initial weights."""
    kernel, bias = (
        np.array(keras.ops.convert_to_numpy(w.value), np.float64) for w in model.weights
    )
    for step in range(steps):
        rows = (np.arange(BATCH) + BATCH * step) % len(X)
        residual = X[rows] @ kernel + bias - Y[rows]
        kernel -= LEARNING_RATE * 2 * X[rows].T @ residual / BATCH
        bias -= LEARNING_RATE * 2 * residual.mean(axis=0)
    return kernel, bias


def _trained(job):
    return [keras.ops.convert_to_numpy(w.value) for w in job.model.weights]


def test_a_run_interrupted_then_resumed_trains_as_numpy_sgd(tmp_path):
    config = ToyConfig(output_dir=str(tmp_path / "run"))
    reference = _numpy_sgd(_job(config).model, 6)
    with pytest.raises(KeyboardInterrupt):
        run_job(_job(config, [StopAfter(4)]), started=0.0)  # checkpoint 3 kept
    checkpoints = str(tmp_path / "run" / "checkpoints")
    assert latest_step(checkpoints) == 3
    resumed = _job(config)
    results = run_job(resumed, started=0.0)
    assert results["status"] == "completed" and results["resumed_at_steps"] == [3]
    assert [e["step"] for e in results["evaluations"]] == [0, 3, 6]
    assert [t["step"] for t in results["trace"]] == [1, 2, 3, 4, 5, 6]
    assert latest_step(checkpoints) == 6
    for got, want in zip(_trained(resumed), reference, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert results["evaluations"][-1]["mse"] == pytest.approx(
        float(np.mean((X @ reference[0] + reference[1] - Y) ** 2)), rel=1e-4
    )


def test_a_damaged_newest_checkpoint_is_skipped_and_none_readable_is_refused(tmp_path, capfd):
    config = ToyConfig(output_dir=str(tmp_path / "run"), train_steps=9)
    with pytest.raises(KeyboardInterrupt):
        run_job(_job(config, [StopAfter(7)]), started=0.0)  # checkpoints 3 and 6
    folder = tmp_path / "run" / "checkpoints"
    assert sorted(p.name for p in folder.iterdir()) == [
        "ckpt-3.json",
        "ckpt-3.weights.h5",
        "ckpt-6.json",
        "ckpt-6.weights.h5",
    ]
    newest = folder / "ckpt-6.weights.h5"
    newest.write_bytes(newest.read_bytes()[:100])  # truncated
    reference = _numpy_sgd(_job(config).model, 9)
    resumed = _job(config)
    results = run_job(resumed, started=0.0)
    assert f"skipped unreadable {newest}" in capfd.readouterr().err
    assert results["resumed_at_steps"] == [3]
    for got, want in zip(_trained(resumed), reference, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for path in folder.glob("*.weights.h5"):
        path.write_bytes(b"")
    (tmp_path / "run" / "results.json").unlink()
    with pytest.raises(RunRefused, match="No checkpoint in this run folder can be read"):
        run_job(_job(config), started=0.0)


@pytest.mark.skipif(runtime.on_tensorflow(), reason="tf.distribute runs every strategy")
def test_what_this_backend_cannot_distribute_is_refused_in_one_sentence():
    with pytest.raises(ConfigError, match="^--strategy=multi_worker is tf.distribute's"):
        runtime.make_distribution("multi_worker", 0)
    with pytest.raises(ConfigError, match="^--cpu_devices=2 splits the CPU for TensorFlow"):
        runtime.make_distribution("mirrored", 2)
    if runtime.BACKEND == "torch":
        with pytest.raises(ConfigError, match="^--strategy=mirrored needs a Keras distribution"):
            runtime.make_distribution("mirrored", 0)
    else:
        mirrored = runtime.make_distribution("mirrored", 0)
        assert mirrored.placement.description["strategy"] == "mirrored"
    one = runtime.make_distribution("default", 0)
    assert one.placement.chief and one.placement.description == {
        "strategy": "default",
        "replicas": 1,
        "devices": [],
        "backend": runtime.BACKEND,
    }


@pytest.mark.parametrize(
    "record, began",
    [
        ({"backend": "torch" if runtime.BACKEND == "jax" else "jax"}, "JAX|PyTorch"),
        ({"backend": "torch" if runtime.on_tensorflow() else "tensorflow"}, "PyTorch|TensorFlow"),
        ({}, "JAX or PyTorch"),  # a record of before they named their backend
    ],
    ids=["other", "other2", "unnamed"],
)
def test_a_run_folder_of_another_backend_is_refused(tmp_path, record, began):
    config = ToyConfig(output_dir=str(tmp_path / "run"))
    with pytest.raises(KeyboardInterrupt):
        run_job(_job(config, [StopAfter(4)]), started=0.0)  # checkpoint 3 kept
    folder = tmp_path / "run" / "checkpoints"
    step_record = folder / "ckpt-3.json"
    written = json.loads(step_record.read_text())
    assert written["backend"] == runtime.BACKEND and written["step"] == 3
    step_record.write_text(json.dumps({**written, **record}) if record else "{}")
    if not record and runtime.BACKEND != "tensorflow":
        # Before TensorFlow wrote Keras' format, an unnamed record was JAX's or PyTorch's.
        assert run_job(_job(config), started=0.0)["resumed_at_steps"] == [3]
        return
    with pytest.raises(
        RunRefused,
        match=f"were written on ({began}) \\(another Keras backend than this process's "
        f"{runtime.BACKEND}\\); resume the run with the backend it began on",
    ):
        run_job(_job(config), started=0.0)
    assert step_record.exists()  # nothing of the run was touched


@pytest.mark.skipif(runtime.on_tensorflow(), reason="TensorFlow restores it: test_checkpoints.py")
def test_an_earlier_versions_tensorflow_folder_is_refused_off_tensorflow(tmp_path):
    config = ToyConfig(output_dir=str(tmp_path / "run"))
    with pytest.raises(KeyboardInterrupt):
        run_job(_job(config, [StopAfter(4)]), started=0.0)  # checkpoint 3 kept
    folder = tmp_path / "run" / "checkpoints"
    for path in folder.iterdir():  # as an earlier version left them on TensorFlow
        path.unlink()
    (folder / "ckpt-3.index").write_bytes(b"")
    (folder / "ckpt-3.data-00000-of-00001").write_bytes(b"")
    with pytest.raises(
        RunRefused, match="earlier version's tf.train format.*KERAS_BACKEND=tensorflow"
    ):
        run_job(_job(config), started=0.0)


# Trains the toy job under --strategy=mirrored on JAX's 2 host devices (XLA_FLAGS set before JAX
# loads) and prints the largest difference from NumPy's SGD on the global batches.
DATA_PARALLEL = textwrap.dedent(
    """
    import sys
    import numpy as np
    from tests.trainers.harness import test_runtime as t
    from trainers.harness import runtime
    distribution = runtime.make_distribution("mirrored", 0)
    config = t.ToyConfig(output_dir=sys.argv[1])
    job = t._job(config, distribution=distribution)
    reference = t._numpy_sgd(job.model, 6)
    record = t.run_job(job, started=0.0)
    worst = max(float(np.max(np.abs(a - b))) for a, b in zip(t._trained(job), reference))
    print(record["distribution"]["replicas"], worst)
    """
)


@pytest.mark.skipif(runtime.BACKEND != "jax", reason="Keras' DataParallel is JAX's")
def test_data_parallel_on_two_devices_trains_as_one_device(tmp_path):
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
        "PYTHONPATH": str(Path(__file__).resolve().parents[3]),
    }
    done = subprocess.run(
        [sys.executable, "-c", DATA_PARALLEL, str(tmp_path / "run")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    replicas, worst = done.stdout.split()[-2:]
    assert int(replicas) == 2 and float(worst) < 1e-5
