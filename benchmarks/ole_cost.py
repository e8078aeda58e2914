"""OLE forward+backward cost across batch size N, feature dimension D and rows per class K,
tf_svmax against a float64 SciPy implementation of the original's semantics (one LAPACK
``gesvd`` per class in a Python loop), in the same run.

    python -m benchmarks.ole_cost --output_dir benchmarks/results/ole_cost

Cross grid around the paper-like point N=144, D=128, K=4 (36 classes): N in --batch_sizes,
D in --dims, K in --rows_per_class. Writes CSV + JSON (machine, versions, the load average) and a
PNG plot.

Each round interleaves the two sides call by call (`--repeats` calls of tf_svmax, a third as many
of SciPy, spread evenly between them), so that load from other processes on a shared CPU falls
on both alike; `--rounds=R` repeats that R times, a side's figure is the median of its per-round
medians, and the record keeps each round's speed-up.
`--threads=1` runs both single-threaded: TensorFlow's intra/inter-op pools, and the OpenBLAS /
OpenMP / MKL threads of NumPy and SciPy (the program restarts itself with those variables set,
which must precede NumPy's import). Issue 60's target (>= 5x at N = 144, D = 128, K = 4), as
measured for it:

    python -m benchmarks.ole_cost --threads=1 --rounds=7 --batch_sizes=144 --dims=128 \
        --rows_per_class=4 --output_dir /tmp/ole_cost_single_thread
"""

import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from benchmarks import _common  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_list("batch_sizes", ["72", "144", "288", "576"], "N swept at D, K defaults.")
flags.DEFINE_list("dims", ["32", "64", "128", "256"], "D swept at N = 144, K = 4.")
flags.DEFINE_list("rows_per_class", ["2", "4", "8", "16"], "K swept at N = 144, D = 128.")
flags.DEFINE_integer("base_batch", 144, "N of the cross's center.")
flags.DEFINE_integer("base_dim", 128, "D of the cross's center.")
flags.DEFINE_integer("base_rows_per_class", 4, "K of the cross's center.")
flags.DEFINE_integer(
    "repeats", 30, "Timed calls per point and round (the SciPy loop gets a third).", lower_bound=1
)
flags.DEFINE_integer("rounds", 1, "Interleaved rounds per point (tf_svmax, SciPy).", lower_bound=1)
flags.DEFINE_integer(
    "threads",
    0,
    "Threads of TensorFlow and of NumPy/SciPy's BLAS and LAPACK (0: their defaults). 1 is the "
    "steadier figure on a shared CPU, where a parallel op waits for its slowest thread.",
    lower_bound=0,
)
flags.DEFINE_string("output_dir", "benchmarks/results/ole_cost", "Where results go.")

PROGRAM = "ole_cost"
# The variables that set NumPy/SciPy's BLAS and LAPACK threads; read when NumPy is imported.
_BLAS_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _restart_with_blas_threads(threads):
    """Restarts this program with the BLAS thread variables set to `threads`, unless they are."""
    if all(os.environ.get(name) == str(threads) for name in _BLAS_THREAD_VARIABLES):
        return
    env = {**os.environ, **{name: str(threads) for name in _BLAS_THREAD_VARIABLES}}
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", f"benchmarks.{PROGRAM}", *sys.argv[1:]], env)


def points(batch_sizes, dims, rows_per_class, base):
    n0, d0, k0 = base
    grid = {(n, d0, k0) for n in batch_sizes} | {(n0, d, k0) for d in dims}
    grid |= {(n0, d0, k) for k in rows_per_class}
    return sorted(p for p in grid if p[0] % p[2] == 0)


def _interleaved_round(sides, reverse):
    """One round: each side's calls (`sides`: {path: (fn, calls)}) spread evenly between the
    other's, call by call (their order reversed with `reverse`), so that a change of load during
    the round falls on both. Returns {path: [seconds, ...]}."""
    order = []
    for path, (_, calls) in sides.items():
        # Call j of a side at fraction (j + 0.5) / calls of the round.
        order += [((j + 0.5) / calls, path) for j in range(calls)]
    order.sort(reverse=reverse)
    seconds = {path: [] for path in sides}
    for _, path in order:
        fn = sides[path][0]
        start = time.perf_counter()
        fn()
        seconds[path].append(time.perf_counter() - start)
    return seconds


def run(grid, repeats, rounds=1, threads=0):
    # Imported here, not at the top: a refused flag (exit 2) does not wait seconds for them.
    import tensorflow as tf

    _common.set_threads("tensorflow", threads)

    import tf_svmax
    from benchmarks.reference_ole import ole_reference

    @tf.function
    def _tf_step(labels, x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            value = tf_svmax.ops.ole_loss(labels, x)
        return value, tape.gradient(value, x)

    rows = []
    rng = np.random.default_rng(0)
    for n, d, k in grid:
        labels = np.repeat(np.arange(n // k), k)
        x = rng.standard_normal((n, d)).astype(np.float32)
        _common.progress(PROGRAM, f"N={n} D={d} K={k}: {rounds} round(s)")
        y_t, x_t = tf.constant(labels), tf.constant(x)
        x64 = x.astype(np.float64)
        sides = {
            "tf_svmax.ole_loss": (
                lambda y_t=y_t, x_t=x_t: _common.materialize(_tf_step(y_t, x_t)),
                repeats,
            ),
            "scipy gesvd per class": (
                lambda labels=labels, x64=x64: ole_reference(labels, x64),
                max(3, repeats // 3),
            ),
        }
        for fn, _ in sides.values():
            for _ in range(2):  # warm-up: tracing, caches
                fn()
        per_round = {path: [] for path in sides}
        for r in range(rounds):
            for path, seconds in _interleaved_round(sides, r % 2 == 1).items():
                per_round[path].append(_common.summarize(seconds))
        for path, summaries in per_round.items():
            medians = [round_summary["median_ms"] for round_summary in summaries]
            rows.append(
                {
                    "N": n,
                    "D": d,
                    "K": k,
                    "classes": n // k,
                    "path": path,
                    # The median of the per-round medians (one round: that round's figures).
                    **(summaries[0] if rounds == 1 else {}),
                    "median_ms": float(np.median(medians)),
                    "round_medians_ms": [round(m, 4) for m in medians],
                    "rounds": rounds,
                }
            )
    return rows


def speedups(rows):
    """SciPy's time over tf_svmax's per point: of the medians, and of each round's medians."""
    ref = {(r["N"], r["D"], r["K"]): r for r in rows if r["path"].startswith("scipy")}
    out = []
    for r in rows:
        if r["path"] != "tf_svmax.ole_loss":
            continue
        scipy = ref[(r["N"], r["D"], r["K"])]
        rounds = np.asarray(scipy["round_medians_ms"]) / np.asarray(r["round_medians_ms"])
        out.append(
            {
                "N": r["N"],
                "D": r["D"],
                "K": r["K"],
                "speedup_vs_scipy": scipy["median_ms"] / r["median_ms"],
                "round_speedups": [round(float(v), 3) for v in rounds],
            }
        )
    return out


def main(argv):
    del argv
    base = (FLAGS.base_batch, FLAGS.base_dim, FLAGS.base_rows_per_class)
    try:
        batch_sizes = _common.parse_ints(FLAGS.batch_sizes, "batch_sizes")
        dims = _common.parse_ints(FLAGS.dims, "dims")
        rows_per_class = _common.parse_ints(FLAGS.rows_per_class, "rows_per_class")
    except ValueError as error:
        raise app.UsageError(str(error), exitcode=2) from None
    if FLAGS.threads:
        _restart_with_blas_threads(FLAGS.threads)
    grid = points(batch_sizes, dims, rows_per_class, base)
    load_before = os.getloadavg()
    rows = run(grid, FLAGS.repeats, FLAGS.rounds, FLAGS.threads)
    ups = speedups(rows)
    out = FLAGS.output_dir
    config = {
        "grid": grid,
        "repeats": FLAGS.repeats,
        "rounds": FLAGS.rounds,
        "threads": FLAGS.threads,
    }
    _common.write_records(
        out,
        PROGRAM,
        config,
        rows,
        speedups=ups,
        cpu=_common.cpu(),
        load_average={"before": list(load_before), "after": list(os.getloadavg())},
    )
    n0, d0, k0 = base
    series = {}
    for path in ("tf_svmax.ole_loss", "scipy gesvd per class"):
        pts = sorted(
            (r["N"], r["median_ms"])
            for r in rows
            if r["path"] == path and r["D"] == d0 and r["K"] == k0
        )
        series[path] = tuple(zip(*pts, strict=True)) if pts else ((), ())
    _common.line_plot(
        os.path.join(out, "ole_cost_vs_N.png"),
        series,
        f"N (D = {d0}, K = {k0})",
        "forward+backward, median ms",
        "OLE cost vs batch size",
    )
    print("| N | D | K | classes | tf_svmax ms | scipy ms | speedup | per round |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    by_key = {(r["N"], r["D"], r["K"], r["path"]): r for r in rows}
    per_round = {(u["N"], u["D"], u["K"]): u["round_speedups"] for u in ups}
    for n, d, k in grid:
        ours = by_key[(n, d, k, "tf_svmax.ole_loss")]["median_ms"]
        ref = by_key[(n, d, k, "scipy gesvd per class")]["median_ms"]
        rounds = ", ".join(f"{v:.1f}" for v in per_round[(n, d, k)])
        print(
            f"| {n} | {d} | {k} | {n // k} | {ours:.2f} | {ref:.2f} | {ref / ours:.1f}x "
            f"| {rounds} |"
        )
    print(f"wrote {out}/ole_cost.csv, ole_cost.json and ole_cost_vs_N.png")


if __name__ == "__main__":
    _common.run(main)
