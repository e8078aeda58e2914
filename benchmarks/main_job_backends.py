"""The main job on each Keras backend, same machine, same run: `trainers.train_retrieval`'s
default run (the embedded glyph set, small_cnn, contrastive 36 x 4 + SVMax, 3,000 steps) per
backend and seed, each a process of its own, the backends interleaved within a seed so that
they share the machine's conditions.

Records per run the final test Recall@1, the median of the trainer's windowed seconds per step
(its `trace`: each window's wall seconds over its steps; the median leaves out the first
window's compilation) and the run's wall seconds; per backend the mean ± std of R@1 over the
seeds (sample std), the median seconds per step over its runs, their ratio to TensorFlow's, and
issue 57's test: R@1 within 3 points of TensorFlow's mean.

A run folder that holds a completed run of the same flags is read, not run again: a crash or a
stop loses at most the run under way (the trainer itself resumes it from its checkpoint).

    python -m benchmarks.main_job_backends --runs_dir=runs/main_job \\
        --output=benchmarks/results/main_job_backends

Writes ``<output>/main_job_backends.{csv,json,md}`` (machine and versions of every run) and
prints the table. Runs no Keras in this process.
"""

import csv
import json
import os
import platform
import statistics
import subprocess
import sys
import time

from absl import flags

FLAGS = flags.FLAGS
BACKENDS = ("tensorflow", "jax", "torch")
PROGRAM = "main_job_backends"
# Issue 57: the other backends' mean test R@1 within 3 points of TensorFlow's.
R1_TOLERANCE = 0.03

flags.DEFINE_list("backends", list(BACKENDS), f"Keras backends to run, of {list(BACKENDS)}.")
flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds; each backend runs every one.")
flags.DEFINE_integer(
    "train_steps", None, "Training steps per run (default: the trainer's, 3,000 on glyphs).", 1
)
flags.DEFINE_string("runs_dir", "runs/main_job", "Folder of the runs: <backend>/seed<seed>.")
flags.DEFINE_string(
    "note", "", "What the record should say of the runs' conditions (load, threads), verbatim."
)
flags.DEFINE_string("output", None, "Folder for main_job_backends.csv/.json/.md (none: print).")


def parse_seeds(values):
    try:
        seeds = [int(v) for v in values]
    except ValueError:
        raise ValueError(f"--seeds takes integers; received --seeds={','.join(values)}.") from None
    if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
        raise ValueError(
            f"--seeds takes distinct integers >= 0; received --seeds={','.join(values)}."
        )
    return seeds


def check_backends(values):
    unknown = [v for v in values if v not in BACKENDS]
    if not values or unknown or len(set(values)) != len(values):
        raise ValueError(
            f"--backends takes distinct names of {list(BACKENDS)}; received "
            f"--backends={','.join(values)}."
        )
    return list(values)


def run_flags(seed, folder, train_steps):
    flags_ = [f"--seed={seed}", f"--output_dir={folder}", "--verbose=1"]
    if train_steps is not None:
        flags_.append(f"--train_steps={train_steps}")
    return flags_


def completed(folder, seed, train_steps):
    """The run's record if `folder` holds a completed run of `seed` (and of `train_steps` where
    given), else None."""
    try:
        with open(os.path.join(folder, "results.json")) as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    config = record.get("config", {})
    if record.get("status") != "completed" or config.get("seed") != seed:
        return None
    if train_steps is not None and config.get("train_steps") != train_steps:
        return None
    return record


def run_one(backend, seed, folder, train_steps):
    """Runs the trainer (or resumes it: the same command) and returns its record."""
    env = {**os.environ, "KERAS_BACKEND": backend}
    os.makedirs(os.path.dirname(os.path.abspath(folder)), exist_ok=True)
    log = f"{folder}.log"
    command = [
        sys.executable,
        "-m",
        "trainers.train_retrieval",
        *run_flags(seed, folder, train_steps),
    ]
    with open(log, "a") as out:
        done = subprocess.run(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    record = completed(folder, seed, train_steps)
    if done.returncode != 0 or record is None:
        raise RuntimeError(
            f"{backend} seed {seed}: train_retrieval exited {done.returncode}; see {log}"
        )
    return record


def row(backend, seed, folder, record):
    final = record["evaluations"][-1]
    windows = [t["step_seconds"] for t in record["trace"] if t.get("step_seconds")]
    return {
        "backend": backend,
        "seed": seed,
        "run": folder,
        "train_steps": record["config"]["train_steps"],
        "test_recall_at_1": final["recall_at_1"],
        "test_nmi": final["nmi"],
        "step_seconds_median": statistics.median(windows),
        "wall_seconds": record["wall_seconds"],
        "device": record["device"],
        "versions": record["versions"],
        "machine": record["machine"],
    }


def summarize(rows, backends):
    """Per backend: R@1 mean ± sample std over its seeds, median seconds per step, and against
    TensorFlow (where it ran) the R@1 difference, the time ratio and the 3-point test."""
    summary = {}
    for backend in backends:
        mine = [r for r in rows if r["backend"] == backend]
        r1 = [r["test_recall_at_1"] for r in mine]
        summary[backend] = {
            "seeds": [r["seed"] for r in mine],
            "recall_at_1_mean": statistics.fmean(r1),
            "recall_at_1_std": statistics.stdev(r1) if len(r1) > 1 else None,
            "step_seconds": statistics.median(r["step_seconds_median"] for r in mine),
        }
    reference = summary.get("tensorflow")
    for backend, entry in summary.items():
        if reference is None or backend == "tensorflow":
            continue
        difference = entry["recall_at_1_mean"] - reference["recall_at_1_mean"]
        entry["recall_at_1_minus_tensorflow"] = difference
        entry["within_3_points_of_tensorflow"] = abs(difference) <= R1_TOLERANCE
        entry["step_time_vs_tensorflow"] = entry["step_seconds"] / reference["step_seconds"]
    return summary


def format_table(summary, rows):
    lines = [
        "| backend | seeds | test R@1 (mean ± std) | Δ vs TensorFlow | within 3 points | "
        "s/step (median) | × TensorFlow |",
        "|---|---|---|---|---|---|---|",
    ]
    for backend, e in summary.items():
        std = "" if e["recall_at_1_std"] is None else f" ± {100 * e['recall_at_1_std']:.2f}"
        delta = e.get("recall_at_1_minus_tensorflow")
        lines.append(
            f"| {backend} ({rows_version(rows, backend)}) | {', '.join(map(str, e['seeds']))} "
            f"| {100 * e['recall_at_1_mean']:.2f}{std} "
            f"| {'' if delta is None else f'{100 * delta:+.2f}'} "
            f"| {e.get('within_3_points_of_tensorflow', '')} "
            f"| {e['step_seconds']:.3f} "
            f"| {'' if delta is None else format(e['step_time_vs_tensorflow'], '.2f')} |"
        )
    return "\n".join(lines)


def rows_version(rows, backend):
    versions = next(r["versions"] for r in rows if r["backend"] == backend)
    return f"{backend} {versions.get(backend, '?')}, Keras {versions.get('keras', '?')}"


def machine():
    """This machine: platform, CPU model and whether it has AVX-512 (AVX2 and AVX-512 CPUs
    differ ~3x in these times), cores, Python."""
    cpu, flags_ = platform.processor(), ""
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in info.splitlines()
            if line.startswith("model name")
        )
        flags_ = next(line for line in info.splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        pass
    return {
        "platform": platform.platform(),
        "cpu": cpu,
        "avx512f": " avx512f" in flags_,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
    }


def write(output, config, rows, summary, table):
    os.makedirs(output, exist_ok=True)
    flat = [{k: v for k, v in r.items() if k not in ("versions", "machine")} for r in rows]
    with open(os.path.join(output, f"{PROGRAM}.csv.tmp"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(flat[0]))
        writer.writeheader()
        writer.writerows(flat)
    os.replace(os.path.join(output, f"{PROGRAM}.csv.tmp"), os.path.join(output, f"{PROGRAM}.csv"))
    record = {
        "program": PROGRAM,
        "machine": machine(),
        "config": config,
        "summary": summary,
        "runs": rows,
    }
    m = record["machine"]
    header = (
        f"The main job (`train_retrieval`'s defaults) per backend: seeds "
        f"{', '.join(map(str, config['seeds']))}, "
        f"{config['train_steps'] or 'the default'} steps each, on {m['cpu']} "
        f"({m['cpu_count']} cores, AVX-512: {'yes' if m['avx512f'] else 'no'}). "
        f"{config['note']}".strip()
    )
    markdown = f"{header}\n\n{table}"
    for name, text in (
        (f"{PROGRAM}.json", json.dumps(record, indent=2)),
        (f"{PROGRAM}.md", markdown),
    ):
        with open(os.path.join(output, name + ".tmp"), "w") as f:
            f.write(text + "\n")
        os.replace(os.path.join(output, name + ".tmp"), os.path.join(output, name))


def main(argv):
    del argv
    from absl import app

    try:
        seeds = parse_seeds(FLAGS.seeds)
        backends = check_backends(FLAGS.backends)
    except ValueError as error:
        raise app.UsageError(str(error), exitcode=2) from error
    rows = []
    for seed in seeds:
        for backend in backends:
            folder = os.path.join(FLAGS.runs_dir, backend, f"seed{seed}")
            record = completed(folder, seed, FLAGS.train_steps)
            if record is None:
                started = time.perf_counter()
                print(f"[{PROGRAM}] {backend} seed {seed} -> {folder}", file=sys.stderr, flush=True)
                record = run_one(backend, seed, folder, FLAGS.train_steps)
                minutes = (time.perf_counter() - started) / 60
                print(
                    f"[{PROGRAM}] {backend} seed {seed} done in {minutes:.1f} min", file=sys.stderr
                )
            rows.append(row(backend, seed, folder, record))
    summary = summarize(rows, backends)
    table = format_table(summary, rows)
    print(table)
    if FLAGS.output:
        config = {
            "backends": backends,
            "seeds": seeds,
            "train_steps": FLAGS.train_steps,
            "runs_dir": FLAGS.runs_dir,
            "note": FLAGS.note,
        }
        write(FLAGS.output, config, rows, summary, table)
        print(f"wrote {FLAGS.output}/{PROGRAM}.csv, .json and .md")


if __name__ == "__main__":
    from trainers.harness.flags import run

    run(main)
