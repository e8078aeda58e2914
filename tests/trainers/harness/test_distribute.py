"""`--strategy` / `--cpu_devices` in the trainers (each run in its own process: logical CPU
devices must be set before TensorFlow starts).

A mirrored run on 2 logical CPUs must take the steps a default run takes on the same global
batches (the trace's per-step losses and the held-out s_mu agree), record its strategy, and a run
interrupted under one strategy resumes under the other.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainers.harness import distribute
from trainers.harness.config import ConfigError

ROOT = Path(__file__).resolve().parents[3]


def _train(program, output_dir, *flags):
    done = subprocess.run(
        [sys.executable, "-m", f"trainers.{program}", f"--output_dir={output_dir}", "--verbose=0"]
        + list(flags),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    return done


def _results(output_dir):
    return json.loads((Path(output_dir) / "results.json").read_text())


def _assert_same_steps(a, b, rel):
    losses_a = [t["loss"] for t in a["trace"]]
    losses_b = [t["loss"] for t in b["trace"]]
    assert len(losses_a) == len(losses_b) == 4
    assert losses_a == pytest.approx(losses_b, rel=rel)
    # Training moved the loss: agreement is not that of an idle model.
    assert abs(losses_a[-1] - losses_a[0]) > 100 * rel * abs(losses_a[0])
    assert a["evaluations"][-1]["s_mu"] == pytest.approx(b["evaluations"][-1]["s_mu"], rel=rel)


def test_mirrored_retrieval_run_equals_the_default_run_and_resumes_across_strategies(tmp_path):
    common = ["--train_steps=4", "--eval_every=2", "--trace_every=1", "--noevaluate_untrained"]
    mirrored, single = tmp_path / "mirrored", tmp_path / "single"
    done = _train("train_retrieval", mirrored, "--strategy=mirrored", "--cpu_devices=2", *common)
    assert done.returncode == 0, done.stderr[-3000:]
    done = _train("train_retrieval", single, *common)
    assert done.returncode == 0, done.stderr[-3000:]
    a, b = _results(mirrored), _results(single)
    assert a["distribution"]["strategy"] == "mirrored" and a["distribution"]["replicas"] == 2
    assert b["distribution"] == {"strategy": "default", "replicas": 1, "devices": []}
    _assert_same_steps(a, b, rel=1e-4)

    # Lose the mirrored run's last checkpoint: the default strategy resumes it at step 2.
    checkpoints = mirrored / "checkpoints"
    removed = list(checkpoints.glob("ckpt-4.*"))
    assert removed
    for path in removed:
        path.unlink()
    done = _train("train_retrieval", mirrored, *common)
    assert done.returncode == 0, done.stderr[-3000:]
    resumed = _results(mirrored)
    assert resumed["resumed_at_steps"] == [2]
    assert resumed["distribution"]["strategy"] == "default"
    _assert_same_steps(resumed, b, rel=1e-4)


def test_mirrored_two_head_center_loss_equals_the_default_run(tmp_path):
    """The center loss's moving centers and the backbone's (synchronized) batch norm see the
    global batch under the strategy."""
    common = [
        "--mode=center",
        "--train_steps=4",
        "--eval_every=2",
        "--trace_every=1",
        "--noevaluate_untrained",
    ]
    mirrored, single = tmp_path / "mirrored", tmp_path / "single"
    done = _train("train_two_head", mirrored, "--strategy=mirrored", "--cpu_devices=2", *common)
    assert done.returncode == 0, done.stderr[-3000:]
    done = _train("train_two_head", single, *common)
    assert done.returncode == 0, done.stderr[-3000:]
    _assert_same_steps(_results(mirrored), _results(single), rel=1e-4)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--strategy=multi_worker"], "keras-team/keras#20585"),
        (["--cpu_devices=2"], "--cpu_devices=2 needs --strategy=mirrored"),
        (["--strategy=mirrored", "--cpu_devices=5"], "must split evenly across the 5 replicas"),
        (["--cpu_devices=-1"], "--cpu_devices"),
    ],
)
def test_impossible_strategy_flags_are_refused_with_exit_2(tmp_path, flags, message):
    done = _train("train_retrieval", tmp_path / "run", "--train_steps=2", "--eval_every=2", *flags)
    assert done.returncode == 2, done.stderr[-2000:]
    assert message in done.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_single_replica_batches_pass_through():
    import tensorflow as tf

    dataset = tf.data.Dataset.range(4)
    assert distribute.replica_batches(tf.distribute.get_strategy(), lambda: dataset, 4) is dataset
    with pytest.raises(ConfigError, match="--cpu_devices=3 needs --strategy=mirrored"):
        distribute.make_strategy("default", 3)
