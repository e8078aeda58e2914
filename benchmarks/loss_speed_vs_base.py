"""Every stateless loss's forward + backward, this checkout against another commit's, in one run.

Two long-lived worker processes, one importing ``tf_svmax`` from this checkout (``head``) and
one from `--base` (a separate checkout, e.g. ``git worktree add ../base 02ac264``, the last
commit before the port to ``keras.ops``), take turns: every round times each (loss, shape) on
both sides back to back, alternating which side goes first, so that the machine's load
(other processes on a shared CPU) falls on both alike. A side's figure is the median over rounds
of its per-round medians; the ratio is head / base of those (below 1: head is faster), with the
median of the per-round ratios and the ratio of the two sides' fastest calls beside it.
`--threads=1` runs each worker's backend single-threaded: on a CPU shared with other processes
the default-threaded figures move by tens of percent (a parallel op waits for its slowest
thread), the single-threaded ones by a few.

What is timed, per Keras backend (`--backend`; the base must run on it, so 02ac264 is
TensorFlow only):

* TensorFlow: one ``tf.function`` (``jit_compile=False``, the trainers' default; ``--xla``
  adds ``jit_compile=True`` rows) returning the loss and its gradient w.r.t. the embeddings;
* JAX: ``jax.jit(jax.value_and_grad(...))``;
* PyTorch: eagerly, ``torch.autograd.grad``.

The inputs are L2-normalized float32 embeddings (seed 0) of P x K batches with classes in
consecutive rows (K = 4, K = 2 for the P x 2 losses); Proxy-Anchor gets cosine similarities to P
fixed unit proxies, N-pairs the [b, b] Gram matrix, contrastive the distances of row pairs
(2i, 2i + 1). Each side also saves its value and gradient at the first call; the record says
per loss whether they are bit-identical and their largest difference.

Writes ``<output>/loss_speed_vs_base.{csv,json}`` (machine, versions, both commits, the load
average before and after) and prints a markdown table.

    git worktree add /tmp/base 02ac264
    python -m benchmarks.loss_speed_vs_base --base=/tmp/base --threads=1 \
        --output=benchmarks/results/loss_speed_vs_base
"""

import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

# No module of this checkout at the top: a worker runs this file with the other side's tree on
# its path (benchmarks._common is imported by the parent, and loaded by file in a worker).

FLAGS = flags.FLAGS
BACKENDS = ("tensorflow", "jax", "torch")
# name: (class in tf_svmax.losses, K of the P x K batch, input adapter)
LOSSES = {
    "triplet_semihard": ("TripletSemiHardLoss", 4, "embeddings"),
    "triplet_hard": ("TripletHardLoss", 4, "embeddings"),
    "lifted_struct": ("LiftedStructLoss", 4, "embeddings"),
    "batch_hard": ("BatchHardTripletLoss", 4, "embeddings"),
    "all_pairs_contrastive": ("AllPairsContrastiveLoss", 4, "embeddings"),
    "pk_contrastive": ("PKContrastiveLoss", 4, "embeddings"),
    "pk_npair": ("PKNpairLoss", 2, "embeddings"),
    "pk_angular": ("PKAngularLoss", 2, "embeddings"),
    "proxy_anchor": ("ProxyAnchorLoss", 4, "proxies"),
    "npairs": ("NpairsLoss", 4, "gram"),
    "npairs_multilabel": ("NpairsMultilabelLoss", 4, "gram_multilabel"),
    "contrastive": ("ContrastiveLoss", 4, "pairs"),
    "svmax": ("SVMaxLoss", 4, "embeddings"),
    "ole": ("OLELoss", 4, "embeddings"),
}
flags.DEFINE_string("base", None, "Checkout of the commit to compare against (its root).")
flags.DEFINE_enum("backend", "tensorflow", list(BACKENDS), "Keras backend of both sides.")
flags.DEFINE_list("losses", list(LOSSES), f"Losses to time, of {list(LOSSES)}.")
flags.DEFINE_list("shapes", ["144x128", "1024x128"], "Batch shapes b x d (paper: 144 x 128).")
flags.DEFINE_integer("rounds", 7, "Interleaved rounds (each side once per round).", 1)
flags.DEFINE_integer("repeats", 10, "Timed calls per side per round (after warm-up).", 1)
flags.DEFINE_integer(
    "threads",
    0,
    "Threads of each worker's backend (0: the backend's default, all cores). 1 is the steadier "
    "figure on a CPU shared with other processes: a parallel op waits for its slowest thread.",
    0,
)
flags.DEFINE_bool("xla", False, "TensorFlow: also time jit_compile=True.")
flags.DEFINE_string("output", None, "Folder for loss_speed_vs_base.csv/.json (none: print only).")
flags.DEFINE_string("worker", None, "Internal: serve timing requests on stdin for this side.")


def _inputs(adapter, k, b, d):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(b, d)).astype("float32")
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    labels = np.repeat(np.arange(b // k), k).astype("int32")
    proxies = rng.normal(size=(b // k, d)).astype("float32")
    proxies /= np.linalg.norm(proxies, axis=1, keepdims=True)
    return x, labels, proxies


def _adapt(adapter, ops, labels, x, proxies):
    """``(y_true, y_pred)`` of the loss from the embeddings `x` (the gradient's variable)."""
    if adapter == "embeddings":
        return labels, x
    if adapter == "proxies":
        return labels, ops.matmul(x, ops.transpose(proxies))
    if adapter == "gram":
        return labels, ops.matmul(x, ops.transpose(x))
    if adapter == "gram_multilabel":
        one_hot = ops.one_hot(labels, int(labels.shape[0]))
        return one_hot, ops.matmul(x, ops.transpose(x))
    # pairs: rows (2i, 2i + 1), similar when their labels agree.
    diff = x[0::2] - x[1::2]
    same = ops.cast(ops.equal(labels[0::2], labels[1::2]), "float32")
    return same, ops.sqrt(ops.sum(ops.square(diff), axis=1))


def _step(backend, name, shape, xla):
    """A function of no arguments returning ``(value, gradient)`` as NumPy arrays."""
    import keras

    import tf_svmax

    class_name, k, adapter = LOSSES[name]
    b, d = shape
    x, labels, proxies = _inputs(adapter, k, b, d)
    loss = getattr(tf_svmax.losses, class_name)()
    ops = keras.ops
    if backend == "tensorflow":
        import tensorflow as tf

        x, labels, proxies = tf.constant(x), tf.constant(labels), tf.constant(proxies)

        @tf.function(jit_compile=xla)
        def run(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                value = loss(*_adapt(adapter, ops, labels, x, proxies))
            # A gather's gradient comes as IndexedSlices: densified, as an optimizer would.
            return value, tf.convert_to_tensor(tape.gradient(value, x))

        return lambda: [np.asarray(t) for t in run(x)]
    if backend == "jax":
        import jax
        import jax.numpy as jnp

        labels, proxies = jnp.asarray(labels), jnp.asarray(proxies)
        x = jnp.asarray(x)
        run = jax.jit(jax.value_and_grad(lambda x: loss(*_adapt(adapter, ops, labels, x, proxies))))
        return lambda: [np.asarray(t) for t in jax.block_until_ready(run(x))]
    import torch

    labels, proxies = torch.from_numpy(labels), torch.from_numpy(proxies)
    x = torch.from_numpy(x)

    def run():
        leaf = x.clone().requires_grad_(True)
        value = loss(*_adapt(adapter, ops, labels, leaf, proxies))
        (grad,) = torch.autograd.grad(value, leaf)
        return [value.detach().numpy(), grad.numpy()]

    return run


def _this_checkouts_common():
    """This checkout's `benchmarks._common`, loaded from its file beside this one: a worker runs
    with the other checkout's root on its path (02ac264 has no `benchmarks._common`), so the
    name would not find it. The module imports only the standard library and NumPy."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_common.py")
    spec = importlib.util.spec_from_file_location("_loss_speed_vs_base_common", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def serve(backend, save_dir, threads):
    """Answers one JSON line per request line: ``{"loss", "shape", "xla", "repeats"}`` ->
    ``{"seconds": [...]}``; the first request of a key saves its value and gradient."""
    # (JAX's threads: XLA_FLAGS, set by the parent before the worker starts.)
    _this_checkouts_common().set_threads(backend, threads)
    steps = {}
    for line in sys.stdin:
        request = json.loads(line)
        key = (request["loss"], request["shape"], request["xla"])
        if key not in steps:
            b, d = (int(v) for v in request["shape"].split("x"))
            steps[key] = _step(backend, request["loss"], (b, d), request["xla"])
            value, grad = steps[key]()
            np.savez(
                os.path.join(save_dir, "_".join(map(str, key)) + ".npz"), value=value, grad=grad
            )
            for _ in range(2):  # warm-up: tracing, caches
                steps[key]()
        seconds = []
        for _ in range(request["repeats"]):
            start = time.perf_counter()
            steps[key]()
            seconds.append(time.perf_counter() - start)
        print(json.dumps({"seconds": seconds}), flush=True)


class _Side:
    def __init__(self, name, root, backend, save_dir, threads):
        env = {**os.environ, "PYTHONPATH": root, "KERAS_BACKEND": backend}
        if threads and backend == "jax":
            # XLA's CPU thread pool has no XLA flag for its size; one thread for its Eigen
            # kernels is this one (a token without "--" after a flag is silently ignored).
            env["XLA_FLAGS"] = (
                f"{env.get('XLA_FLAGS', '')} --xla_cpu_multi_thread_eigen=false".strip()
            )
        # The worker is this file run from `root`'s tree, so each side imports its own tf_svmax.
        self.name, self.root = name, root
        self.process = subprocess.Popen(
            [
                sys.executable,
                os.path.abspath(__file__),
                f"--worker={backend}",
                f"--output={save_dir}",
                f"--threads={threads}",
            ],
            cwd=root,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def time(self, request):
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.name} worker ({self.root}) exited; see its stderr")
        seconds = json.loads(line)["seconds"]
        return float(np.median(seconds)), float(np.min(seconds))

    def close(self):
        self.process.stdin.close()
        self.process.wait()


def _commit(root):
    return subprocess.run(
        ["git", "-C", root, "log", "-1", "--format=%h %s"], capture_output=True, text=True
    ).stdout.strip()[:100]


def _compare(base_dir, head_dir, key):
    file = "_".join(map(str, key)) + ".npz"
    base, head = (np.load(os.path.join(d, file), allow_pickle=True) for d in (base_dir, head_dir))
    if any(side[k].dtype == object for side in (base, head) for k in ("value", "grad")):
        raise RuntimeError(f"{key}: a side returned no value or gradient")
    identical = all(np.array_equal(base[k], head[k], equal_nan=True) for k in ("value", "grad"))
    diff = {
        k: float(np.max(np.abs(base[k].astype("float64") - head[k].astype("float64"))))
        for k in ("value", "grad")
    }
    scale = float(np.max(np.abs(base["grad"]))) or 1.0
    return {
        "bit_identical": identical,
        "value_abs_diff": diff["value"],
        "grad_max_abs_diff": diff["grad"],
        "grad_max_rel_diff": diff["grad"] / scale,
    }


def measure(base_root, head_root, backend, losses, shapes, rounds, repeats, xla_modes, threads):
    keys = [(name, shape, xla) for xla in xla_modes for shape in shapes for name in losses]
    per_round = {key: {"base": [], "head": []} for key in keys}
    fastest = {key: {"base": [], "head": []} for key in keys}
    with tempfile.TemporaryDirectory() as tmp:
        dirs = {side: os.path.join(tmp, side) for side in ("base", "head")}
        for path in dirs.values():
            os.makedirs(path)
        sides = {
            "base": _Side("base", base_root, backend, dirs["base"], threads),
            "head": _Side("head", head_root, backend, dirs["head"], threads),
        }
        try:
            for r in range(rounds):
                print(f"[loss_speed_vs_base] round {r + 1}/{rounds}", file=sys.stderr, flush=True)
                for i, key in enumerate(keys):
                    request = {"loss": key[0], "shape": key[1], "xla": key[2], "repeats": repeats}
                    order = ("base", "head") if (r + i) % 2 == 0 else ("head", "base")
                    for side in order:
                        median, least = sides[side].time(request)
                        per_round[key][side].append(median)
                        fastest[key][side].append(least)
        finally:
            for side in sides.values():
                side.close()
        rows = []
        for key in keys:
            base, head = (np.asarray(per_round[key][s]) for s in ("base", "head"))
            rows.append(
                {
                    "loss": key[0],
                    "shape": key[1],
                    "mode": ("XLA" if key[2] else "tf.function")
                    if backend == "tensorflow"
                    else {"jax": "jax.jit", "torch": "eager"}[backend],
                    "base_ms": float(np.median(base)) * 1e3,
                    "head_ms": float(np.median(head)) * 1e3,
                    "ratio": float(np.median(head) / np.median(base)),
                    "median_round_ratio": float(np.median(head / base)),
                    "round_ratios": [round(float(v), 3) for v in head / base],
                    # The fastest call of each side over all rounds: on a loaded CPU the least
                    # disturbed figure.
                    "base_min_ms": float(np.min(fastest[key]["base"])) * 1e3,
                    "head_min_ms": float(np.min(fastest[key]["head"])) * 1e3,
                    "min_ratio": float(np.min(fastest[key]["head"]) / np.min(fastest[key]["base"])),
                    **_compare(dirs["base"], dirs["head"], key),
                }
            )
    return rows


def format_table(rows):
    lines = [
        "| loss | b x d | mode | base ms | head ms | head / base | median of round ratios "
        "| fastest call, head / base | values and gradients |",
        "|---|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        same = (
            "bit-identical"
            if row["bit_identical"]
            else f"grad max rel diff {row['grad_max_rel_diff']:.1e}"
        )
        lines.append(
            f"| {row['loss']} | {row['shape']} | {row['mode']} | {row['base_ms']:.2f} "
            f"| {row['head_ms']:.2f} | {row['ratio']:.3f} | {row['median_round_ratio']:.3f} "
            f"| {row['min_ratio']:.3f} | {same} |"
        )
    return "\n".join(lines)


def _check(values, allowed, flag):
    unknown = [v for v in values if v not in allowed]
    if unknown or not values:
        raise app.UsageError(
            f"Invalid value for flag `--{flag}`. Expected some of {list(allowed)}. "
            f"Received: {values}",
            exitcode=2,
        )


def _shapes(values):
    try:
        shapes = [tuple(int(v) for v in s.split("x")) for s in values]
    except ValueError:
        shapes = []
    if not shapes or any(len(s) != 2 or min(s) < 1 for s in shapes):
        raise app.UsageError(
            "Invalid value for flag `--shapes`. Expected b x d such as 144x128. "
            f"Received: {values}",
            exitcode=2,
        )
    return [f"{b}x{d}" for b, d in shapes]


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}", exitcode=2)
    if FLAGS.base is None or not os.path.isdir(os.path.join(FLAGS.base, "tf_svmax")):
        raise app.UsageError(
            "Invalid value for flag `--base`. Expected the root of a tf_svmax checkout. "
            f"Received: {FLAGS.base}",
            exitcode=2,
        )
    _check(FLAGS.losses, LOSSES, "losses")
    shapes = _shapes(FLAGS.shapes)
    head_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    base_root = os.path.abspath(FLAGS.base)
    xla_modes = (False, True) if FLAGS.xla and FLAGS.backend == "tensorflow" else (False,)
    load_before = os.getloadavg()
    rows = measure(
        base_root,
        head_root,
        FLAGS.backend,
        FLAGS.losses,
        shapes,
        FLAGS.rounds,
        FLAGS.repeats,
        xla_modes,
        FLAGS.threads,
    )
    load_after = os.getloadavg()
    table = format_table(rows)
    print(table)
    if FLAGS.output:
        from benchmarks import _common

        config = {
            "backend": FLAGS.backend,
            "rounds": FLAGS.rounds,
            "repeats": FLAGS.repeats,
            "threads": FLAGS.threads or "backend default",
            "base": _commit(base_root),
            "head": _commit(head_root),
            "head_dirty": bool(
                subprocess.run(
                    ["git", "-C", head_root, "status", "--porcelain", "tf_svmax"],
                    capture_output=True,
                    text=True,
                ).stdout.strip()
            ),
            "cpu": _common.cpu(),
            "load_average_before": load_before,
            "load_average_after": load_after,
        }
        _common.write_records(FLAGS.output, "loss_speed_vs_base", config, rows)
        with open(os.path.join(FLAGS.output, "loss_speed_vs_base.md"), "w") as f:
            f.write(f"base {config['base']}\n\nhead {config['head']}\n\n")
            f.write(
                f"CPU {config['cpu']}, threads {config['threads']}, rounds {FLAGS.rounds} x "
                f"{FLAGS.repeats} calls; load average before {load_before}, after "
                f"{load_after}\n\n{table}\n"
            )


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1].startswith("--worker="):
        # A worker: no absl flags (the parent built the command line).
        values = [arg.split("=", 1)[1] for arg in sys.argv[1:]]
        serve(values[0], values[1], int(values[2]))
    else:
        from benchmarks import _common

        _common.run(main)
