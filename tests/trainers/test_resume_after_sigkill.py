"""On TensorFlow, the state a job keeps beside its model survives a SIGKILL: the run killed in
the middle, then the same command, gives the evaluations of an uninterrupted run (Keras'
checkpoint files hold it: the two-head trainer's center-loss centers, the GAN's second
optimizer, the contrastive trainer's key encoder and queue). The same on JAX and PyTorch:
`test_trainers_without_tensorflow.py`.

Each run is a subprocess (the programs define absl flags), a few steps."""

import json

import pytest

from tests.trainers.test_trainers_without_tensorflow import DRIVER, _evaluations, _run

# The driver of the JAX and PyTorch test, TensorFlow importable.
TF_DRIVER = DRIVER.replace('sys.modules["tensorflow"] = None', "pass")
COMMON = ["--train_steps=6", "--eval_every=2", "--verbose=0"]
PROGRAMS = [
    ("train_two_head", ["--dataset=digits", "--mode=center"]),
    (
        "train_gan_mog",
        ["--batch_size=32", "--noise_dim=8", "--hidden_units=16", "--num_samples=300"],
    ),
    (
        "train_contrastive",
        [
            "--dataset=digits",
            "--batch_size=8",
            "--queue_size=16",
            "--embedding_dim=8",
            "--hidden_units=16",
            "--test_views=4",
        ],
    ),
]


@pytest.mark.parametrize("program, extra", PROGRAMS, ids=[p for p, _ in PROGRAMS])
def test_state_beside_the_model_survives_a_sigkill_on_tensorflow(tmp_path, program, extra):
    def run(folder, kill_at=0):
        flags = [f"--output_dir={folder}", *COMMON, *extra]
        return _run("tensorflow", program, *flags, kill_at=kill_at, driver=TF_DRIVER)

    whole = tmp_path / "whole"
    done = run(whole)
    assert done.returncode == 0, done.stderr[-3000:]
    _, uninterrupted = _evaluations(whole)
    assert [e["step"] for e in uninterrupted][-3:] == [2, 4, 6]
    killed = tmp_path / "killed"
    cut = run(killed, kill_at=3)  # after the checkpoint of step 2, before the one of step 4
    assert cut.returncode == -9, cut.stderr[-3000:]
    assert json.loads((killed / "results.json").read_text())["status"] == "running"
    assert sorted(p.name for p in (killed / "checkpoints").iterdir()) == [
        "ckpt-2.json",
        "ckpt-2.weights.h5",
    ]
    again = run(killed)
    assert again.returncode == 0, again.stderr[-3000:]
    record, resumed = _evaluations(killed)
    assert record["resumed_at_steps"] == [2]
    assert len(resumed) == len(uninterrupted)
    for got, want in zip(resumed, uninterrupted, strict=True):
        assert got.keys() == want.keys()
        for key, value in want.items():  # None: a metric undefined at that evaluation
            assert got[key] == (
                None if value is None else pytest.approx(value, rel=1e-5, abs=1e-6)
            ), key
