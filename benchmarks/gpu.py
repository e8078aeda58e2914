"""SVMax, OLÉ, the mining losses and one training step on a GPU against the peers users would
call instead, each Keras backend in its own process, in one run of at most five minutes (issue 58).

Same run, side by side, on JAX (under ``jax.jit``) and on PyTorch (eagerly), float32 forward +
backward, median of `repeats` after the warm-ups, the device synchronised before each clock stop:

* ``tf_svmax.ops.mean_singular_value`` per method (auto, gram, svd, newton_schulz) against
  ``torch.linalg.svdvals`` and ``jnp.linalg.svd(compute_uv=False)`` at b x d in
  {144, 1,024, 4,096} x {128, 512};
* ``tf_svmax.ops.ole_loss`` at C = 36 and 100 classes (N = 4C, D = 128) against batched
  ``svdvals`` of the classes' blocks;
* the mining losses (semi-hard, hard, lifted, batch-hard, all-pairs contrastive) at
  b in {1,024; 4,096; 8,192; 16,384}, d = 128: time and peak device memory, against
  pytorch-metric-learning's counterparts in the PyTorch process ("absent" where it is not
  installed; a case out of memory is recorded and the run goes on);
* one ``train_on_batch`` of the retrieval trainer's default model, loss and optimizer
  (small_cnn, contrastive 36 x 4 + SVMax), compiled as the trainer does (``jit_compile=False``)
  and, on JAX, with XLA;
* for the spectral paths, the float32 value and gradient error against a float64 NumPy/SciPy
  reference, under the backend's default precision (JAX's TF32 products on a GPU).

A time budget (`--time_budget_s`) is shared out between the backends; a worker starts no case
it cannot finish before its share ends and records it as skipped, and the parent stops a worker
past its share (the cases it did not reach are recorded as skipped too). Writes
``gpu.json`` (device, driver, versions of every worker, rows, the issue's goals), ``gpu.csv`` and,
with matplotlib, ``gpu.png`` to `--output_dir`, and prints a table.

    python -m benchmarks.gpu --grid=full --output_dir=benchmarks/results/gpu
"""

import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

# This process only starts the workers and writes the records; Keras comes in with tf_svmax's
# record writer and computes nothing here. Not on TensorFlow, Keras' default (absent on the GPU
# machine), nor on JAX (which could claim the GPU's memory): on PyTorch, which starts no device.
os.environ["KERAS_BACKEND"] = "torch" if importlib.util.find_spec("torch") else "jax"
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

from absl import app, flags  # noqa: E402

from benchmarks import _common  # noqa: E402
from benchmarks.gpu_records import add_ratios, format_table, goals, plot  # noqa: E402
from benchmarks.gpu_worker import BACKENDS, GRIDS, case_key, plan  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_enum("grid", "full", sorted(GRIDS), "full: issue 58's grid; tiny: the CPU test's.")
flags.DEFINE_list("backends", list(BACKENDS), f"Keras backends, of {list(BACKENDS)}.")
flags.DEFINE_string("output_dir", "benchmarks/results/gpu", "Where gpu.json/.csv/.png go.")
flags.DEFINE_float(
    "time_budget_s",
    250.0,
    "Seconds for all the backends' workers together (imports and compilation included); each "
    "worker gets a share, stops starting cases before it ends and is stopped "
    "--worker_grace_s after it.",
)
flags.DEFINE_float("worker_grace_s", 20.0, "Seconds a worker may run past its share.")

PROGRAM = "gpu"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A backend's share of the budget, relative: JAX compiles every case first.
WEIGHTS = {"jax": 1.2, "torch": 1.0}


def gpu_driver():
    """``{name, driver_version, memory_total}`` of each GPU from ``nvidia-smi`` ([] without)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    fields = ("name", "driver_version", "memory.total")
    try:
        done = subprocess.run(
            [smi, f"--query-gpu={','.join(fields)}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    return [dict(zip(fields, (v.strip() for v in line.split(",")), strict=False)) for line in lines]


def run_worker(backend, grid, deadline, grace):
    """One backend's rows, environment and how its process ended (exit status, the end of its
    stderr), from its own process; cases it did not report (it failed, or was stopped past its
    share) are skipped rows naming why."""
    with tempfile.TemporaryDirectory() as tmp:
        rows_path = os.path.join(tmp, "rows.jsonl")
        spec_path = os.path.join(tmp, "spec.json")
        spec = {"backend": backend, "grid": grid, "deadline": deadline, "rows_path": rows_path}
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        env = {**os.environ, "KERAS_BACKEND": backend}
        # On demand: JAX otherwise takes 75 % of the GPU at start, and its peak is read from
        # the compiled programs anyway.
        env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
        command = [sys.executable, "-m", "benchmarks.gpu_worker", spec_path]
        try:
            done = subprocess.run(
                command,
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=max(deadline - time.time(), 0) + grace,
            )
            ending = None if done.returncode == 0 else _last_line(done.stderr)
            process = {"returncode": done.returncode, "stderr_tail": done.stderr[-4000:]}
        except subprocess.TimeoutExpired as error:
            ending = f"worker stopped {grace:.0f} s past its share of the time budget"
            stderr = error.stderr.decode(errors="replace") if error.stderr else ""
            process = {"returncode": None, "stderr_tail": stderr[-4000:]}
        rows, environment = [], None
        if os.path.exists(rows_path):
            with open(rows_path) as f:
                for line in f:
                    record = json.loads(line)
                    if "environment" in record:
                        environment = record["environment"]
                    else:
                        rows.append(record["row"])
    reported = {case_key(r) for r in rows}
    for case in plan(GRIDS[grid], backend):
        if case_key(case) not in reported:
            reason = f"not reached: {ending or 'the worker ended early'}"
            rows.append({"backend": backend, **case, "status": "skipped", "reason": reason})
    return rows, environment, {**process, "ending": ending}


def _last_line(text):
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return (lines or ["no output"])[-1].strip()[:300]


def main(argv):
    del argv
    backends = FLAGS.backends
    refusals = []
    if (
        not backends
        or any(b not in BACKENDS for b in backends)
        or len(set(backends)) < len(backends)
    ):
        refusals.append(
            f"Invalid value for flag `--backends`. Expected distinct names of {list(BACKENDS)}. "
            f"Received: {backends}"
        )
    if not FLAGS.time_budget_s > 0:
        refusals.append(
            "Invalid value for flag `--time_budget_s`. Expected a number > 0. "
            f"Received: {FLAGS.time_budget_s}"
        )
    if not FLAGS.worker_grace_s >= 0:
        refusals.append(
            "Invalid value for flag `--worker_grace_s`. Expected a number >= 0. "
            f"Received: {FLAGS.worker_grace_s}"
        )
    if refusals:
        raise app.UsageError("\n".join(refusals), exitcode=2)
    started = time.time()
    end = started + FLAGS.time_budget_s
    rows, environments, workers = [], {}, {}
    for i, backend in enumerate(backends):
        left = [WEIGHTS[b] for b in backends[i:]]
        deadline = time.time() + max(end - time.time(), 0) * WEIGHTS[backend] / sum(left)
        _common.progress(PROGRAM, f"KERAS_BACKEND={backend}, {deadline - time.time():.0f} s")
        backend_rows, environments[backend], workers[backend] = run_worker(
            backend, FLAGS.grid, deadline, FLAGS.worker_grace_s
        )
        rows += backend_rows
    rows = add_ratios(rows)
    payload = {
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
        },
        "gpus": gpu_driver(),
        "devices": sorted({r["device"] for r in rows if r.get("device")}),
        "config": {
            "grid": FLAGS.grid,
            **GRIDS[FLAGS.grid],
            "backends": backends,
            "time_budget_s": FLAGS.time_budget_s,
            "worker_grace_s": FLAGS.worker_grace_s,
        },
        "wall_s": time.time() - started,
        "backend_environments": environments,
        "workers": workers,
        "results": rows,
        "goals": goals(rows),
        "skipped": [
            {k: r.get(k) for k in ("backend", "section", "measurement", "b", "d", "reason")}
            for r in rows
            if r["status"] == "skipped"
        ],
    }
    out = FLAGS.output_dir
    _common.write_csv(os.path.join(out, f"{PROGRAM}.csv"), rows)
    _common.write_json(os.path.join(out, f"{PROGRAM}.json"), payload)
    drew = plot(os.path.join(out, f"{PROGRAM}.png"), rows)
    print(format_table(rows))
    print(f"wrote {out}/{PROGRAM}.json, {PROGRAM}.csv" + (f" and {PROGRAM}.png" if drew else ""))


if __name__ == "__main__":
    _common.run(main)
