"""The README's and the documentation's Python examples on Keras' JAX and PyTorch backends: each
runs as written in a fresh process of this backend and prints what its comments say, with no
Python warning it does not announce: the same checks as tests/test_docs.py makes on
TensorFlow. The fresh process is forked from one that has only imported NumPy, Keras and
tf_svmax (`tests.backends.Zygote`): each example's start then skips that import, seconds of
CPU apiece, and still runs with nothing any other example did. An example that is TensorFlow
by nature says so on its first line (``# TensorFlow backend only: <why>``, which a reader sees
too); it must then fail here, so that the line never outlives the reason.

Runs in the JAX and PyTorch processes (marked all_backends: tests/conftest.py); on TensorFlow,
tests/test_docs.py runs every example."""

import pytest

from tests import backends
from tests.test_docs import BLOCKS, EXAMPLES, check_no_warnings, check_printed

TENSORFLOW_ONLY = "# TensorFlow backend only: "

pytestmark = [
    pytest.mark.all_backends,
    pytest.mark.skipif(
        backends.BACKEND == "tensorflow",
        reason="tests/test_docs.py runs every example on TensorFlow",
    ),
]


def tensorflow_only(block):
    first = block.splitlines()[0]
    return first.startswith(TENSORFLOW_ONLY) and len(first) > len(TENSORFLOW_ONLY) + 10


NEUTRAL = [b for b in BLOCKS if not tensorflow_only(b)]
ONLY_TENSORFLOW = [b for b in BLOCKS if tensorflow_only(b)]


@pytest.mark.parametrize("block", NEUTRAL, ids=[EXAMPLES[b] for b in NEUTRAL])
def test_each_example_runs_on_this_backend_and_prints_what_it_says(block, tmp_path, examples):
    done = examples.run(block, cwd=tmp_path, timeout=600)  # KERAS_BACKEND is this process's
    assert done.returncode == 0, (
        f"{EXAMPLES[block]} on {backends.BACKEND}:\n{block}\n{done.stderr[-2000:]}\n"
        f"(an example that is TensorFlow by nature starts with {TENSORFLOW_ONLY!r} and why)"
    )
    check_printed(block, done.stdout)
    check_no_warnings(block, done.stderr)
    assert backends.BACKEND in done.stdout or "keras.backend.backend()" not in block


@pytest.mark.parametrize("block", ONLY_TENSORFLOW, ids=[EXAMPLES[b] for b in ONLY_TENSORFLOW])
def test_an_example_marked_tensorflow_only_does_not_run_here(block, tmp_path, examples):
    done = examples.run(block, cwd=tmp_path, timeout=600)
    assert done.returncode != 0, (
        f"{EXAMPLES[block]} runs on {backends.BACKEND}: remove its first line "
        f"({block.splitlines()[0]!r})"
    )


def test_no_example_sets_what_the_zygote_has_imported_before_its_imports():
    """The zygote's child starts with NumPy, Keras and tf_svmax imported: an example that set an
    environment variable (KERAS_BACKEND, TF_USE_LEGACY_KERAS, ...) before importing them would
    get another Keras in a fresh process of its own. None does."""
    for block in BLOCKS:
        assert "environ" not in block and "putenv" not in block, EXAMPLES[block]


def test_the_marker_is_recognized_only_with_a_reason():
    assert tensorflow_only("# TensorFlow backend only: tf.GradientTape takes the gradient.\nx")
    assert not tensorflow_only("# TensorFlow backend only: \nimport tensorflow")
    assert not tensorflow_only("import tensorflow\n# TensorFlow backend only: the tape below.")
    # The README's examples are all backend-neutral (its backends line says so).
    assert not [EXAMPLES[b] for b in ONLY_TENSORFLOW if EXAMPLES[b].startswith("README")]
