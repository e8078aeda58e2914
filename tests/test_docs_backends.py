"""The README's and the documentation's Python examples on Keras' JAX and PyTorch backends: each
runs as written in a fresh process of this backend and prints what its comments say, with no
Python warning it does not announce: the same checks as tests/test_docs.py makes on
TensorFlow. The fresh process is forked from one that has only imported NumPy, Keras and
tf_svmax (`Examples`): each example's start then skips that import, seconds of CPU apiece, and
still runs with nothing any other example did. An example that is TensorFlow by nature says
so on its first line (``# TensorFlow backend only: <why>``, which a reader sees too); it must
then fail here, so that the line never outlives the reason.

Runs in the JAX and PyTorch processes (marked all_backends: tests/conftest.py); on TensorFlow,
tests/test_docs.py runs every example."""

import json
import subprocess
import sys
import textwrap

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


# The zygote: imports what every example imports (NumPy, Keras, tf_svmax: seconds of CPU on
# PyTorch and JAX, most of an example's run), then for each request, one JSON line {program,
# cwd, stdout, stderr}, forks a child that runs the program as `python -c program` would, in
# `cwd`, its output in the two files, and answers {returncode} once the child is gone. A child
# starts from the state the imports left, never from another example's; what the imports wrote
# on stderr (a warning there would be the example's too) starts each child's stderr. An example
# that does not finish in 600 s is killed by its alarm (returncode -14), as `run`'s timeout
# does.
ZYGOTE = textwrap.dedent(
    """
    import atexit, builtins, json, os, signal, sys, tempfile, traceback, types
    with tempfile.TemporaryFile() as imports_stderr:
        saved = os.dup(2)
        os.dup2(imports_stderr.fileno(), 2)
        import keras, numpy, tf_svmax
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        imports_stderr.seek(0)
        prelude = imports_stderr.read()
    for request in sys.stdin:
        request = json.loads(request)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            signal.alarm(600)
            os.chdir(request["cwd"])
            for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
                with open(path, "wb") as out:
                    out.write(prelude if fd == 2 else b"")
                    out.flush()
                    os.dup2(out.fileno(), fd)
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            sys.stdin = open(os.devnull)
            sys.argv = ["-c"]
            main = types.ModuleType("__main__")
            main.__dict__["__builtins__"] = builtins
            sys.modules["__main__"] = main
            status = 0
            try:
                exec(compile(request["program"], "<string>", "exec"), main.__dict__)
            except SystemExit as stop:  # as the interpreter reads sys.exit's argument
                status = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
                if not isinstance(stop.code, (int, type(None))):
                    print(stop.code, file=sys.stderr)
            except BaseException:
                traceback.print_exc()
                status = 1
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
        _, wait_status = os.waitpid(pid, 0)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(wait_status)}), flush=True)
    """
)


class Examples:
    """Runs each example in a child of the zygote (the process `ZYGOTE` describes), as
    `tests.test_docs.run` runs it in a process of its own; the same backend and environment."""

    def __init__(self, folder):
        self.folder = folder
        self.zygote = subprocess.Popen(
            [sys.executable, "-c", ZYGOTE],
            cwd=folder,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.runs = 0

    def run(self, program, cwd):
        self.runs += 1
        out, err = self.folder / f"{self.runs}.stdout", self.folder / f"{self.runs}.stderr"
        request = {"program": program, "cwd": str(cwd), "stdout": str(out), "stderr": str(err)}
        self.zygote.stdin.write(json.dumps(request) + "\n")
        self.zygote.stdin.flush()
        answer = self.zygote.stdout.readline()
        assert answer, f"the zygote stopped (exit status {self.zygote.poll()})"
        return subprocess.CompletedProcess(
            [sys.executable, "-c", program],
            json.loads(answer)["returncode"],
            out.read_text(encoding="utf-8"),
            err.read_text(encoding="utf-8"),
        )

    def close(self):
        self.zygote.stdin.close()
        self.zygote.wait(timeout=60)


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    runner = Examples(tmp_path_factory.mktemp("zygote"))
    yield runner
    runner.close()


def tensorflow_only(block):
    first = block.splitlines()[0]
    return first.startswith(TENSORFLOW_ONLY) and len(first) > len(TENSORFLOW_ONLY) + 10


NEUTRAL = [b for b in BLOCKS if not tensorflow_only(b)]
ONLY_TENSORFLOW = [b for b in BLOCKS if tensorflow_only(b)]


@pytest.mark.parametrize("block", NEUTRAL, ids=[EXAMPLES[b] for b in NEUTRAL])
def test_each_example_runs_on_this_backend_and_prints_what_it_says(block, tmp_path, examples):
    done = examples.run(block, cwd=tmp_path)  # KERAS_BACKEND is this process's
    assert done.returncode == 0, (
        f"{EXAMPLES[block]} on {backends.BACKEND}:\n{block}\n{done.stderr[-2000:]}\n"
        f"(an example that is TensorFlow by nature starts with {TENSORFLOW_ONLY!r} and why)"
    )
    check_printed(block, done.stdout)
    check_no_warnings(block, done.stderr)
    assert backends.BACKEND in done.stdout or "keras.backend.backend()" not in block


@pytest.mark.parametrize("block", ONLY_TENSORFLOW, ids=[EXAMPLES[b] for b in ONLY_TENSORFLOW])
def test_an_example_marked_tensorflow_only_does_not_run_here(block, tmp_path, examples):
    done = examples.run(block, cwd=tmp_path)
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
