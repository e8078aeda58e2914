"""Time and peak memory of the batch-mining losses against the batch size b, forward + backward.

Each (loss, b) runs in a fresh process (its peak resident memory is its own), watched by this
one and killed above `--memory_limit_gb`. The embedding is b unit-norm rows of d = 128 in
P x 4 classes; one step is the loss and its gradient with respect to the embedding, inside a
`tf.function` as `Model.fit` runs it (median of `--repeats` steps after one warm-up step).

`--code_dir` runs another checkout of tf_svmax (e.g. a `git worktree` of an older commit) for a
before/after comparison in the same run; `--label` names its rows. Where
pytorch-metric-learning is installed, its `TripletMarginLoss` with
`TripletMarginMiner(type_of_triplets="semihard")` (the field's semi-hard triplet, on the same
data, float32 on the CPU) is measured beside ours (`--compare_pml`).

    python -m benchmarks.mining_memory --output_dir benchmarks/results/mining_memory
"""

import json
import os
import resource
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# A child measuring another checkout (--code_dir) imports tf_svmax from there: it must come
# first on the path before anything (benchmarks._common included) imports tf_svmax.
_CODE_DIR = os.environ.get("TF_SVMAX_BENCHMARK_CODE_DIR")
if _CODE_DIR:
    sys.path.insert(0, _CODE_DIR)

from absl import app, flags  # noqa: E402

from benchmarks import _common  # noqa: E402

FLAGS = flags.FLAGS
OURS = ("semihard", "batch_hard", "triplet_hard", "lifted", "pk_angular")
PEER = "pml_semihard"  # pytorch-metric-learning's semi-hard triplet (--compare_pml adds it)
LOSSES = (*OURS, PEER)
flags.DEFINE_list("losses", list(OURS), f"Losses to measure, of {list(LOSSES)}.")
flags.DEFINE_list("batches", ["256", "512", "1024", "2048", "4096"], "Batch sizes b.")
flags.DEFINE_integer("dim", 128, "Embedding dimension d.", lower_bound=1)
flags.DEFINE_integer("repeats", 3, "Timed steps per setting (after one warm-up).", lower_bound=1)
flags.DEFINE_float("memory_limit_gb", 6.0, "Kill a run whose resident memory passes this.")
flags.DEFINE_string("code_dir", None, "Another tf_svmax checkout to measure (PYTHONPATH).")
flags.DEFINE_string("label", "this checkout", "Name of the measured code in the rows.")
flags.DEFINE_bool("compare_pml", True, "Also measure pytorch-metric-learning when installed.")
flags.DEFINE_string("output_dir", "benchmarks/results/mining_memory", "Where results go.")
flags.DEFINE_string("child", None, "Internal: '<loss>:<b>' measured in this process.")

PROGRAM = "mining_memory"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _data(batch, dim):
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, dim)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x, np.repeat(np.arange(batch // 4), 4).astype(np.int64)


def _step_tf(name, batch, dim):
    import tensorflow as tf

    from tf_svmax import losses

    loss = {
        "semihard": lambda: losses.TripletSemiHardLoss(margin=0.2),
        "batch_hard": lambda: losses.BatchHardTripletLoss(margin=0.2),
        "triplet_hard": lambda: losses.TripletHardLoss(margin=0.2),
        "lifted": lambda: losses.LiftedStructLoss(margin=1.0),
        "pk_angular": lambda: losses.PKAngularLoss(),
    }[name]()
    x, y = _data(batch, dim)
    if name == "pk_angular":  # P x 2 layout
        y = __import__("numpy").repeat(__import__("numpy").arange(batch // 2), 2)
    x, y = tf.constant(x), tf.constant(y)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            tape.watch(x)
            value = loss(y, x)
        return value, tape.gradient(value, x)

    return lambda: _common.materialize(step())


def _step_pml(batch, dim):
    import torch
    from pytorch_metric_learning import losses, miners

    x, y = _data(batch, dim)
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    miner = miners.TripletMarginMiner(margin=0.2, type_of_triplets="semihard")
    loss = losses.TripletMarginLoss(margin=0.2)

    def step():
        leaf = x.clone().requires_grad_(True)
        value = loss(leaf, y, miner(leaf, y))
        value.backward()

    return step


def run_child(spec):
    name, batch = spec.split(":")
    batch = int(batch)
    before = _rss_mb()
    step = _step_pml(batch, FLAGS.dim) if name == PEER else _step_tf(name, batch, FLAGS.dim)
    baseline = _rss_mb()
    import tf_svmax

    timing = _common.time_calls(step, FLAGS.repeats, warmup=1)
    print(
        json.dumps(
            {
                **timing,
                "peak_rss_mb": _rss_mb(),
                "rss_after_import_mb": baseline,
                "rss_at_start_mb": before,
                "tf_svmax_path": os.path.dirname(os.path.dirname(tf_svmax.__file__)),
            }
        )
    )


def measure(name, batch, code_dir):
    """Runs one child; returns its record, or {"killed": ...} past the memory limit."""
    env = dict(os.environ)
    env["TF_SVMAX_BENCHMARK_CODE_DIR"] = os.path.abspath(code_dir or ROOT)
    command = [
        sys.executable,
        "-m",
        "benchmarks.mining_memory",
        f"--child={name}:{batch}",
        f"--dim={FLAGS.dim}",
        f"--repeats={FLAGS.repeats}",
    ]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env
    )
    limit_kb = FLAGS.memory_limit_gb * 1024 * 1024
    peak_kb = 0
    started = time.perf_counter()
    while process.poll() is None:
        try:
            with open(f"/proc/{process.pid}/status") as status:
                rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))
        except (OSError, StopIteration):
            rss = 0
        peak_kb = max(peak_kb, rss)
        if rss > limit_kb:
            process.kill()
            process.wait()
            return {"killed": f"resident memory above {FLAGS.memory_limit_gb} GB"}
        time.sleep(0.05)
    stdout, stderr = process.communicate()
    if process.returncode != 0:
        lines = stderr.strip().splitlines() or ["no output"]
        errors = [line for line in lines if "Error" in line or "OOM" in line]
        return {"failed": (errors or lines)[-1].strip()[:300]}
    record = json.loads(stdout.strip().splitlines()[-1])
    record["wall_s"] = time.perf_counter() - started
    return record


def main(argv):
    del argv
    if FLAGS.child:
        run_child(FLAGS.child)
        return
    try:
        batches = _common.parse_ints(FLAGS.batches, "batches")
    except ValueError as error:
        raise app.UsageError(str(error), exitcode=2) from None
    refusals = []
    if any(name not in LOSSES for name in FLAGS.losses) or not FLAGS.losses:
        refusals.append(
            f"Invalid value for flag `losses`. Expected names from {list(LOSSES)}. "
            f"Received: {FLAGS.losses}"
        )
    if any(b % 4 for b in batches):
        refusals.append(
            f"Invalid value for flag `batches`. Expected multiples of 4 (P x 4). "
            f"Received: {batches}"
        )
    if not FLAGS.memory_limit_gb > 0:
        refusals.append(
            f"Invalid value for flag `memory_limit_gb`. Expected a number > 0. "
            f"Received: {FLAGS.memory_limit_gb}"
        )
    if FLAGS.code_dir and not os.path.isdir(os.path.join(FLAGS.code_dir, "tf_svmax")):
        refusals.append(
            f"Invalid value for flag `code_dir`. Expected a checkout with a tf_svmax package. "
            f"Received: {FLAGS.code_dir}"
        )
    if refusals:
        raise app.UsageError("\n".join(refusals), exitcode=2)
    names = list(FLAGS.losses)
    if FLAGS.compare_pml and PEER not in names:
        if _has("pytorch_metric_learning") and _has("torch"):
            names.append(PEER)
    rows = []
    for name in names:
        for batch in batches:
            label = "pytorch-metric-learning" if name == PEER else FLAGS.label
            _common.progress(PROGRAM, f"{name} b={batch} ({label})")
            record = measure(name, batch, FLAGS.code_dir)
            rows.append({"loss": name, "batch": batch, "dim": FLAGS.dim, "code": label, **record})
            _common.progress(PROGRAM, json.dumps(rows[-1]))
    out = FLAGS.output_dir
    stem = os.path.join(out, PROGRAM)
    # Rows of earlier runs (another label, or losses not measured now) are kept side by side.
    previous = []
    if os.path.exists(f"{stem}.json"):
        with open(f"{stem}.json") as f:
            measured = {(r["loss"], r["code"]) for r in rows}
            previous = [
                r for r in json.load(f)["results"] if (r["loss"], r["code"]) not in measured
            ]
    rows = previous + rows
    config = {"dim": FLAGS.dim, "repeats": FLAGS.repeats, "memory_limit_gb": FLAGS.memory_limit_gb}
    _common.write_records(out, PROGRAM, config, rows)
    _plot(rows, stem)
    print("| loss | code | b | step ms (median) | peak RSS MB |")
    print("|---|---|---:|---:|---:|")
    for r in rows:
        ms = f"{r['median_ms']:.0f}" if "median_ms" in r else r.get("killed", r.get("failed"))
        peak = f"{r['peak_rss_mb']:.0f}" if "peak_rss_mb" in r else "–"
        print(f"| {r['loss']} | {r['code']} | {r['batch']} | {ms} | {peak} |")
    print(f"wrote {stem}.csv, {stem}.json and {stem}.png")


def _has(module):
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _plot(rows, stem):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    series = sorted({(r["loss"], r["code"]) for r in rows})
    for loss, code in series:
        done = sorted(
            (r["batch"], r["median_ms"], r["peak_rss_mb"])
            for r in rows
            if r["loss"] == loss and r["code"] == code and "median_ms" in r
        )
        if not done:
            continue
        b, ms, mb = zip(*done, strict=True)
        axes[0].plot(b, ms, marker="o", label=f"{loss} ({code})")
        axes[1].plot(b, mb, marker="o", label=f"{loss} ({code})")
    for ax, ylabel in zip(
        axes, ("forward + backward, ms (median)", "peak process RSS, MB"), strict=True
    ):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch size b (d = 128, P x 4)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    axes[1].axhline(2048, color="k", linestyle=":", label="2 GB target")
    axes[1].legend(fontsize=7)
    fig.suptitle(
        "Batch-mining losses: time and peak memory vs batch size (missing points: "
        f"killed above {FLAGS.memory_limit_gb} GB or failed)"
    )
    fig.tight_layout()
    fig.savefig(f"{stem}.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    _common.run(main)
