"""tasks.py, the README's two commands: argument handling before any setup."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _tasks(*args, **env):
    return subprocess.run(
        [sys.executable, str(ROOT / "tasks.py"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )


def test_unknown_or_missing_verb_prints_usage_and_exits_2():
    for args in ((), ("deploy",)):
        done = _tasks(*args)
        assert done.returncode == 2 and "usage: python3 tasks.py {run,test}" in done.stderr


def test_bad_tensorflow_choice_is_refused_before_setup():
    done = _tasks("run", TF_SVMAX_TENSORFLOW="tpu")
    assert done.returncode != 0 and "TF_SVMAX_TENSORFLOW must be 'cpu' or 'gpu'" in done.stderr


def _tasks_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("tasks", ROOT / "tasks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_suite_runs_one_pytest_worker_per_core_unless_told():
    workers = _tasks_module().pytest_workers
    assert workers([], cores=2) == ["-n", "2"]
    assert workers(["-x"], cores=16) == ["-n", "4"]  # each worker's TensorFlow uses every core
    assert workers([], cores=1) == []
    for chosen in (["-n", "0"], ["-n0"], ["--numprocesses=3"], ["-p", "no:xdist"]):
        assert workers(["-x", *chosen], cores=2) == [], chosen
    assert workers(["--noconftest"], cores=2) == ["-n", "2"]


def test_setup_is_redone_when_pyproject_or_the_extras_change():
    import hashlib

    stamp = _tasks_module().setup_stamp
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    assert stamp("cpu,testtools") == f"cpu,testtools {digest}"
    assert stamp("gpu,testtools") != stamp("cpu,testtools")
