"""benchmarks/mining_memory.py end to end on a tiny grid (no timing is asserted)."""

import json

from tests.benchmarks import run_program


def _run(*flags):
    return run_program("mining_memory", *flags)


def test_records_time_and_memory_and_kills_past_the_limit(tmp_path):
    done = _run(
        "--losses=semihard,batch_hard",
        "--batches=8",
        "--repeats=1",
        "--nocompare_pml",
        f"--output_dir={tmp_path}",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads((tmp_path / "mining_memory.json").read_text())["results"]
    assert {(r["loss"], r["batch"]) for r in rows} == {("semihard", 8), ("batch_hard", 8)}
    assert all(r["peak_rss_mb"] > 0 and r["median_ms"] > 0 for r in rows)
    assert (tmp_path / "mining_memory.png").stat().st_size > 0
    # A limit below what TensorFlow needs to start: the run is killed and recorded as such.
    done = _run(
        "--losses=semihard",
        "--batches=8",
        "--memory_limit_gb=0.05",
        "--nocompare_pml",
        "--label=tiny",
        f"--output_dir={tmp_path}",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads((tmp_path / "mining_memory.json").read_text())["results"]
    assert [r["killed"] for r in rows if r["code"] == "tiny"] == ["resident memory above 0.05 GB"]
    assert len(rows) == 3  # the first run's rows are kept beside it


def test_bad_flags_are_refused_before_any_work(tmp_path):
    for flag in ("--losses=semihard,nope", "--batches=6", "--memory_limit_gb=0"):
        done = _run(flag, f"--output_dir={tmp_path}")
        assert done.returncode == 2, (flag, done.stderr[-2000:])
        assert not any(tmp_path.iterdir())
