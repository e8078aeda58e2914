"""The two-head reproduction program: its grid, its table against the runs' own records."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def _run(*flags, timeout=600):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "trainers.reproduce_two_head", *flags],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_reproduce_two_head_writes_the_table_from_the_runs(tmp_path):
    table = tmp_path / "t.md"
    done = _run(
        "--dataset=digits",
        "--train_steps=4",
        "--seeds=0,1",
        "--modes=softmax,hard",
        "--settings=balanced,long_tailed",
        "--imbalance_ratio=5",
        f"--output_dir={tmp_path}",
        f"--table={table}",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    text = table.read_text()
    for row in ("| balanced | Softmax (single head) |", "| long_tailed | Two-head (hard) |"):
        assert row in text
    assert "seeds 0, 1" in text and "Wall time" in text
    runs = sorted(p.name for p in tmp_path.iterdir() if p.is_dir())
    assert runs == sorted(
        f"{s}_{m}_seed{seed}"
        for s in ("balanced", "long_tailed")
        for m in ("softmax", "hard")
        for seed in (0, 1)
    )

    def record(name):
        return json.loads((tmp_path / name / "results.json").read_text())

    # Settings differ only in the data: the long-tailed one holds fewer, unequal classes.
    balanced, tail = record("balanced_softmax_seed0"), record("long_tailed_softmax_seed0")
    assert balanced["config"]["imbalance_ratio"] == 1.0 and tail["config"]["imbalance_ratio"] == 5
    assert tail["data"]["train_images"] < balanced["data"]["train_images"]
    assert [e["step"] for e in tail["evaluations"]] == [4]  # one evaluation, at the end
    # A cell is the mean ± sample std of the runs' final accuracy; Δ is per seed.
    acc = [
        100 * record(f"long_tailed_hard_seed{s}")["evaluations"][-1]["macro_accuracy"]
        for s in (0, 1)
    ]
    assert f"{np.mean(acc):.2f} ± {np.std(acc, ddof=1):.2f}" in text
    soft = [
        100 * record(f"long_tailed_softmax_seed{s}")["evaluations"][-1]["macro_accuracy"]
        for s in (0, 1)
    ]
    delta = np.subtract(acc, soft)
    assert f"{np.mean(delta):.2f} ± {np.std(delta, ddof=1):.2f}" in text
    assert (tmp_path / "t.png").stat().st_size > 0
    assert set(json.loads((tmp_path / "t.json").read_text())) == {
        f"{s}/{m}" for s in ("balanced", "long_tailed") for m in ("softmax", "hard")
    }


def test_reproduce_two_head_refuses_bad_flags_before_training(tmp_path):
    for flag, message in (
        ("--modes=softmax,triplet", "triplet"),
        ("--settings=tiny", "tiny"),
        ("--seeds=a", "--seeds"),
        ("--scarce_images_per_class=0", "scarce_images_per_class"),
    ):
        done = _run("--dataset=digits", flag, f"--output_dir={tmp_path}", timeout=120)
        assert done.returncode == 2 and message in done.stderr, (flag, done.stderr[-500:])
        assert not any(tmp_path.iterdir())
