"""OLE forward+backward cost across batch size N, feature dimension D and rows per class K,
tf_svmax against a float64 SciPy implementation of the original's semantics (one LAPACK
``gesvd`` per class in a Python loop), in the same run.

    python -m benchmarks.ole_cost --output_dir benchmarks/results/ole_cost

Cross grid around the paper-like point N=144, D=128, K=4 (36 classes): N in --batch_sizes,
D in --dims, K in --rows_per_class. Writes CSV + JSON (machine, versions) and a PNG plot.
"""

import os

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
flags.DEFINE_integer("repeats", 30, "Timed calls per point (the SciPy loop gets a third).")
flags.DEFINE_string("output_dir", "benchmarks/results/ole_cost", "Where results go.")

PROGRAM = "ole_cost"


def points(batch_sizes, dims, rows_per_class, base):
    n0, d0, k0 = base
    grid = {(n, d0, k0) for n in batch_sizes} | {(n0, d, k0) for d in dims}
    grid |= {(n0, d0, k) for k in rows_per_class}
    return sorted(p for p in grid if p[0] % p[2] == 0)


def run(grid, repeats):
    # Imported here, not at the top: a refused flag (exit 2) does not wait seconds for them.
    import tensorflow as tf

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
        _common.progress(PROGRAM, f"N={n} D={d} K={k} tf_svmax")
        y_t, x_t = tf.constant(labels), tf.constant(x)
        ours = _common.time_calls(
            lambda y_t=y_t, x_t=x_t: _common.materialize(_tf_step(y_t, x_t)), repeats
        )
        _common.progress(PROGRAM, f"N={n} D={d} K={k} scipy")
        x64 = x.astype(np.float64)
        ref = _common.time_calls(
            lambda labels=labels, x64=x64: ole_reference(labels, x64), max(3, repeats // 3)
        )
        rows.append(
            {"N": n, "D": d, "K": k, "classes": n // k, "path": "tf_svmax.ole_loss", **ours}
        )
        rows.append(
            {"N": n, "D": d, "K": k, "classes": n // k, "path": "scipy gesvd per class", **ref}
        )
    return rows


def speedups(rows):
    ref = {(r["N"], r["D"], r["K"]): r["median_ms"] for r in rows if r["path"].startswith("scipy")}
    return [
        {
            "N": r["N"],
            "D": r["D"],
            "K": r["K"],
            "speedup_vs_scipy": ref[(r["N"], r["D"], r["K"])] / r["median_ms"],
        }
        for r in rows
        if r["path"] == "tf_svmax.ole_loss"
    ]


def main(argv):
    del argv
    base = (FLAGS.base_batch, FLAGS.base_dim, FLAGS.base_rows_per_class)
    try:
        batch_sizes = _common.parse_ints(FLAGS.batch_sizes, "batch_sizes")
        dims = _common.parse_ints(FLAGS.dims, "dims")
        rows_per_class = _common.parse_ints(FLAGS.rows_per_class, "rows_per_class")
    except ValueError as error:
        raise app.UsageError(str(error), exitcode=2) from None
    grid = points(batch_sizes, dims, rows_per_class, base)
    rows = run(grid, FLAGS.repeats)
    ups = speedups(rows)
    out = FLAGS.output_dir
    _common.write_records(
        out, PROGRAM, {"grid": grid, "repeats": FLAGS.repeats}, rows, speedups=ups
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
    print("| N | D | K | classes | tf_svmax ms | scipy ms | speedup |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    by_key = {(r["N"], r["D"], r["K"], r["path"]): r for r in rows}
    for n, d, k in grid:
        ours = by_key[(n, d, k, "tf_svmax.ole_loss")]["median_ms"]
        ref = by_key[(n, d, k, "scipy gesvd per class")]["median_ms"]
        print(f"| {n} | {d} | {k} | {n // k} | {ours:.2f} | {ref:.2f} | {ref / ours:.1f}x |")
    print(f"wrote {out}/ole_cost.csv, ole_cost.json and ole_cost_vs_N.png")


if __name__ == "__main__":
    _common.run(main)
