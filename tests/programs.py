"""Running this checkout's programs (probes, benchmarks) as subprocesses from a test.

A probe that needs a process of its own (a strategy's logical devices, absl flags, a second
worker) runs as ``python -m <module>`` from the repository root with the repository first on
the path, and prints its result as JSON on its last line of output.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def checkout_env(**overrides):
    """This process' environment with the repository first on ``PYTHONPATH`` (the caller's
    entries kept after it), and `overrides` set."""
    path = str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": path, **overrides}


def run_python(*args, timeout=600):
    """``python <args>`` from the repository root with `checkout_env`; the `CompletedProcess`
    (output captured as text)."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=checkout_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_json_module(module, *args, timeout=600):
    """The JSON object that ``python -m <module> <args>`` prints on its last line of output;
    fails the test with the end of its stderr if it exits non-zero."""
    done = run_python("-m", module, *map(str, args), timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
