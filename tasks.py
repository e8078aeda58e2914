#!/usr/bin/env python3
"""The two commands of a fresh clone; they need nothing but python3 (>= 3.10).

    python3 tasks.py run     # set up .venv (first time only), then the main job
    python3 tasks.py test    # set up .venv (first time only), then lint and the test suite

Setup creates the virtual environment ``.venv`` in the repository and installs the package
in it (editable) with the trainers' extra and TensorFlow: ``tensorflow[and-cuda]`` where
``nvidia-smi`` runs, ``tensorflow-cpu`` elsewhere (``TF_SVMAX_TENSORFLOW=cpu`` or ``gpu``
overrides the choice).
It is done again only when pyproject.toml or that choice changed. Arguments after the verb go
to the trainer (``python3 tasks.py run --dataset=digits``) or to pytest
(``python3 tasks.py test -x``).
``test`` also needs one system package, Debian's ``chromium`` at /usr/bin/chromium (the docs
site's browser test): where it is missing it installs it with apt-get when the user is root or
has sudo without a password, and otherwise stops before any test with the command to run.
Both verbs run from the repository root, so the main job writes ``runs/`` there.
"""

import errno
import hashlib
import os
import shutil
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
PYTHON = VENV / "bin" / "python"
STAMP = VENV / "tf_svmax-setup.txt"
MIN_PYTHON = (3, 10)
# The docs site's browser test (tests/test_docs_site.py) opens the built pages in this binary.
CHROMIUM = Path("/usr/bin/chromium")
APT_INSTALL_CHROMIUM = [
    ["apt-get", "update", "-qq"],
    ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-qq", "chromium"],
]
# The other Keras backends the core's tests run on (the test files marked all_backends, see
# tests/conftest.py), each in a process of its own after the main suite. torch 2.13.0 is pinned
# because that release's CPU build lies on the CI machines' disk (PIP_FIND_LINKS), where a newer
# one would be a CUDA build of GBs.
OTHER_BACKENDS = ("jax", "torch")
# The backend runs split over pytest-xdist workers (`pytest_workers`): JAX's is the long one (~10
# min alone on CI's 2 cores, PyTorch's ~4); with two workers beside PyTorch's run it took 7.5 min
# (measured on the 2-core CPU, both runs at once as here).
SPLIT_BACKENDS = ("jax",)
BACKEND_PACKAGES = ["jax[cpu]>=0.8", "torch==2.13.0"]
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
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    return f"{extras} {' '.join(BACKEND_PACKAGES)} {digest}"


def has_pip(python):
    """Whether `python` exists and runs pip (a .venv whose creation stopped half way, e.g. where
    Debian's python3-venv is missing, has a python without pip)."""
    if not Path(python).exists():
        return False
    done = subprocess.run([str(python), "-m", "pip", "--version"], capture_output=True)
    return done.returncode == 0


# What creating a folder raises where this user may not write.
NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


def make_venv(folder=VENV, create=venv.create):
    """Creates the virtual environment `folder` where it is missing or has no pip (made anew:
    an earlier setup stopped half way); returns an error sentence, or None once it runs pip.
    `create` is `venv.create` unless given (the tests give it)."""
    python = Path(folder) / "bin" / "python"
    if has_pip(python):
        return None
    again = " anew (the one there has no pip: an earlier setup stopped)" if python.exists() else ""
    print(f"[tasks] creating the virtual environment {folder}{again}", flush=True)
    try:
        create(folder, with_pip=True, clear=True)
    except OSError as error:
        if error.errno not in NOT_WRITABLE:
            return f"tasks.py: could not create {folder} ({error})."
        return (
            f"tasks.py: this user cannot write {error.filename or Path(folder).parent} "
            f"({error.strerror}), where the setup creates {folder}; run tasks.py in a clone "
            "this user can write (git clone the repository), or as the checkout's owner."
        )
    except subprocess.CalledProcessError as error:  # ensurepip failed
        return (
            f"tasks.py: could not install pip into {folder} ({error}). On Debian/Ubuntu the venv "
            "module's pip is a separate package: sudo apt install python3-venv, then run this "
            "command again."
        )
    return None


def install(commands, run=subprocess.run):
    """Runs the pip `commands` in order; returns an error sentence at the first that fails
    (its output is above it), else None."""
    for command in commands:
        status = run(command, cwd=ROOT).returncode
        if status:
            return (
                f"tasks.py: `{' '.join(command)}` failed (exit status {status}; its output "
                f"is above). Fix what it says and run this command again; if {VENV} itself is "
                f"broken, delete it (rm -rf {VENV}) and run again."
            )
    return None


def setup():
    """Creates .venv and installs the package with TensorFlow and the test tools, unless the
    stamp says this exact setup is already there; exits with a sentence where it cannot."""
    extras = f"{tensorflow_extra()},trainers,testtools"
    wanted = setup_stamp(extras)
    if PYTHON.exists() and STAMP.exists() and STAMP.read_text() == wanted:
        return
    problem = make_venv()
    if problem:
        sys.exit(problem)
    print(f"[tasks] installing tf_svmax[{extras}] into {VENV} (a few minutes, once)", flush=True)
    pip = [str(PYTHON), "-m", "pip", "install", "--quiet"]
    problem = install([[*pip, "--upgrade", "pip"], [*pip, "-e", f"{ROOT}[{extras}]"]])
    if not problem:
        print(f"[tasks] installing the other Keras backends for their tests: {BACKEND_PACKAGES}")
        problem = install([[*pip, *BACKEND_PACKAGES]])
    if problem:
        sys.exit(problem)
    STAMP.write_text(wanted)


def chromium_installer(present, root, sudo):
    """How to get Chromium: ``[]`` when it is there, the apt-get commands (prefixed with sudo
    where the user is not root) when they may run, ``None`` when this user cannot install it."""
    if present:
        return []
    if root:
        return [list(c) for c in APT_INSTALL_CHROMIUM]
    if sudo:
        return [["sudo", "-n", *c] for c in APT_INSTALL_CHROMIUM]
    return None


def passwordless_sudo():
    """True where ``sudo`` exists and runs without asking for a password (``sudo -n true``)."""
    sudo = shutil.which("sudo")
    return bool(sudo) and subprocess.run([sudo, "-n", "true"], capture_output=True).returncode == 0


def ensure_chromium(browser=None, root=None, sudo=None, run=subprocess.run):
    """Installs Debian's chromium for the docs' browser test where it is missing, saying so in
    one line; returns an error sentence (and installs nothing) where it cannot, else None.
    `root`, `sudo` and `run` are the system's unless given (the tests give them)."""
    browser = Path(browser or CHROMIUM)
    present = browser.exists()
    root = (os.geteuid() == 0) if root is None and not present else root
    sudo = passwordless_sudo() if sudo is None and not present and not root else sudo
    commands = chromium_installer(present, root, sudo)
    manual = "sudo apt-get update && sudo apt-get install -y chromium"
    if commands is None:
        return (
            f"tasks.py: the docs' browser test needs Debian's chromium at {browser}, and this user "
            f"can install it neither as root nor with sudo; run `{manual}`, then this command "
            "again."
        )
    if commands:
        print(
            f"[tasks] installing Debian's chromium (the docs' browser test needs {browser})",
            flush=True,
        )
    for command in commands:
        # apt's and dpkg's hundreds of lines are shown only when they explain a failure.
        try:
            done = run(command, capture_output=True, text=True)
            failed, output = done.returncode != 0, f"{done.stdout}{done.stderr}"
        except OSError as error:  # no apt-get or sudo binary: not a Debian-like system
            failed, output = True, str(error)
        if failed:
            print("\n".join(output.splitlines()[-20:]), file=sys.stderr)
            return (
                f"tasks.py: installing Debian's chromium failed at `{' '.join(command)}` (its "
                f"output above); install it yourself (`{manual}`), then run this command again."
            )
    if commands and not browser.exists():
        return f"tasks.py: apt-get installed chromium, but {browser} is still missing."
    return None


def call(command):
    """Runs `command` to its end and returns its exit status (see `call_wait`)."""
    return call_wait(subprocess.Popen(command))


def call_wait(process):
    """`process`'s exit status. Ctrl-C reaches the child too (one process group): it stops
    itself (a trainer checkpoints, says how to resume, exits 130), so this waits for it instead
    of killing it."""
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
    # The system package first: a user who cannot install it learns so before minutes of setup.
    missing = ensure_chromium() if verb == "test" else None
    if missing:
        print(missing, file=sys.stderr)
        return 1
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
        status = 1
    # After the suite, not beside it: started with it (niced +10) on CI's 2 cores, they slowed
    # the suite from ~18 to 22.9 min and still ended 6.3 min after it (29.2 min of tests; in
    # sequence the run before took 17.9 + 9.5 = 27.4 min).
    backends = finish_backend_runs(start_backend_runs(rest), rest)
    return status or backends


def backend_status(backend, status, chosen):
    """A backend run's exit status as the suite's: pytest's 5 (no tests) fails the suite unless
    the user's own selection (`chosen`) holds no test of the backend-neutral core."""
    if status == 5 and chosen:
        print(f"[tasks] KERAS_BACKEND={backend}: no backend-neutral test in this selection")
        return 0
    if status == 5:
        print(f"tasks.py: KERAS_BACKEND={backend} collected no tests; a failure.", file=sys.stderr)
        return 1
    return status


def start_backend_runs(rest):
    """Starts the core's tests once per other backend (the test files marked all_backends, see
    tests/conftest.py), each in its own process (Keras fixes its backend at import), all at once;
    `finish_backend_runs` waits for them."""
    import tempfile

    runs = {}
    for backend in OTHER_BACKENDS:
        log = tempfile.TemporaryFile(mode="w+")
        command = [str(PYTHON), "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        workers = pytest_workers(rest) if backend in SPLIT_BACKENDS else []
        command += ["--durations=10", "tests", *workers, *rest]
        env = {**os.environ, "KERAS_BACKEND": backend}
        process = subprocess.Popen(command, env=env, stdout=log, stderr=log)
        runs[backend] = (process, log, time.monotonic())
    print(f"[tasks] the backend-neutral core's tests on {', '.join(OTHER_BACKENDS)}", flush=True)
    return runs


def finish_backend_runs(runs, rest):
    """Waits for `start_backend_runs`' processes, printing each one's output whole with its wall
    time; the first failing status, else 0."""
    statuses = []
    for backend, (process, log, started) in runs.items():
        status = call_wait(process)
        log.seek(0)
        minutes = (time.monotonic() - started) / 60
        print(
            f"[tasks] KERAS_BACKEND={backend} (ended {minutes:.1f} min after it started):\n"
            f"{log.read().rstrip()}",
            flush=True,
        )
        statuses.append(backend_status(backend, status, chosen=bool(rest)))
    return next((s for s in statuses if s), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
