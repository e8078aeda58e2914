"""Tests of the benchmark programs (`benchmarks/`), each run as a subprocess."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_program(program, *flags, timeout=600):
    """`python -m benchmarks.<program> <flags>` from the repository root (absl flags are
    process-global, so every run is its own process); the `CompletedProcess`."""
    return run_python("-m", f"benchmarks.{program}", *flags, timeout=timeout)


def run_python(*args, timeout=600):
    """`python <args>` from the repository root, with the repository first on the path; the
    `CompletedProcess`."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
