"""SVMax forward + backward on each Keras backend, beside the SVD its users would call instead.

For every batch shape, one worker process per Keras backend (the backend is fixed when Keras is
imported) times ``tf_svmax.ops.svmax`` (the bounded penalty, float32, L2-normalized rows) with its
gradient:

* TensorFlow: in a ``tf.function`` (the Gram path) and under XLA (``jit_compile=True``: the
  Newton-Schulz path that ``method="auto"`` picks there);
* JAX: under ``jax.jit`` (XLA, JAX's only compiled mode) with ``method="newton_schulz"`` and
  with ``method="gram"`` (what ``"auto"`` picks there on a CPU); the peer
  ``jnp.linalg.svd(compute_uv=False)`` with autodiff;
* PyTorch: eagerly (what Keras' ``jit_compile="auto"`` does there); the peer
  ``torch.linalg.svdvals`` with autograd, the reference of every ratio.

Writes ``<output>/backend_speed.{csv,json}`` (machine and versions of every worker) and prints a
table. Times are medians of `--repeats` calls after 3 warm-ups, in milliseconds.

    python -m benchmarks.backend_speed --output=benchmarks/results/backend_speed
"""

import json
import os
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from absl import flags  # noqa: E402

from benchmarks import _common  # noqa: E402

FLAGS = flags.FLAGS
BACKENDS = ("tensorflow", "jax", "torch")
PEER = "torch.linalg.svdvals (autograd)"
flags.DEFINE_list("backends", list(BACKENDS), f"Keras backends to time, of {list(BACKENDS)}.")
flags.DEFINE_list("shapes", ["144x128", "1024x128"], "Batch shapes b x d (paper: 144 x 128).")
flags.DEFINE_integer("repeats", 50, "Timed calls per measurement (after 3 warm-up calls).", 1)
flags.DEFINE_string("output", None, "Folder for backend_speed.csv/.json (none: print only).")
flags.DEFINE_string("worker", None, "Internal: time on this backend and print JSON rows.")


def _batch(b, d):
    x = np.random.default_rng(0).normal(size=(b, d)).astype("float32")
    return x / np.linalg.norm(x, axis=1, keepdims=True)  # the bounds assume unit rows


def _tensorflow(x, repeats):
    import tensorflow as tf

    import tf_svmax

    def step(penalty, jit_compile):
        @tf.function(jit_compile=jit_compile)
        def run(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                value = penalty(x)
            return value, tape.gradient(value, x)

        return lambda: [np.asarray(t) for t in run(x)]

    x = tf.constant(x)
    return {
        "tf_svmax.ops.svmax, tf.function (gram)": _time(step(tf_svmax.ops.svmax, False), repeats),
        "tf_svmax.ops.svmax, XLA (newton_schulz)": _time(step(tf_svmax.ops.svmax, True), repeats),
    }


def _jax(x, repeats):
    import jax
    import jax.numpy as jnp

    import tf_svmax

    def step(fn):
        run = jax.jit(jax.value_and_grad(fn))
        return lambda: [np.asarray(t) for t in jax.block_until_ready(run(x))]

    x = jnp.asarray(x)
    return {
        "tf_svmax.ops.svmax, jax.jit (newton_schulz)": _time(
            step(lambda e: tf_svmax.ops.svmax(e, method="newton_schulz")), repeats
        ),
        # What method="auto" picks under jax.jit on a CPU.
        "tf_svmax.ops.svmax, jax.jit, method='gram'": _time(
            step(lambda e: tf_svmax.ops.svmax(e, method="gram")), repeats
        ),
        "jnp.linalg.svd(compute_uv=False) mean, jax.jit": _time(
            step(lambda e: jnp.mean(jnp.linalg.svd(e, compute_uv=False))), repeats
        ),
    }


def _torch(x, repeats):
    import torch

    import tf_svmax

    # Keras' PyTorch backend puts tensors on the GPU where there is one: the peer runs there too.
    device = "cuda" if torch.cuda.is_available() else "cpu"

    def step(fn):
        def run():
            e = torch.tensor(x, requires_grad=True, device=device)
            value = fn(e)
            (grad,) = torch.autograd.grad(value, e)
            # .cpu() waits for the device: the time includes the whole computation.
            return value.detach().cpu().numpy(), grad.cpu().numpy()

        return run

    return {
        "tf_svmax.ops.svmax, eager (gram)": _time(step(tf_svmax.ops.svmax), repeats),
        PEER: _time(step(lambda e: torch.linalg.svdvals(e).mean()), repeats),
    }


def _time(fn, repeats):
    return _common.time_calls(fn, repeats, warmup=3)


def _versions():
    from tf_svmax import records

    return records.environment()["versions"]


def _device(backend):
    """Where this worker's backend computes: "cpu", or the GPU's name."""
    if backend == "jax":
        import jax

        device = jax.devices()[0]
        return "cpu" if device.platform == "cpu" else device.device_kind
    if backend == "torch":
        import torch

        return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    return tf.config.experimental.get_device_details(gpus[0]).get("device_name") if gpus else "cpu"


def worker(backend, shapes, repeats):
    """JSON rows of this process' backend for every shape, on stdout."""
    timers = {"tensorflow": _tensorflow, "jax": _jax, "torch": _torch}[backend]
    rows, device = [], _device(backend)
    for b, d in shapes:
        for name, summary in timers(_batch(b, d), repeats).items():
            row = {"backend": backend, "device": device, "measurement": name, "b": b, "d": d}
            rows.append({**row, **summary})
    print(json.dumps({"rows": rows, "versions": _versions()}))


def parse_shapes(values):
    shapes = []
    for value in values:
        parts = value.lower().split("x")
        if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise ValueError(
                "Invalid value for flag `--shapes`. Expected shapes like 144x128 (positive "
                f"b x d). Received: {value!r}"
            )
        shapes.append((int(parts[0]), int(parts[1])))
    return shapes


def check_backends(values):
    unknown = [v for v in values if v not in BACKENDS]
    if unknown or not values:
        raise ValueError(
            f"Invalid value for flag `--backends`. Expected some of {list(BACKENDS)}. "
            f"Received: {values}"
        )
    return values


def run_workers(backends, shapes, repeats):
    """Each backend's rows (and versions), from one worker process per backend, in turn."""
    rows, versions = [], {}
    for backend in backends:
        _common.progress("backend_speed", f"timing on KERAS_BACKEND={backend}")
        command = [sys.executable, "-m", "benchmarks.backend_speed", f"--worker={backend}"]
        command += [f"--shapes={','.join(f'{b}x{d}' for b, d in shapes)}"]
        command += [f"--repeats={repeats}"]
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            env={**os.environ, "KERAS_BACKEND": backend},
        )
        if done.returncode != 0:
            raise RuntimeError(f"the {backend} worker failed:\n{done.stderr[-3000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        rows += result["rows"]
        versions[backend] = result["versions"]
    return rows, versions


def add_ratios(rows):
    """Each row's median over the PyTorch peer's at the same shape (None without the peer)."""
    peers = {(r["b"], r["d"]): r["median_ms"] for r in rows if r["measurement"] == PEER}
    for row in rows:
        peer = peers.get((row["b"], row["d"]))
        row["ratio_to_torch_svdvals"] = None if peer is None else row["median_ms"] / peer
    return rows


def format_table(rows):
    lines = [
        "| b x d | backend | device | measurement | median ms | p10-p90 ms "
        "| / torch.linalg.svdvals |",
        "|---|---|---|---|---:|---:|---:|",
    ]
    for r in rows:
        ratio = r["ratio_to_torch_svdvals"]
        lines.append(
            f"| {r['b']} x {r['d']} | {r['backend']} | {r.get('device', 'cpu')} | "
            f"{r['measurement']} | "
            f"{r['median_ms']:.2f} | {r['p10_ms']:.2f}-{r['p90_ms']:.2f} | "
            f"{'-' if ratio is None else f'{ratio:.2f}x'} |"
        )
    return "\n".join(lines)


def main(argv):
    del argv
    from absl import app

    try:
        shapes = parse_shapes(FLAGS.shapes)
        backends = check_backends(FLAGS.backends)
    except ValueError as error:
        raise app.UsageError(str(error), exitcode=2) from error
    if FLAGS.worker:
        worker(FLAGS.worker, shapes, FLAGS.repeats)
        return
    rows, versions = run_workers(backends, shapes, FLAGS.repeats)
    rows = add_ratios(rows)
    print(format_table(rows))
    if FLAGS.output:
        config = {"backends": backends, "shapes": FLAGS.shapes, "repeats": FLAGS.repeats}
        _common.write_records(
            FLAGS.output, "backend_speed", config, rows, backend_versions=versions
        )
        print(f"wrote {FLAGS.output}/backend_speed.csv and .json")


if __name__ == "__main__":
    _common.run(main)
