#!/usr/bin/env python3
"""The two commands of a fresh clone; they need nothing but python3 (>= 3.10).

    python3 tasks.py run     # set up .venv (first time only), then the main job
    python3 tasks.py test    # set up .venv (first time only), then lint and the test suite

Setup creates the virtual environment ``.venv`` in the repository and installs the package
in it (editable) with TensorFlow: ``tensorflow[and-cuda]`` where ``nvidia-smi`` runs,
``tensorflow-cpu`` elsewhere (``TF_SVMAX_TENSORFLOW=cpu`` or ``gpu`` overrides the choice).
It is done again only when pyproject.toml or that choice changed. Arguments after the verb go
to the trainer (``python3 tasks.py run --dataset=digits``) or to pytest
(``python3 tasks.py test -x``).
Both verbs run from the repository root, so the main job writes ``runs/`` there.
"""

import hashlib
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
PYTHON = VENV / "bin" / "python"
STAMP = VENV / "tf_svmax-setup.txt"
MIN_PYTHON = (3, 10)
USAGE = "usage: python3 tasks.py {run,test} [arguments for the trainer or for pytest]"


def tensorflow_extra():
    """``gpu`` where an NVIDIA driver answers, ``cpu`` otherwise (or as the environment says)."""
    chosen = os.environ.get("TF_SVMAX_TENSORFLOW")
    if chosen in ("cpu", "gpu"):
        return chosen
    if chosen:
        sys.exit(f"tasks.py: TF_SVMAX_TENSORFLOW must be 'cpu' or 'gpu'; received {chosen!r}.")
    smi = shutil.which("nvidia-smi")
    if smi and subprocess.run([smi], capture_output=True).returncode == 0:
        return "gpu"
    return "cpu"


def setup_stamp(extras):
    """What .venv's stamp holds after installing `extras`: the extras and pyproject.toml's
    SHA-256 (the dependencies and extras live there), so either changing means a new setup."""
    return f"{extras} {hashlib.sha256((ROOT / 'pyproject.toml').read_bytes()).hexdigest()}"


def setup():
    """Creates .venv and installs the package with TensorFlow and the test tools, unless the
    stamp says this exact setup is already there."""
    extras = f"{tensorflow_extra()},testtools"
    wanted = setup_stamp(extras)
    if PYTHON.exists() and STAMP.exists() and STAMP.read_text() == wanted:
        return
    if not PYTHON.exists():
        print(f"[tasks] creating the virtual environment {VENV}", flush=True)
        try:
            venv.create(VENV, with_pip=True, clear=True)
        except (subprocess.CalledProcessError, OSError) as error:
            sys.exit(
                f"tasks.py: could not create {VENV} ({error}). On Debian/Ubuntu the venv module "
                "is a separate package: sudo apt install python3-venv"
            )
    print(f"[tasks] installing tf_svmax[{extras}] into {VENV} (a few minutes, once)", flush=True)
    pip = [str(PYTHON), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, "-e", f"{ROOT}[{extras}]"], check=True, cwd=ROOT)
    STAMP.write_text(wanted)


def call(command):
    """Runs `command` to its end and returns its exit status. Ctrl-C reaches the child too (one
    process group): it stops itself (a trainer checkpoints, says how to resume, exits 130), so
    this waits for it instead of killing it."""
    process = subprocess.Popen(command)
    while True:
        try:
            return process.wait()
        except KeyboardInterrupt:
            continue


def pytest_workers(arguments, cores=None):
    """pytest-xdist's ``-n`` for the suite: one worker process per core (at most 4: each
    worker's TensorFlow already uses every core for its larger ops), none on one core or when
    the arguments choose (``-n``, ``--numprocesses``, ``-p no:xdist``)."""
    chosen = any(
        a == "-n"
        or (a.startswith("-n") and not a.startswith("--"))
        or a.startswith("--numprocesses")
        or a == "no:xdist"
        for a in arguments
    )
    cores = (os.cpu_count() or 1) if cores is None else cores
    return [] if chosen or cores < 2 else ["-n", str(min(cores, 4))]


def main(argv):
    if sys.version_info < MIN_PYTHON:
        print(f"tasks.py: needs Python >= 3.10; this is {sys.version.split()[0]}.", file=sys.stderr)
        return 2
    if len(argv) < 2 or argv[1] not in ("run", "test"):
        print(USAGE, file=sys.stderr)
        return 2
    verb, rest = argv[1], argv[2:]
    setup()
    os.chdir(ROOT)
    if verb == "run":
        command = [str(PYTHON), "-m", "trainers.train_retrieval", *rest]
        return call(command)
    lint = call([str(PYTHON), "-m", "ruff", "check", "."])
    if lint:
        return lint
    # --durations: the slowest tests in every run's log, to keep the suite's time in view.
    status = call(
        [str(PYTHON), "-m", "pytest", "-q", "--durations=20", "tests", *pytest_workers(rest), *rest]
    )
    if status == 5:
        print("tasks.py: pytest collected no tests; that is a failure here.", file=sys.stderr)
        return 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
