"""TensorFlow's import without its start-up log lines, for the programs' entry points.

    from trainers import quiet_start

    quiet_start.import_tensorflow()  # once the flags are checked, before the training code

The programs define, parse and check their flags without Keras or TensorFlow (``--help`` and a
refused flag never import them: `trainers.harness.cli.main`, a grid's
`trainers.harness.grid.Runs` (once its planned runs are accepted) and the reports' ``main``
call this first when the work starts, before importing the training code). TensorFlow 2.21
writes INFO lines to stderr while its libraries load ("oneDNN custom operations are on ...",
twice, after absl's "All log messages before absl::InitializeLog() ..."), before its logging
reads ``TF_CPP_MIN_LOG_LEVEL``: every run began with them. `import_tensorflow` sets
``TF_CPP_MIN_LOG_LEVEL`` to 2 unless the user set it, imports TensorFlow with stderr captured,
and writes back every captured line that level does not hide (``TF_CPP_MIN_LOG_LEVEL=0`` shows
them all, as TensorFlow would). On another Keras backend (``KERAS_BACKEND=jax`` or ``torch``,
or ``~/.keras/keras.json``'s, read as Keras reads it) it imports nothing: TensorFlow need not
be installed there.
"""

import importlib.util
import json
import os
import re
import sys
import tempfile

# What the programs need beyond the library's core: pyproject's `trainers` extra (module ->
# distribution; absl-py comes with Keras).
TRAINERS_EXTRA = {
    "tensorboard": "tensorboard",
    "matplotlib": "matplotlib",
    "PIL": "pillow",
    "fontTools": "fonttools",
}

# A line of TensorFlow's C++ logging: severity letter, date, time, thread, file:line.
_LOG_LINE = re.compile(r"^([IWE])\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ [\w.]+:\d+\] ")
_ABSL_NOTICE = "WARNING: All log messages before absl::InitializeLog() is called"
_LEVELS = {"I": 0, "W": 1, "E": 2}


def _level():
    try:
        return int(os.environ["TF_CPP_MIN_LOG_LEVEL"])
    except ValueError:
        return 0  # TensorFlow's reading of a value that is not a number


def _shown(line, level):
    """Whether `line` of TensorFlow's start-up output is shown at TF_CPP_MIN_LOG_LEVEL `level`."""
    if line.startswith(_ABSL_NOTICE):
        return level < 1  # the notice introduces the INFO lines
    match = _LOG_LINE.match(line)
    return match is None or _LEVELS[match.group(1)] >= level


def _installed(module):
    try:
        return importlib.util.find_spec(module) is not None
    except ValueError:  # sys.modules holds None for it: an import of it fails
        return False


def check_trainers_extra():
    """Exits with status 2 and one line on stderr where a package of the `trainers` extra is
    missing (the library installed without it), before any work."""
    missing = [dist for module, dist in TRAINERS_EXTRA.items() if not _installed(module)]
    if missing:
        program = os.path.splitext(os.path.basename(sys.argv[0]))[0]
        print(
            f"{program}: refused: the trainers need {', '.join(missing)}, which the `trainers` "
            'extra installs: pip install -e ".[trainers]" in the clone of the repository.',
            file=sys.stderr,
        )
        raise SystemExit(2)


def keras_backend():
    """The backend Keras will run on, read without importing it as Keras reads it: the
    ``KERAS_BACKEND`` environment variable, else ``keras.json`` in ``KERAS_HOME`` (default
    ``~/.keras``), else TensorFlow."""
    if os.environ.get("KERAS_BACKEND"):
        return os.environ["KERAS_BACKEND"]
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    try:
        with open(os.path.join(home, "keras.json")) as f:
            return json.load(f).get("backend", "tensorflow")
    except (OSError, ValueError, AttributeError):
        return "tensorflow"


def import_tensorflow():
    """Imports TensorFlow (once) without the start-up lines TF_CPP_MIN_LOG_LEVEL hides, when it
    is Keras' backend (`keras_backend`); on JAX or PyTorch nothing. First checks that the
    `trainers` extra is installed (`check_trainers_extra`)."""
    check_trainers_extra()
    if keras_backend() != "tensorflow":
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if "tensorflow" in sys.modules or _level() < 1:
        import tensorflow  # noqa: F401

        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            import tensorflow  # noqa: F401
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            lines = captured.read().decode(errors="replace").splitlines(keepends=True)
            sys.stderr.write("".join(line for line in lines if _shown(line, _level())))
            sys.stderr.flush()
