"""Peak memory of the ranking losses' forward + backward on each Keras backend (issue 41: under
2 GB at b = 4,096, d = 128).

Each (backend, loss) runs in a fresh process (the backend is fixed when Keras is imported, and
the peak resident memory is the process' own), watched by this one and killed above
`--memory_limit_gb`. The input is b unit-norm rows of d in P x 4 classes (int32 labels, which
every backend keeps); one step is the loss function (`tf_svmax.losses.*_loss`, on `keras.ops`)
and its gradient with respect to the embedding, as each backend's `fit` runs it by default:
TensorFlow in a ``tf.function``, JAX under ``jax.jit``, PyTorch eagerly. The record per run: the
peak resident set (``getrusage`` ``ru_maxrss``: imports, data and the step together), the
resident set before the step (imports and data, ``VmRSS``), their difference, and the median
step time.

Writes ``<output>/backend_memory.{csv,json}`` (machine and versions of every worker) and prints
a table.

    python -m benchmarks.backend_memory --output=benchmarks/results/backend_memory
"""

import json
import os
import resource
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from benchmarks import _common  # noqa: E402

FLAGS = flags.FLAGS
BACKENDS = ("tensorflow", "jax", "torch")
LOSSES = {
    "semihard": "triplet_semihard_loss",
    "hard": "triplet_hard_loss",
    "lifted": "lifted_struct_loss",
    "batch_hard": "batch_hard_triplet_loss",
}
LIMIT_GB = 2.0  # issue 41's bound at b = 4,096, d = 128
flags.DEFINE_list("backends", list(BACKENDS), f"Keras backends, of {list(BACKENDS)}.")
flags.DEFINE_list("losses", list(LOSSES), f"Losses, of {list(LOSSES)}.")
flags.DEFINE_integer("batch", 4096, "Batch size b (a multiple of 4: P x 4).", lower_bound=4)
flags.DEFINE_integer("dim", 128, "Embedding dimension d.", lower_bound=1)
flags.DEFINE_integer("repeats", 2, "Timed steps per run (after one warm-up).", lower_bound=1)
flags.DEFINE_float("memory_limit_gb", 6.0, "Kill a run whose resident memory passes this.")
flags.DEFINE_string("output", None, "Folder for backend_memory.csv/.json (none: print only).")
flags.DEFINE_string("child", None, "Internal: '<backend>:<loss>' measured in this process.")

PROGRAM = "backend_memory"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _peak_rss_mb():
    # Linux reports ru_maxrss in KiB.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _current_rss_mb():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024.0


def _data(batch, dim):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, dim)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x, np.repeat(np.arange(batch // 4), 4).astype(np.int32)


def _step(backend, fn, x, y):
    """A callable running one forward + backward of ``fn(y, x)`` and returning host arrays."""
    if backend == "tensorflow":
        import tensorflow as tf

        x, y = tf.constant(x), tf.constant(y)

        @tf.function
        def run():
            with tf.GradientTape() as tape:
                tape.watch(x)
                value = fn(y, x)
            return value, tape.gradient(value, x)

        return lambda: [np.asarray(t) for t in run()]
    if backend == "jax":
        import jax

        run = jax.jit(jax.value_and_grad(lambda e, labels: fn(labels, e)))
        x, y = jax.numpy.asarray(x), jax.numpy.asarray(y)
        return lambda: [np.asarray(t) for t in jax.block_until_ready(run(x, y))]
    import torch

    labels = torch.from_numpy(y)

    def run():
        e = torch.tensor(x, requires_grad=True)
        value = fn(labels, e)
        (grad,) = torch.autograd.grad(value, e)
        return value.detach().numpy(), grad.numpy()

    return run


def run_child(spec):
    backend, loss = spec.split(":")
    import keras

    from tf_svmax import losses, records

    if keras.backend.backend() != backend:
        raise RuntimeError(f"child for {backend} runs on {keras.backend.backend()}")
    x, y = _data(FLAGS.batch, FLAGS.dim)
    fn = getattr(losses, LOSSES[loss])
    # batch_hard_triplet_loss returns one value per anchor; Keras' reduction is their mean.
    step = _step(backend, lambda labels, e: keras.ops.mean(fn(labels, e)), x, y)
    before = _current_rss_mb()
    timing = _common.time_calls(step, FLAGS.repeats, warmup=1)
    peak = _peak_rss_mb()
    record = {
        **timing,
        "peak_rss_mb": peak,
        "rss_before_step_mb": before,
        # At least the step's own growth (the peak may also be an earlier, import-time one).
        "step_rss_mb": peak - before,
        "tensorflow_imported": sys.modules.get("tensorflow") is not None,
    }
    print(json.dumps({"record": record, "versions": records.environment()["versions"]}))


def measure(backend, loss):
    """Runs one child; returns its record and versions, or a "killed"/"failed" record."""
    command = [sys.executable, "-m", "benchmarks.backend_memory", f"--child={backend}:{loss}"]
    command += [f"--batch={FLAGS.batch}", f"--dim={FLAGS.dim}", f"--repeats={FLAGS.repeats}"]
    env = {**os.environ, "KERAS_BACKEND": backend}
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env
    )
    limit_kb = FLAGS.memory_limit_gb * 1024 * 1024
    started = time.perf_counter()
    while process.poll() is None:
        try:
            with open(f"/proc/{process.pid}/status") as status:
                rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))
        except (OSError, StopIteration):
            rss = 0
        if rss > limit_kb:
            process.kill()
            process.wait()
            return {"killed": f"resident memory above {FLAGS.memory_limit_gb} GB"}, None
        time.sleep(0.05)
    stdout, stderr = process.communicate()
    if process.returncode != 0:
        lines = stderr.strip().splitlines() or ["no output"]
        return {"failed": lines[-1].strip()[:300]}, None
    result = json.loads(stdout.strip().splitlines()[-1])
    result["record"]["wall_s"] = time.perf_counter() - started
    return result["record"], result["versions"]


def format_table(rows):
    lines = [
        "| backend | loss | b x d | peak RSS MB | before step MB | step MB | < 2 GB | median ms |",
        "|---|---|---|---:|---:|---:|---|---:|",
    ]
    for r in rows:
        if "peak_rss_mb" not in r:
            reason = r.get("killed") or r.get("failed")
            lines.append(f"| {r['backend']} | {r['loss']} | {r['b']} x {r['d']} | {reason} |")
            continue
        lines.append(
            f"| {r['backend']} | {r['loss']} | {r['b']} x {r['d']} | {r['peak_rss_mb']:.0f} | "
            f"{r['rss_before_step_mb']:.0f} | {r['step_rss_mb']:.0f} | "
            f"{'yes' if r['under_2gb'] else 'NO'} | {r['median_ms']:.0f} |"
        )
    return "\n".join(lines)


def main(argv):
    del argv
    if FLAGS.child:
        run_child(FLAGS.child)
        return
    refusals = []
    if not FLAGS.backends or any(b not in BACKENDS for b in FLAGS.backends):
        refusals.append(
            f"Invalid value for flag `--backends`. Expected some of {list(BACKENDS)}. "
            f"Received: {FLAGS.backends}"
        )
    if not FLAGS.losses or any(name not in LOSSES for name in FLAGS.losses):
        refusals.append(
            f"Invalid value for flag `--losses`. Expected some of {list(LOSSES)}. "
            f"Received: {FLAGS.losses}"
        )
    if FLAGS.batch % 4:
        refusals.append(
            f"Invalid value for flag `--batch`. Expected a multiple of 4 (P x 4). "
            f"Received: {FLAGS.batch}"
        )
    if not FLAGS.memory_limit_gb > 0:
        refusals.append(
            f"Invalid value for flag `--memory_limit_gb`. Expected a number > 0. "
            f"Received: {FLAGS.memory_limit_gb}"
        )
    if refusals:
        raise app.UsageError("\n".join(refusals), exitcode=2)
    rows, versions = [], {}
    for backend in FLAGS.backends:
        for loss in FLAGS.losses:
            _common.progress(PROGRAM, f"{loss} on KERAS_BACKEND={backend}")
            record, backend_versions = measure(backend, loss)
            if backend_versions:
                versions[backend] = backend_versions
            row = {"backend": backend, "loss": loss, "b": FLAGS.batch, "d": FLAGS.dim, **record}
            if "peak_rss_mb" in row:
                row["under_2gb"] = row["peak_rss_mb"] < LIMIT_GB * 1024
            rows.append(row)
    print(format_table(rows))
    if FLAGS.output:
        config = {
            "backends": FLAGS.backends,
            "losses": FLAGS.losses,
            "batch": FLAGS.batch,
            "dim": FLAGS.dim,
            "repeats": FLAGS.repeats,
            "memory_limit_gb": FLAGS.memory_limit_gb,
        }
        _common.write_records(FLAGS.output, PROGRAM, config, rows, backend_versions=versions)
        print(f"wrote {FLAGS.output}/{PROGRAM}.csv and .json")


if __name__ == "__main__":
    _common.run(main)
