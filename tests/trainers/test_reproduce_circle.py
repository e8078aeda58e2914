"""reproduce_circle: the spread formula, frames, table and refusals."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tf_svmax import data
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


def test_circle_stats_against_closed_forms():
    from tf_svmax import ops

    n = 360
    angles = 2 * np.pi * (np.arange(n) + 0.5) / n  # 10 points in each of the 36 bins
    ring = np.stack([np.cos(angles), np.sin(angles)], 1)
    out = reproduce_circle.circle_stats(ring)
    assert out["angle_entropy"] == pytest.approx(np.log(36), rel=1e-12)
    assert out["bins_occupied"] == 36
    lower, upper = ops.svmax_bounds(n, 2)
    s_mu = np.linalg.svd(ring, compute_uv=False).mean()
    assert out["spread"] == pytest.approx((s_mu - lower) / (upper - lower), rel=1e-12)
    assert out["spread"] == pytest.approx(1.0, abs=1e-9)
    # Polarised: two antipodal clusters, half the points each -> two bins, entropy ln 2, rank 1.
    poles = np.repeat([[1.0, 1e-9], [-1.0, 1e-9]], n // 2, axis=0)
    out = reproduce_circle.circle_stats(poles)
    assert out["bins_occupied"] == 2 and out["angle_entropy"] == pytest.approx(np.log(2))
    assert out["spread"] == pytest.approx(0.0, abs=1e-6)
    # Counts 3:1 over two bins: -(3/4 ln 3/4 + 1/4 ln 1/4).
    skew = np.array([[1.0, 0.01]] * 3 + [[0.0, 1.0]])
    expected = -(0.75 * np.log(0.75) + 0.25 * np.log(0.25))
    assert reproduce_circle.circle_stats(skew)["angle_entropy"] == pytest.approx(expected)


def test_frame_steps_include_both_ends():
    assert reproduce_circle.frame_steps(1000, 6) == [0, 200, 400, 600, 800, 1000]


def test_smoke(tmp_path):
    table = tmp_path / "circle.md"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainers.reproduce_circle",
            "--protocol=ours",
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
    assert set(record) == {"runs", "over_time"} and set(record["runs"]) == {"none", "svmax"}
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
            "--protocol=ours",
            "--dataset=cub200",
            f"--output_dir={tmp_path}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and "embedded set" in proc.stderr


def _circle(*flags, timeout=600):
    return subprocess.run(
        [sys.executable, "-m", "trainers.reproduce_circle", *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_original_protocol_smoke(tmp_path):
    table = tmp_path / "circle.md"
    proc = _circle(
        "--epochs=2",  # --protocol=original is the default
        "--seeds=0",
        "--frames=2",
        f"--output_dir={tmp_path / 'runs'}",
        f"--table={table}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = table.read_text()
    assert text.startswith("# 2-D circle embedding (SVMax paper Fig. 4,")
    assert "Protocol `original`" in text and "| contrastive + SVMax |" in text
    steps_per_epoch = len(data.load_digits_closed_set()["train"][1]) // 32
    for regularizer in ("none", "svmax"):
        run = tmp_path / "runs" / f"original_{regularizer}_seed0"
        results = json.loads((run / "results.json").read_text())
        c = results["config"]
        assert (c["dataset"], c["backbone"], c["embedding_dim"]) == (
            "digits_closed",
            "mnist_toy",
            2,
        )
        assert (c["batch_p"], c["batch_k"], c["loss"], c["margin"]) == (8, 4, "contrastive", 1.0)
        assert (c["momentum"], c["lr_schedule"], c["learning_rate"]) == (0.0, "constant", 0.01)
        assert c["regularizer"] == regularizer
        assert c["train_steps"] == 2 * steps_per_epoch
        assert {t["learning_rate"] for t in results["trace"]} == {0.01}
        # Embeddings at every epoch boundary (0, 1, 2), 320 test images each; the figure
        # shows --frames=2 of them.
        frames = run / "frames"
        assert sorted(p.name for p in frames.glob("step_*.npy")) == [
            "step_000000.npy",
            f"step_{steps_per_epoch:06d}.npy",
            f"step_{2 * steps_per_epoch:06d}.npy",
        ]
        embedding = np.load(frames / f"step_{2 * steps_per_epoch:06d}.npy")
        assert embedding.shape == (320, 2)
        np.testing.assert_allclose(np.linalg.norm(embedding, axis=1), 1.0, atol=1e-5)
        assert set(np.load(frames / "labels.npy")) == set(range(10))
    svmax = json.loads((tmp_path / "runs" / "original_svmax_seed0" / "results.json").read_text())
    assert svmax["config"]["svmax_lambda"] == 1.0
    # The over-time table: every recorded epoch, its stats recomputed from the saved frames.
    record = json.loads((tmp_path / "circle.json").read_text())
    over_time = record["over_time"]["svmax"]
    assert [row["epoch"] for row in over_time] == [0, 1, 2]
    frame = np.load(tmp_path / "runs" / "original_svmax_seed0" / "frames" / "step_000000.npy")
    assert over_time[0]["per_seed"][0] == pytest.approx(reproduce_circle.circle_stats(frame))
    assert "| 2 | contrastive + SVMax |" in text
    assert (tmp_path / "circle.png").exists() and (tmp_path / "circle_s_mu.png").exists()


def test_original_colours_are_the_originals():
    # mnist_embedding.py l.166-167, classes 0-9.
    assert reproduce_circle.ORIGINAL_COLOURS == (
        "green",
        "yellow",
        "orange",
        "purple",
        "red",
        "black",
        "hotpink",
        "cyan",
        "navy",
        "indigo",
    )


@pytest.mark.parametrize(
    "flags, message",
    [
        (("--dataset=glyphs",), "--protocol=original trains on digits_closed"),
        (("--train_steps=10",), "--protocol=original counts --epochs"),
        (("--protocol=ours", "--epochs=3"), "--epochs is for --protocol=original"),
        (("--protocol=theirs",), "protocol"),
    ],
)
def test_protocol_flags_are_refused_where_they_do_not_apply(tmp_path, flags, message):
    proc = _circle(*flags, f"--output_dir={tmp_path / 'never'}", timeout=300)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-1000:]
    assert not (tmp_path / "never").exists()
