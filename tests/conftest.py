import os
import re

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

TESTS = Path(__file__).resolve().parent
# The backend Keras will use in this process (fixed at its first import; Keras' own default).
BACKEND = os.environ.get("KERAS_BACKEND", "tensorflow")
# The tests of the backend-neutral core are the files marked ``pytestmark =
# pytest.mark.all_backends`` (or a list starting with it): with KERAS_BACKEND=jax or torch only
# these files are collected (tasks.py runs them once per backend, each in its own process); every
# other test imports TensorFlow or tests a surface that is TensorFlow by nature. The mark is read
# from the file's text, before the file is imported (importing it could import TensorFlow).
ALL_BACKENDS_MARK = "all_backends"
_MARKED = re.compile(rf"^pytestmark = \[?\s*pytest\.mark\.{ALL_BACKENDS_MARK}\b", re.MULTILINE)


def runs_on_every_backend(path):
    """Whether the test file `path` is marked to run on every Keras backend."""
    return bool(_MARKED.search(Path(path).read_text(encoding="utf-8")))


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        f"{ALL_BACKENDS_MARK}: a backend-neutral test file, also run with KERAS_BACKEND=jax and "
        "torch (set as the module's pytestmark; tests/conftest.py)",
    )


def pytest_ignore_collect(collection_path, config):
    if BACKEND == "tensorflow" or collection_path.suffix != ".py":
        return None
    if collection_path.name == "conftest.py" or collection_path.is_dir():
        return None
    return not runs_on_every_backend(collection_path) or None


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    """The docs' examples' runner (tests/test_docs.py, tests/test_docs_backends.py): each program
    in a child of one `tests.backends.Zygote` of this process' backend and environment, as
    ``python -c program`` runs it in a process of its own (importing the backend, Keras and
    tf_svmax is most of an example's run)."""
    from tests import backends  # imports Keras: only where a test asks for the runner

    zygote = backends.Zygote(tmp_path_factory.mktemp("zygote"))
    yield zygote
    zygote.close()


# A test's user property (``record_property``): a dict key -> the largest relative error of its
# checks against a reference. Not a check (the test's asserts are): the terminal summary prints
# the maximum per key over the run's passed tests, for the record. Properties reach the
# summary from pytest-xdist's workers too.
MAX_RELATIVE_ERROR = "max_relative_error"


def pytest_terminal_summary(terminalreporter):
    worst = {}
    for report in terminalreporter.stats.get("passed", []):
        for name, errors in report.user_properties:
            if name == MAX_RELATIVE_ERROR:
                for key, error in errors.items():
                    worst[key] = max(worst.get(key, 0.0), error)
    if worst:
        terminalreporter.section(f"max relative errors against the references ({BACKEND})")
        for key in sorted(worst):
            terminalreporter.write_line(f"{key}: {worst[key]:.2e}")
