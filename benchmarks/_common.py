"""Shared helpers for the benchmark programs: timing, environment record, files, plots."""

import csv
import os
import sys
import time

import numpy as np


def progress(program, message):
    print(f"[{program}] {message}", file=sys.stderr, flush=True)


def summarize(seconds):
    """Median and spread (10th-90th percentile) in milliseconds."""
    ms = np.asarray(seconds, dtype=np.float64) * 1e3
    return {
        "median_ms": float(np.median(ms)),
        "p10_ms": float(np.percentile(ms, 10)),
        "p90_ms": float(np.percentile(ms, 90)),
        "repeats": int(len(ms)),
    }


def time_calls(fn, repeats, warmup=2):
    """Times `fn()` `repeats` times after `warmup` untimed calls (compilation, caches)."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return summarize(out)


def cpu():
    """The CPU's model name and its vector extensions (AVX2 / AVX-512 change the kernels of every
    backend), from /proc/cpuinfo (None where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
    except OSError:
        return None
    fields = {}
    for line in info.splitlines():
        if ":" in line:
            key, value = line.split(":", 1)
            fields.setdefault(key.strip(), value.strip())
    return {
        "model": fields.get("model name", ""),
        "vector_flags": sorted(
            f for f in fields.get("flags", "").split() if f.startswith(("avx", "fma", "amx"))
        ),
    }


def set_threads(backend, threads):
    """Runs the Keras backend `backend` single- (or `threads`-) threaded, 0: its default. JAX's
    threads come from XLA_FLAGS, which must be set before JAX is imported (the caller's)."""
    if not threads:
        return
    if backend == "tensorflow":
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    elif backend == "torch":
        import torch

        torch.set_num_threads(threads)
        torch.set_num_interop_threads(threads)


def materialize(result):
    """Forces a TensorFlow result (nested) to the host, so the timing includes the work."""
    import tensorflow as tf

    for value in tf.nest.flatten(result):
        np.asarray(value)


# Shared with the trainers' results.json. Imported when called: `import tf_svmax` loads Keras
# and its backend (seconds), which a program refusing its flags (exit 2) must not wait for.
def environment(*args, **kwargs):
    from tf_svmax import records

    return records.environment(*args, **kwargs)


def write_json(*args, **kwargs):
    from tf_svmax import records

    return records.write_json(*args, **kwargs)


def write_csv(path, rows):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fields = sorted({key for row in rows for key in row})
    tmp = f"{path}.tmp"
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)


def write_records(out, program, config, rows, **extra):
    """``out/<program>.csv`` (the rows) and ``out/<program>.json`` (machine and versions, the
    config, the rows, then each `extra` entry): every benchmark's record."""
    write_csv(os.path.join(out, f"{program}.csv"), rows)
    write_json(
        os.path.join(out, f"{program}.json"),
        {**environment(), "config": config, "results": rows, **extra},
    )


def loglog_slope(sizes, times):
    """Least-squares exponent p of ``time ~ size**p`` (None with fewer than two points)."""
    sizes, times = np.asarray(sizes, float), np.asarray(times, float)
    keep = (sizes > 0) & (times > 0)
    if keep.sum() < 2:
        return None
    slope, _ = np.polyfit(np.log(sizes[keep]), np.log(times[keep]), 1)
    return float(slope)


def parse_ints(values, flag):
    try:
        out = [int(v) for v in values]
    except ValueError as error:
        raise ValueError(
            f"Invalid value for flag `{flag}`. Expected positive integers. Received: {values}"
        ) from error
    if any(v < 1 for v in out):
        raise ValueError(
            f"Invalid value for flag `{flag}`. Expected positive integers. Received: {values}"
        )
    return out


def line_plot(path, series, xlabel, ylabel, title):
    """`series`: {label: (xs, ys)} drawn on log-log axes, saved as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, (xs, ys) in series.items():
        if len(xs):
            ax.plot(xs, ys, marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(main):
    """``absl.app.run(main)`` with the project's exit codes: 2 for a flag absl cannot parse or
    a value refused with ``app.UsageError(..., exitcode=2)``, 0 after ``--help`` (absl exits 1
    for both, which the trainers and benchmarks reserve for a failed run)."""
    from trainers.harness.flags import run as run_with_exit_codes

    run_with_exit_codes(main)
