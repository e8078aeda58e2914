"""Tests of the benchmark programs (`benchmarks/`), each run as a subprocess."""

from tests.programs import ROOT, run_python

__all__ = ["ROOT", "run_program", "run_python"]


def run_program(program, *flags, timeout=600):
    """`python -m benchmarks.<program> <flags>` from the repository root (absl flags are
    process-global, so every run is its own process); the `CompletedProcess`."""
    return run_python("-m", f"benchmarks.{program}", *flags, timeout=timeout)
