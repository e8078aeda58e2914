"""Cost of the SVMax penalty against batch size b and embedding dimension d (dissertation
Fig. 3.6 left), for every spectral path of tf_svmax and its peers, in one run.

For each shape, dtype and execution mode (eager, tf.function, XLA) it times the SVMax penalty
forward and forward+backward on L2-normalized rows for tf_svmax's paths ("gram", "svd",
"newton_schulz", and "auto", which under XLA is the library's XLA path), TensorFlow's naive
``tf.linalg.svd(compute_uv=False)`` with autodiff, and, when installed, the peers
``torch.linalg.svdvals`` (forward and forward+backward), ``numpy.linalg.svd`` and
``scipy.linalg.svd`` (forward). It reports medians with their spread, the log-log growth
exponent of each path in b and in d, and ratios to torch; it writes CSV + JSON (with machine and
versions) and PNG plots to --output_dir.

    python -m benchmarks.svd_cost --output_dir benchmarks/results/svd_cost

The default grid is a cross: b in --batch_sizes at d = --sweep_dim, and d in --dims at
b = --sweep_batch. --grid=full times every (b, d) pair.
"""

import itertools
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from benchmarks import _common  # noqa: E402

# TensorFlow and tf_svmax are imported where they are used: a refused flag (exit 2) does not
# wait seconds for them.

FLAGS = flags.FLAGS
flags.DEFINE_list(
    "batch_sizes",
    ["16", "64", "144", "256", "1024", "4096"],
    "Batch sizes b swept at d = --sweep_dim.",
)
flags.DEFINE_list(
    "dims",
    ["32", "64", "128", "256", "512", "1024"],
    "Embedding dimensions d swept at b = --sweep_batch.",
)
flags.DEFINE_integer("sweep_dim", 128, "d used while sweeping b (paper: 128).")
flags.DEFINE_integer("sweep_batch", 144, "b used while sweeping d (paper: 144).")
flags.DEFINE_enum("grid", "cross", ["cross", "full"], "Cross sweep or every (b, d) pair.")
flags.DEFINE_list("dtypes", ["float32", "float64"], "Dtypes to time.")
flags.DEFINE_list("modes", ["function", "xla"], "Execution modes: eager, function, xla.")
flags.DEFINE_list(
    "paths",
    ["auto", "gram", "svd", "newton_schulz", "naive"],
    "TensorFlow paths: tf_svmax methods and 'naive' tf.linalg.svd.",
)
flags.DEFINE_bool("peers", True, "Also time torch / numpy / scipy when installed.")
flags.DEFINE_integer("repeats", 30, "Timed calls per point (fewer when a call is slow).")
flags.DEFINE_float("seconds_per_point", 2.0, "Time budget per point; bounds the repeats.")
flags.DEFINE_integer(
    "xla_naive_max_elements",
    144 * 128,
    "Skip the naive SVD under XLA above this b*d (it takes minutes).",
)
flags.DEFINE_string("output_dir", "benchmarks/results/svd_cost", "Where results go.")

PROGRAM = "svd_cost"


def shapes(batch_sizes, dims, sweep_batch, sweep_dim, grid):
    if grid == "full":
        return sorted(set(itertools.product(batch_sizes, dims)))
    cross = {(b, sweep_dim) for b in batch_sizes} | {(sweep_batch, d) for d in dims}
    return sorted(cross)


def _penalty(path):
    import tensorflow as tf

    import tf_svmax

    if path == "naive":

        def naive(x):
            shape = tf.shape(x)
            lower, upper = tf_svmax.ops.svmax_bounds(shape[0], shape[1], dtype=x.dtype)
            s_mu = tf.reduce_mean(tf.linalg.svd(x, compute_uv=False))
            return tf.exp((upper - s_mu) / (upper - lower))

        return naive
    return lambda x: tf_svmax.ops.svmax(x, method=path)


def _tf_callable(path, mode, backward):
    import tensorflow as tf

    penalty = _penalty(path)

    def forward(x):
        return penalty(x)

    def forward_backward(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            value = penalty(x)
        return value, tape.gradient(value, x)

    fn = forward_backward if backward else forward
    if mode == "eager":
        return fn
    return tf.function(fn, jit_compile=(mode == "xla"))


def _budgeted_repeats(fn, repeats, seconds_per_point):
    """Runs `fn` once to estimate its cost and picks a repeat count inside the budget."""
    import time

    start = time.perf_counter()
    fn()
    once = time.perf_counter() - start
    return int(np.clip(seconds_per_point / max(once, 1e-6), 3, repeats))


def _peer_callables(x_np, backward):
    """{name: callable} for the installed peers (forward+backward only where they have one)."""
    peers = {}
    try:
        import torch

        torch.set_num_threads(os.cpu_count() or 1)
        x0 = torch.from_numpy(x_np)

        def torch_step():
            x = x0.clone().requires_grad_(backward)
            value = torch.linalg.svdvals(x).mean()
            if backward:
                value.backward()
            return value.item()

        peers["torch.linalg.svdvals"] = torch_step
    except ImportError:
        pass
    if not backward:
        peers["numpy.linalg.svd"] = lambda: np.linalg.svd(x_np, compute_uv=False)
        try:
            import scipy.linalg

            peers["scipy.linalg.svd"] = lambda: scipy.linalg.svd(x_np, compute_uv=False)
        except ImportError:
            pass
    return peers


def _measure(call, config, meta):
    """Times `call` within the per-point budget; returns `meta` plus the timing summary."""
    label = " ".join(str(meta[k]) for k in ("b", "d", "dtype", "pass", "mode", "path"))
    _common.progress(PROGRAM, label)
    repeats = _budgeted_repeats(call, config["repeats"], config["seconds_per_point"])
    return {**meta, **_common.time_calls(call, repeats, warmup=1)}


def run(config):
    import tensorflow as tf

    rows = []
    rng = np.random.default_rng(0)
    for (b, d), dtype, backward in itertools.product(
        shapes(
            config["batch_sizes"],
            config["dims"],
            config["sweep_batch"],
            config["sweep_dim"],
            config["grid"],
        ),
        config["dtypes"],
        (False, True),
    ):
        x_np = rng.standard_normal((b, d))
        x_np = (x_np / np.linalg.norm(x_np, axis=1, keepdims=True)).astype(dtype)
        x = tf.constant(x_np)
        pass_name = "forward_backward" if backward else "forward"
        point = {"b": b, "d": d, "dtype": dtype, "pass": pass_name}
        for mode, path in itertools.product(config["modes"], config["paths"]):
            if (
                mode == "xla"
                and path in ("naive", "svd")
                and b * d > config["xla_naive_max_elements"]
            ):
                continue
            if mode != "xla" and path == "auto":
                continue  # outside XLA "auto" is "gram", timed under its own name
            fn = _tf_callable(path, mode, backward)
            call = lambda fn=fn, x=x: _common.materialize(fn(x))  # noqa: E731
            rows.append(_measure(call, config, {**point, "mode": mode, "path": f"tf:{path}"}))
        if config["peers"]:
            for name, call in _peer_callables(x_np, backward).items():
                rows.append(_measure(call, config, {**point, "mode": "peer", "path": name}))
    return rows


def growth_exponents(rows, sweep_batch, sweep_dim):
    """log-log slope of median time in b (at d = sweep_dim) and in d (at b = sweep_batch)."""
    out = []
    keys = sorted({(r["dtype"], r["pass"], r["mode"], r["path"]) for r in rows})
    for dtype, pass_name, mode, path in keys:
        same = [
            r
            for r in rows
            if (r["dtype"], r["pass"], r["mode"], r["path"]) == (dtype, pass_name, mode, path)
        ]
        in_b = sorted((r["b"], r["median_ms"]) for r in same if r["d"] == sweep_dim)
        in_d = sorted((r["d"], r["median_ms"]) for r in same if r["b"] == sweep_batch)
        out.append(
            {
                "dtype": dtype,
                "pass": pass_name,
                "mode": mode,
                "path": path,
                "exponent_in_b": _common.loglog_slope(*zip(*in_b, strict=True))
                if len(in_b) > 1
                else None,
                "exponent_in_d": _common.loglog_slope(*zip(*in_d, strict=True))
                if len(in_d) > 1
                else None,
            }
        )
    return out


def ratios_to_torch(rows):
    """Each TF row's median divided by torch's at the same (b, d, dtype, pass)."""
    torch = {
        (r["b"], r["d"], r["dtype"], r["pass"]): r["median_ms"]
        for r in rows
        if r["path"] == "torch.linalg.svdvals"
    }
    out = []
    for r in rows:
        key = (r["b"], r["d"], r["dtype"], r["pass"])
        if r["path"].startswith("tf:") and key in torch:
            out.append(
                {
                    **{k: r[k] for k in ("b", "d", "dtype", "pass", "mode", "path")},
                    "ratio_to_torch": r["median_ms"] / torch[key],
                }
            )
    return out


def plots(rows, output_dir, sweep_batch, sweep_dim):
    for dtype in sorted({r["dtype"] for r in rows}):
        chosen = [r for r in rows if r["dtype"] == dtype and r["pass"] == "forward_backward"]
        labels = sorted({(r["mode"], r["path"]) for r in chosen})
        for axis, fixed_name, fixed in (("b", "d", sweep_dim), ("d", "b", sweep_batch)):
            series = {}
            for mode, path in labels:
                points = sorted(
                    (r[axis], r["median_ms"])
                    for r in chosen
                    if (r["mode"], r["path"]) == (mode, path) and r[fixed_name] == fixed
                )
                if len(points) > 1:
                    series[f"{path} ({mode})"] = tuple(zip(*points, strict=True))
            if series:
                _common.line_plot(
                    os.path.join(output_dir, f"svmax_cost_vs_{axis}_{dtype}.png"),
                    series,
                    f"{axis} ({fixed_name} = {fixed})",
                    "forward+backward, median ms",
                    f"SVMax penalty cost vs {axis}, {dtype}",
                )


def main(argv):
    del argv
    try:
        batch_sizes = _common.parse_ints(FLAGS.batch_sizes, "batch_sizes")
        dims = _common.parse_ints(FLAGS.dims, "dims")
        for mode in FLAGS.modes:
            if mode not in ("eager", "function", "xla"):
                raise ValueError(
                    "Invalid value for flag `modes`. Expected eager, function or xla. "
                    f"Received: {mode}"
                )
    except ValueError as error:
        raise app.UsageError(str(error), exitcode=2) from None
    config = {
        "batch_sizes": batch_sizes,
        "dims": dims,
        "sweep_batch": FLAGS.sweep_batch,
        "sweep_dim": FLAGS.sweep_dim,
        "grid": FLAGS.grid,
        "dtypes": FLAGS.dtypes,
        "modes": FLAGS.modes,
        "paths": FLAGS.paths,
        "peers": FLAGS.peers,
        "repeats": FLAGS.repeats,
        "seconds_per_point": FLAGS.seconds_per_point,
        "xla_naive_max_elements": FLAGS.xla_naive_max_elements,
    }
    rows = run(config)
    exponents = growth_exponents(rows, config["sweep_batch"], config["sweep_dim"])
    ratios = ratios_to_torch(rows)
    out = FLAGS.output_dir
    _common.write_records(
        out, PROGRAM, config, rows, growth_exponents=exponents, ratios_to_torch=ratios
    )
    plots(rows, out, config["sweep_batch"], config["sweep_dim"])
    print("| path | mode | dtype | exponent in b | exponent in d |")
    print("|---|---|---|---:|---:|")
    for e in exponents:
        if e["pass"] == "forward_backward":
            fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
            print(
                f"| {e['path']} | {e['mode']} | {e['dtype']} | {fmt(e['exponent_in_b'])} | "
                f"{fmt(e['exponent_in_d'])} |"
            )
    print(f"wrote {out}/svd_cost.csv, svd_cost.json and plots")


if __name__ == "__main__":
    _common.run(main)
