"""Tests of the benchmark programs (`benchmarks/`), each run as a subprocess."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_program(program, *flags, timeout=600):
    """`python -m benchmarks.<program> <flags>` from the repository root (absl flags are
    process-global, so every run is its own process); the `CompletedProcess`."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(
        [sys.executable, "-m", f"benchmarks.{program}", *flags],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
