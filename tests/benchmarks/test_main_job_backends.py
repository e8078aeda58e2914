"""benchmarks/main_job_backends.py: its per-backend summary against NumPy, its reuse of completed
runs, its refusals, and one tiny run end to end (the trainer in a subprocess)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from benchmarks import main_job_backends as bench
from tests.trainers.programs import ROOT


def _row(backend, seed, r1, step_seconds):
    return {
        "backend": backend,
        "seed": seed,
        "test_recall_at_1": r1,
        "step_seconds_median": step_seconds,
        "versions": {backend: "x", "keras": "3"},
    }


def test_the_summary_is_numpys_mean_std_and_ratio():
    tf_r1, jax_r1 = [0.80, 0.82, 0.87], [0.80, 0.82, 0.83]
    tf_s, jax_s = [0.05, 0.07, 0.06], [0.2, 0.3, 0.25]
    rows = [_row("tensorflow", i, r, s) for i, (r, s) in enumerate(zip(tf_r1, tf_s, strict=True))]
    rows += [_row("jax", i, r, s) for i, (r, s) in enumerate(zip(jax_r1, jax_s, strict=True))]
    summary = bench.summarize(rows, ["tensorflow", "jax"])
    assert summary["tensorflow"]["recall_at_1_mean"] == pytest.approx(np.mean(tf_r1))
    assert summary["jax"]["recall_at_1_std"] == pytest.approx(np.std(jax_r1, ddof=1))
    assert summary["jax"]["recall_at_1_minus_tensorflow"] == pytest.approx(
        np.mean(jax_r1) - np.mean(tf_r1)
    )
    assert summary["jax"]["within_3_points_of_tensorflow"] is True  # 1.33 points below
    assert summary["jax"]["step_time_vs_tensorflow"] == pytest.approx(
        np.median(jax_s) / np.median(tf_s)
    )
    assert "within_3_points_of_tensorflow" not in summary["tensorflow"]
    assert "| jax (jax x, Keras 3) | 0, 1, 2 |" in bench.format_table(summary, rows)


def test_three_points_is_the_bound():
    rows = [_row("tensorflow", 0, 0.80, 0.1), _row("torch", 0, 0.765, 0.1)]
    summary = bench.summarize(rows, ["tensorflow", "torch"])
    assert summary["torch"]["within_3_points_of_tensorflow"] is False
    assert summary["torch"]["recall_at_1_std"] is None  # one seed: no sample std


def test_only_a_completed_run_of_the_same_flags_is_reused(tmp_path):
    record = {"status": "completed", "config": {"seed": 1, "train_steps": 5}}
    (tmp_path / "results.json").write_text(json.dumps(record))
    assert bench.completed(str(tmp_path), 1, None) == record
    assert bench.completed(str(tmp_path), 1, 5) == record
    assert bench.completed(str(tmp_path), 2, None) is None  # another seed
    assert bench.completed(str(tmp_path), 1, 6) is None  # other steps
    record["status"] = "running"
    (tmp_path / "results.json").write_text(json.dumps(record))
    assert bench.completed(str(tmp_path), 1, None) is None
    assert bench.completed(str(tmp_path / "absent"), 1, None) is None


def _program(*flags, cwd=ROOT):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.main_job_backends", *flags],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.parametrize(
    "flag, message",
    [
        ("--seeds=0,x", "--seeds takes integers; received --seeds=0,x."),
        ("--seeds=1,1", "--seeds takes distinct integers >= 0; received --seeds=1,1."),
        ("--backends=jax,mxnet", "--backends takes distinct names of"),
    ],
)
def test_bad_flags_are_refused_before_any_run(tmp_path, flag, message):
    done = _program(flag, f"--runs_dir={tmp_path}/runs")
    assert done.returncode == 2 and message in done.stderr, done.stderr[-2000:]
    assert not (tmp_path / "runs").exists()


def test_a_tiny_run_end_to_end_then_reused(tmp_path):
    flags = [
        "--backends=tensorflow",
        "--seeds=3",
        "--train_steps=2",  # two trace windows for the median step time, three evaluations
        f"--runs_dir={tmp_path}/runs",
        f"--output={tmp_path}/out",
    ]
    done = _program(*flags)
    assert done.returncode == 0, done.stderr[-3000:]
    run = json.loads((tmp_path / "runs/tensorflow/seed3/results.json").read_text())
    record = json.loads((tmp_path / "out/main_job_backends.json").read_text())
    (only,) = record["runs"]
    assert only["test_recall_at_1"] == run["evaluations"][-1]["recall_at_1"]
    assert run["config"]["seed"] == 3 and run["config"]["train_steps"] == 2
    assert record["machine"]["cpu_count"] == os.cpu_count()
    assert (tmp_path / "out/main_job_backends.csv").exists()
    again = _program(*flags)  # the completed run is read, not run again
    assert again.returncode == 0 and "->" not in again.stderr, again.stderr[-2000:]
