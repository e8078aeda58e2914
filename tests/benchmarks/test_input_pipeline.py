"""`benchmarks/input_pipeline.py` end to end on a tiny tree (no timing is asserted), and its
refusals (exit status 2 before any work)."""

import json
import os

import pytest

from tests.benchmarks import run_program

TINY = (
    "--num_classes=3",
    "--images_per_class=4",
    "--image_width=40",
    "--image_height=30",
    "--batch_p=2",
    "--input_size=16",
    "--parallel_calls=1,autotune",
    "--threads=1,2",
    "--batches=2",
    "--warmup_batches=1",
    "--repeats=1",
    "--stage_images=4",
    "--backbone=small_cnn",
    "--steps=1",
    "--warmup_steps=1",
)


def _run(*flags):
    return run_program("input_pipeline", *flags)


def test_tiny_tree_end_to_end_and_reused(tmp_path):
    tree, out = tmp_path / "tree", tmp_path / "out"
    done = _run(*TINY, f"--data_dir={tree}", f"--output_dir={out}")
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((out / "input_pipeline.json").read_text())
    assert set(results["versions"]) >= {"tensorflow", "keras", "tf_svmax"}
    assert results["machine"]["cpu_count"] >= 1
    rows = results["results"]
    settings = {
        (r["pipeline"], r["num_parallel_calls"], r["threads"])
        for r in rows
        if r["kind"] == "pipeline"
    }
    assert settings == {
        (p, c, t) for p in ("files", "decoded_cache") for c in ("1", "autotune") for t in (1, 2)
    }
    assert {r["feed"] for r in rows if r["kind"] == "step"} == {
        "constant",
        "files",
        "decoded_cache",
    }
    assert 0 < results["summary"]["decode_share_of_map_fn"]
    assert results["decoded_cache"]["images"] == 12  # classes 1-3 are all training classes
    assert not results["tree"]["reused"] and results["tree"]["images"] == 12
    assert (out / "input_pipeline.csv").exists() and (out / "input_pipeline.png").stat().st_size
    base = tree / "CUB_200_2011"
    assert len((base / "images.txt").read_text().splitlines()) == 12
    assert len(list((base / "images").rglob("*.jpg"))) == 12
    # A second run reuses the tree; no cache, no step.
    again = _run(*TINY, "--nocache", "--backbone=none", f"--data_dir={tree}", f"--output_dir={out}")
    assert again.returncode == 0, again.stderr[-3000:]
    results = json.loads((out / "input_pipeline.json").read_text())
    assert results["tree"]["reused"] and results["decoded_cache"] is None
    assert not [r for r in results["results"] if r["kind"] == "step"]


@pytest.mark.parametrize(
    "flag, message",
    [
        ("--parallel_calls=0", "parallel_calls"),
        ("--parallel_calls=many", "parallel_calls"),
        ("--threads=0", "threads"),
        ("--jpeg_quality=100", "jpeg_quality"),
        ("--batch_p=3", "batch_p"),
        ("--batch_p=102", "at most the 100 training classes"),
        ("--warmup_steps=-1", "warmup_steps"),
        ("--repeats=abc", "repeats"),
        ("--backbone=vgg", "backbone"),
    ],
)
def test_bad_flags_exit_2_before_any_work(tmp_path, flag, message):
    done = _run(flag, f"--data_dir={tmp_path / 'tree'}", f"--output_dir={tmp_path / 'out'}")
    assert done.returncode == 2 and message in done.stderr, done.stderr[-1000:]
    assert not os.listdir(tmp_path)
