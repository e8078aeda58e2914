"""reproduce_circle: the spread formula, frames, table and refusals."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from trainers import reproduce_circle

ROOT = Path(__file__).resolve().parents[2]


def test_spread_is_zero_for_a_rank_one_batch_and_one_at_the_upper_bound():
    from tf_svmax import ops

    b = 144
    lower, upper = ops.svmax_bounds(b, 2)
    line = np.repeat([[1.0, 0.0], [-1.0, 0.0]], b // 2, axis=0)  # polarised: rank 1
    angles = 2 * np.pi * np.arange(b) / b
    ring = np.stack([np.cos(angles), np.sin(angles)], 1)  # uniform on the circle
    s = lambda x: np.linalg.svd(x, compute_uv=False).mean()  # noqa: E731
    assert reproduce_circle.spread(s(line), lower, upper) == pytest.approx(0.0, abs=1e-12)
    assert reproduce_circle.spread(s(ring), lower, upper) == pytest.approx(1.0, abs=1e-12)


def test_frame_steps_include_both_ends():
    assert reproduce_circle.frame_steps(1000, 6) == [0, 200, 400, 600, 800, 1000]


def test_smoke(tmp_path):
    table = tmp_path / "circle.md"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainers.reproduce_circle",
            "--dataset=digits",
            "--train_steps=4",
            "--seeds=0",
            "--frames=2",
            "--frame_images=50",
            f"--output_dir={tmp_path / 'runs'}",
            f"--table={table}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| contrastive + SVMax |" in table.read_text()
    record = json.loads(table.with_suffix(".json").read_text())
    assert set(record) == {"none", "svmax"}
    frames = tmp_path / "runs" / "svmax_seed0" / "frames"
    assert np.load(frames / "step_000004.npy").shape == (50, 2)
    assert np.load(frames / "labels.npy").shape == (50,)
    results = json.loads((tmp_path / "runs" / "none_seed0" / "results.json").read_text())
    assert len(results["trace"]) == 4  # s_mu, L and U at every step
    assert {"mean_singular_value", "svmax_lower_bound", "svmax_upper_bound"} <= set(
        results["trace"][0]
    )
    assert (tmp_path / "circle.png").exists() and (tmp_path / "circle_s_mu.png").exists()


def test_refuses_a_file_dataset(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainers.reproduce_circle",
            "--dataset=cub200",
            f"--output_dir={tmp_path}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and "embedded set" in proc.stderr
