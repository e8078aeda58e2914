"""The trainers on JAX and PyTorch with TensorFlow unimportable (``sys.modules["tensorflow"] =
None`` in the child: any import of it fails, as where it is not installed): the main job's and
the two-head trainer's outputs and records, their refusals (exit 2 before any work), and a
SIGKILL in the middle, then the same command, giving the evaluations of an uninterrupted run on
the same backend.

Each run is a subprocess (the programs define absl flags; a backend is chosen once per
process), a few steps on the digits set."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.trainers.programs import ROOT

BACKENDS = ("jax", "torch")

# argv: the program, the step after which the process SIGKILLs itself (0: never), its flags.
# The kill comes from inside at a fixed step (after the checkpoint of step 2, before the one of
# step 4): a kill from outside would race a run of a few steps.
DRIVER = textwrap.dedent(
    """
    import os, runpy, signal, sys
    sys.modules["tensorflow"] = None  # as if not installed: `import tensorflow` fails
    program, kill_at, flags = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    if kill_at:
        from trainers.harness import loop

        original = loop._Cadence.on_train_batch_end

        def on_train_batch_end(self, batch, logs=None):
            original(self, batch, logs)
            if self._step(batch + 1) == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

        loop._Cadence.on_train_batch_end = on_train_batch_end
    sys.argv = [program, *flags]
    runpy.run_module("trainers." + program, run_name="__main__", alter_sys=True)
    """
)


def _run(backend, program, *flags, kill_at=0, driver=DRIVER):
    env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", driver, program, str(kill_at), *flags],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _flags(output_dir, *extra):
    return [
        f"--output_dir={output_dir}",
        "--dataset=digits",
        "--train_steps=6",
        "--eval_every=2",
        "--verbose=0",
        *extra,
    ]


# The main job, and the two-head trainer with the center loss: its centers live in a layer of
# the model, so a resume that lost them would train steps 3 to 6 differently.
PROGRAMS = [("train_retrieval", ()), ("train_two_head", ("--mode=center",))]


def _evaluations(output_dir):
    record = json.loads((output_dir / "results.json").read_text())
    return record, [
        {k: e[k] for k in record["metric_keys"] + ["step"]} for e in record["evaluations"]
    ]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("program, extra", PROGRAMS, ids=[p for p, _ in PROGRAMS])
def test_a_trainer_runs_and_resumes_after_sigkill_without_tensorflow(
    tmp_path, backend, program, extra
):
    whole = tmp_path / "whole"
    done = _run(backend, program, *_flags(whole, *extra))
    assert done.returncode == 0, done.stderr[-3000:]
    record, uninterrupted = _evaluations(whole)
    assert record["status"] == "completed" and record["versions"]["keras_backend"] == backend
    assert record["device"] and record["distribution"]["backend"] == backend
    assert [e["step"] for e in uninterrupted] == [0, 2, 4, 6]
    assert {"recall_at_1", "nmi"} <= set(record["metric_keys"])
    assert list(whole.glob("*.keras")) and list(whole.glob("*.png"))
    # SIGKILL after step 3 (the checkpoint of step 2 kept), then the same command.
    killed = tmp_path / "killed"
    cut = _run(backend, program, *_flags(killed, *extra), kill_at=3)
    assert cut.returncode == -9, cut.stderr[-3000:]
    assert json.loads((killed / "results.json").read_text())["status"] == "running"
    again = _run(backend, program, *_flags(killed, *extra))
    assert again.returncode == 0, again.stderr[-3000:]
    record, resumed = _evaluations(killed)
    assert record["resumed_at_steps"] == [2]
    assert len(resumed) == len(uninterrupted)
    for got, want in zip(resumed, uninterrupted, strict=True):
        assert got == pytest.approx(want, rel=1e-5, abs=1e-6)


@pytest.mark.parametrize(
    "backend, program, flags, message",
    [
        (
            "jax",
            "train_retrieval",
            ["--strategy=multi_worker"],
            "--strategy=multi_worker is tf.distribute's",
        ),
        (
            "torch",
            "train_two_head",
            ["--strategy=mirrored"],
            "--strategy=mirrored needs a Keras distribution",
        ),
        (
            "jax",
            "train_retrieval",
            ["--dataset=cub200", f"--data_dir={ROOT}"],
            "--dataset=cub200 reads image files through tf.data, which needs TensorFlow",
        ),
        ("jax", "train_gan_mog", [], "train_gan_mog runs with KERAS_BACKEND=tensorflow only"),
        (
            "jax",
            "reproduce_gan_mog",
            [],
            "reproduce_gan_mog runs with KERAS_BACKEND=tensorflow only",
        ),
        (
            "torch",
            "train_contrastive",
            [],
            "train_contrastive runs with KERAS_BACKEND=tensorflow only",
        ),
        (
            "jax",
            "pretrain_glyphs",
            [],
            "pretrain_glyphs runs with KERAS_BACKEND=tensorflow only",
        ),
    ],
)
def test_what_needs_tensorflow_is_refused_before_any_work(
    tmp_path, backend, program, flags, message
):
    out = tmp_path / "run"
    done = _run(backend, program, f"--output_dir={out}", *flags)
    assert done.returncode == 2 and message in done.stderr, done.stderr[-3000:]
    assert not out.exists()


# The same programs with TensorFlow installed and importable: a run that reads no image files
# never loads it (Keras' `set_random_seed` would, to seed it: tens of seconds, and on a GPU
# machine TensorFlow would take the devices' memory beside JAX or PyTorch).
LOADED_AT_EXIT = textwrap.dedent(
    """
    import atexit, runpy, sys
    atexit.register(lambda: print("tensorflow loaded:", "tensorflow" in sys.modules))
    program, flags = sys.argv[1], sys.argv[3:]  # argv[2]: `_run`'s kill_at, unused here
    sys.argv = [program, *flags]
    runpy.run_module("trainers." + program, run_name="__main__", alter_sys=True)
    """
)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_run_of_an_embedded_set_does_not_load_an_installed_tensorflow(tmp_path, backend):
    pytest.importorskip("tensorflow", reason="TensorFlow is not installed: nothing to load")
    flags = _flags(tmp_path / "run")
    flags[2] = "--train_steps=2"
    done = _run(backend, "train_retrieval", *flags, driver=LOADED_AT_EXIT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "tensorflow loaded: False" in done.stdout, done.stdout[-2000:]
