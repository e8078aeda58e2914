"""The Keras backend of this test process, and backend-neutral autodiff and compilation for the
tests of the core (`tests/ops`, ...), which run once per backend (the backend is fixed when Keras
is first imported: ``KERAS_BACKEND=jax python -m pytest ...``).

Every helper takes and returns NumPy arrays, so a test's reference side (NumPy/SciPy) never
touches a backend tensor.
"""

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import keras
import numpy as np
import pytest

BACKEND = keras.backend.backend()
# A float64 parametrization: JAX without jax_enable_x64 computes float64 input in float32, so
# there the float32 cases cover the backend and a test of its own pins the downcast.
FLOAT64 = pytest.param(
    np.float64,
    marks=pytest.mark.skipif(
        BACKEND == "jax", reason="JAX without jax_enable_x64 computes float64 in float32"
    ),
)
# The float32 tolerance of values and gradients against the float64 references (issue 41).
RTOL32 = 1e-5


class ArrayBatches(keras.utils.PyDataset):
    """Arrays `x`, `y` as a PyDataset of (inputs, labels) batches of `batch_size` rows, the last
    one partial where the rows do not divide."""

    def __init__(self, x, y, batch_size):
        super().__init__()
        self.x, self.y, self.batch_size = x, y, batch_size

    def __len__(self):
        return -(-len(self.x) // self.batch_size)

    def __getitem__(self, index):
        rows = slice(index * self.batch_size, (index + 1) * self.batch_size)
        return self.x[rows], self.y[rows]


def assert_close(got, expected, rtol):
    """Relative agreement, entries far below the largest compared at the largest one's scale
    (float32 sums that cancel round relative to their terms, not to their result)."""
    expected = np.asarray(expected, np.float64)
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=rtol * np.abs(expected).max())


def numpy_gradient(f, x, step=1e-6):
    """Central finite differences of the float64 NumPy function `f` at `x` (a reference)."""
    x = np.asarray(x, np.float64)
    grad = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[index] = step
        grad[index] = (f(x + e) - f(x - e)) / (2 * step)
    return grad


def to_numpy(x):
    """A backend tensor (or nested list of them) as NumPy."""
    return np.asarray(keras.ops.convert_to_numpy(x))


def value_and_grad(fn, *args):
    """``(value, [d value / d arg, ...])`` of the scalar ``fn(*tensors)`` at the NumPy `args`,
    by the process' backend's own autodiff (tf.GradientTape, jax.grad, torch.autograd)."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        xs = [tf.convert_to_tensor(a) for a in args]
        with tf.GradientTape() as tape:
            tape.watch(xs)
            value = fn(*xs)
        return to_numpy(value), [to_numpy(g) for g in tape.gradient(value, xs)]
    if BACKEND == "jax":
        import jax

        value, grads = jax.value_and_grad(fn, argnums=tuple(range(len(args))))(
            *[jax.numpy.asarray(a) for a in args]
        )
        return to_numpy(value), [to_numpy(g) for g in grads]
    if BACKEND == "torch":
        import torch

        # On Keras' device (a GPU where there is one), as every tensor the library makes.
        device = keras.ops.convert_to_tensor(0.0).device
        xs = [torch.tensor(np.asarray(a), requires_grad=True, device=device) for a in args]
        value = fn(*xs)
        grads = torch.autograd.grad(value, xs)
        return to_numpy(value.detach()), [to_numpy(g) for g in grads]
    raise NotImplementedError(f"no autodiff helper for the {BACKEND!r} backend")


def value_and_grad_in_one_program(fn, *args):
    """`value_and_grad`, on JAX inside one ``jax.jit`` (forward and backward one XLA program);
    on TensorFlow and PyTorch eagerly, as `value_and_grad`. For the tests whose property is the
    value and gradients against a reference, not eager execution: eager JAX compiles one XLA
    program per operation and shape (~0.05 s each on a 2-core CPU), some 150-300 of them for a
    mined loss' forward and backward at a new batch shape, where one jit compiles one. Eager JAX
    stays checked by the tests that use `value_and_grad`."""
    if BACKEND != "jax":
        return value_and_grad(fn, *args)
    import jax

    value, grads = jax.jit(jax.value_and_grad(fn, argnums=tuple(range(len(args)))))(
        *[jax.numpy.asarray(a) for a in args]
    )
    return to_numpy(value), [to_numpy(g) for g in grads]


def saved_loss(module, class_name, name, **arguments):
    """A loss as `keras.saving.serialize_keras_object` wrote it (a `.keras` file's compiled
    loss) with its own `arguments` under their names then: e.g. the ``metric``/``squared`` of
    the configs saved before ``distance=`` (the base's keys at their defaults, float32)."""
    config = {"name": name, "reduction": "sum_over_batch_size", "dtype": "float32"}
    return {
        "module": f"tf_svmax.losses.{module}",
        "class_name": class_name,
        "config": {**config, "global_batch": True, **arguments},
        "registered_name": f"tf_svmax>{class_name}",
    }


def split_value(loss, labels, x, ranges):
    """The value a loss' replica split computes: each anchor range ``(start, count)`` of the
    set (`labels`, `x`) against the whole set (`reference_parts`, the references holding the
    anchors at ``start``), the ranges' totals and counts added before dividing
    (`mean_of_parts`), as the replicas' counts are summed."""
    from tf_svmax.losses import _common

    summed = None
    for start, count in ranges:
        parts = loss.reference_parts(
            labels[start : start + count],
            x[start : start + count],
            ref_labels=labels,
            ref_embeddings=x,
            ref_offset=start,
        )
        if summed is None:
            summed = parts
            continue
        summed = [
            _common.LossPart(
                a.total + b.total,
                None if a.count is None else keras.ops.add(a.count, b.count),
                a.keep_nan,
            )
            for a, b in zip(summed, parts, strict=True)
        ]
    return _common.mean_of_parts(summed)


def compiled(fn):
    """`fn` under the backend's compiler: XLA on TensorFlow (``jit_compile=True``) and JAX
    (``jax.jit``); PyTorch runs eagerly (Keras' ``jit_compile="auto"`` does the same there),
    its NumPy arguments made tensors on Keras' device first, as the compilers do."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        return tf.function(fn, jit_compile=True)
    if BACKEND == "jax":
        import jax

        return jax.jit(fn)

    def eager(*args):
        return fn(
            *[keras.ops.convert_to_tensor(a) if isinstance(a, np.ndarray) else a for a in args]
        )

    return eager


def graph(fn):
    """`fn` traced without XLA where the backend has such a mode (``tf.function`` on
    TensorFlow); on JAX every trace is XLA (``jax.jit``), on PyTorch `fn` runs eagerly."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        return tf.function(fn)
    return compiled(fn)


# The zygote: imports what every example of the docs and every script here imports first
# (NumPy, Keras, tf_svmax: seconds of CPU, most of such a program's run), then for each request,
# one JSON line {program, argv, cwd, stdout, stderr, timeout}, forks a child that runs the
# program as `python -c program *argv` would, in `cwd`, its output in the two files, and
# answers {returncode} once the child is gone. A child starts from the state the imports left,
# never from another program's; what the imports wrote on stderr (a warning there would be the
# program's too) starts each child's stderr. A program that runs past its timeout is killed by
# its alarm (returncode -14).
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
            signal.alarm(request["timeout"])
            os.chdir(request["cwd"])
            for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
                with open(path, "wb") as out:
                    out.write(prelude if fd == 2 else b"")
                    out.flush()
                    os.dup2(out.fileno(), fd)
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            sys.stdin = open(os.devnull)
            sys.argv = ["-c", *request["argv"]]
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
            except BaseException as error:  # its traceback from the program's first line
                traceback.print_exception(type(error), error, error.__traceback__.tb_next)
                status = 1
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
        _, wait_status = os.waitpid(pid, 0)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(wait_status)}), flush=True)
    """
)


class Zygote:
    """A process that has imported NumPy, Keras and tf_svmax (`ZYGOTE`), in the environment
    `env` (this process' by default), whose `run` runs a program in a child forked from it,
    as ``subprocess.run([python, "-c", program, *args], cwd=cwd, capture_output=True)`` runs it
    in a fresh process. Programs that set an environment variable before their imports
    (KERAS_BACKEND, XLA_FLAGS, ...) would get another Keras there: they are refused."""

    def __init__(self, folder, env=None):
        self.folder = Path(folder)
        self.process = subprocess.Popen(
            [sys.executable, "-c", ZYGOTE],
            cwd=self.folder,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.runs = 0

    def run(self, program, *args, cwd, timeout):
        assert "environ" not in program and "putenv" not in program, (
            "a program that sets the environment before its imports needs a fresh process"
        )
        self.runs += 1
        out, err = self.folder / f"{self.runs}.stdout", self.folder / f"{self.runs}.stderr"
        request = {
            "program": program,
            "argv": [str(arg) for arg in args],
            "cwd": str(cwd),
            "stdout": str(out),
            "stderr": str(err),
            "timeout": timeout,
        }
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        assert answer, f"the zygote stopped (exit status {self.process.poll()})"
        return subprocess.CompletedProcess(
            [sys.executable, "-c", program, *request["argv"]],
            json.loads(answer)["returncode"],
            out.read_text(encoding="utf-8"),
            err.read_text(encoding="utf-8"),
        )

    def close(self):
        self.process.stdin.close()
        self.process.wait(timeout=60)


ROOT = Path(__file__).resolve().parents[1]
# The backends in the order in which each one's run of the core's tests hands the .keras files
# it saves to the next to load (TensorFlow -> JAX -> PyTorch -> TensorFlow): over the three
# runs every backend saves and every backend loads, in a child of one zygote per run
# (`run_script`).
RING = ("tensorflow", "jax", "torch")


def next_backend():
    """The first installed backend after this one in `RING`: where this run's saved files are
    loaded. Fails the test where no other backend is installed."""
    import importlib.util

    at = RING.index(BACKEND)
    for backend in RING[at + 1 :] + RING[:at]:
        if importlib.util.find_spec(backend) is not None:
            return backend
    pytest.fail(f"no Keras backend but {BACKEND} is installed; the file cannot be loaded elsewhere")


# backend -> the Zygote of `run_script`'s programs on it (one per test process, closed at exit).
_ZYGOTES = {}


def _zygote(backend):
    if backend not in _ZYGOTES:
        env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": str(ROOT)}
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        folder = tempfile.mkdtemp(prefix=f"tf_svmax_zygote_{backend}_")
        _ZYGOTES[backend] = zygote = Zygote(folder, env=env)
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        atexit.register(zygote.close)
    return _ZYGOTES[backend]


def run_script(script, *args, backend, cwd, fresh=False):
    """Runs ``python -c script *args`` on Keras backend `backend` (the backend is fixed at
    Keras' first import, so another backend needs another process), with this checkout on the
    path: in a child of this backend's `Zygote` (the import done once per test process), or in
    a fresh process where `fresh` (a script that sets the environment before importing Keras);
    fails the test with the script's stderr if it fails, and returns the JSON object its last
    line of output printed."""
    if fresh:
        env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": str(ROOT)}
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        done = subprocess.run(
            [sys.executable, "-c", script, *(str(arg) for arg in args)],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
            cwd=cwd,
        )
    else:
        done = _zygote(backend).run(script, *args, cwd=cwd, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def compiled_value_and_grad(fn, x, *args):
    """``(value, d value / d x)`` of the scalar ``fn(x, *args)`` inside the backend's compiler
    (XLA on TensorFlow, ``jit_compile=True``, and JAX, ``jax.jit``; PyTorch eagerly), `args`
    passed as data (traced, not constants); NumPy in, NumPy out."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        @tf.function(jit_compile=True)
        def step(x, *args):
            with tf.GradientTape() as tape:
                tape.watch(x)
                value = fn(x, *args)
            return value, tape.gradient(value, x)

        value, grad = step(tf.constant(x), *[tf.constant(a) for a in args])
        return to_numpy(value), to_numpy(grad)
    if BACKEND == "jax":
        import jax

        value, grad = jax.jit(jax.value_and_grad(fn))(x, *args)
        return to_numpy(value), to_numpy(grad)
    tensors = [keras.ops.convert_to_tensor(a) for a in args]
    value, (grad,) = value_and_grad(lambda z: fn(z, *tensors), x)
    return value, grad
