"""Times the SVMax penalty and the OLE loss (forward + backward) against their peers, in one run.

Measures, at one batch shape (default b=144, d=128, float32, the SVMax paper's setting):

* SVMax forward+backward for every spectral path of tf_svmax, TensorFlow's naive
  ``tf.linalg.svd(compute_uv=False)`` with autodiff, and ``torch.linalg.svdvals`` (if installed);
* the same under XLA (``jit_compile=True``): tf_svmax's default path and the naive SVD;
* OLE forward+backward (N=b, D=d, P x K classes) for tf_svmax and a float64 SciPy ``gesvd``
  implementation of the original's semantics (a Python loop over classes).

Writes a JSON file with the machine, library versions, medians and spread, and prints a table.

    python -m benchmarks.spectral_speed --output benchmarks/results/spectral_speed_cpu.json
"""

import json
import os
import platform
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from benchmarks import _common  # noqa: E402

# TensorFlow and tf_svmax are imported where they are used: a refused flag (exit 2) does not
# wait seconds for them.

FLAGS = flags.FLAGS
flags.DEFINE_integer("batch_size", 144, "Rows b of the embedding matrix (paper: 144).")
flags.DEFINE_integer("embedding_dim", 128, "Columns d of the embedding matrix (paper: 128).")
flags.DEFINE_integer("classes_per_batch", 36, "P classes in the OLE batch (b must be divisible).")
flags.DEFINE_integer("repeats", 100, "Timed calls per measurement (after 3 warm-up calls).")
flags.DEFINE_integer("xla_naive_repeats", 3, "Timed calls for the naive SVD under XLA (slow).")
flags.DEFINE_bool("xla", True, "Also time the XLA (jit_compile=True) paths.")
flags.DEFINE_bool("torch", True, "Also time torch.linalg.svdvals when torch is installed.")
flags.DEFINE_string("output", None, "Where to write the JSON results (none: print only).")


def _time(fn, repeats):
    """Timing with three warm-up calls (tracing and compilation happen in the first)."""
    return _common.time_calls(fn, repeats, warmup=3)


def _tf_step(penalty, jit_compile=False):
    import tensorflow as tf

    @tf.function(jit_compile=jit_compile)
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            value = penalty(x)
        return value, tape.gradient(value, x)

    return step


def _in_graph(step_body, calls):
    """`calls` chained evaluations of `step_body(x) -> (value, grad)` inside one tf.function.

    In training, the penalty is a few ops of one big compiled step, so TensorFlow's per-call
    dispatch cost (~0.3-0.5 ms here) is paid once per step, not per penalty. Chaining the calls
    (each input depends on the previous value) keeps them sequential.
    """
    import tensorflow as tf

    @tf.function
    def loop(*args):
        acc = tf.zeros([], args[-1].dtype)
        for _ in range(calls):
            shifted = args[:-1] + (args[-1] + acc * 1e-30,)
            value, grad = step_body(*shifted)
            acc = acc + value + tf.reduce_sum(grad) * 0.0
        return acc

    return loop


def _naive_s_mu(x):
    import tensorflow as tf

    return tf.reduce_mean(tf.linalg.svd(x, compute_uv=False))


def _torch_svdvals(x_np):
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    x0 = torch.from_numpy(x_np)

    def step():
        x = x0.clone().requires_grad_(True)
        value = torch.linalg.svdvals(x).mean()
        value.backward()
        return value.item(), x.grad

    return step, torch.__version__


def _progress(message):
    print(f"[spectral_speed] {message}", file=sys.stderr, flush=True)


def run(batch_size, embedding_dim, classes_per_batch, repeats, xla_naive_repeats, xla, use_torch):
    """Runs every measurement and returns the results dictionary."""
    import tensorflow as tf

    import tf_svmax
    from benchmarks.reference_ole import ole_reference

    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((batch_size, embedding_dim)).astype(np.float32)
    x_np /= np.linalg.norm(x_np, axis=1, keepdims=True)
    x = tf.constant(x_np)
    svmax = {}

    def measure(name, step, n=repeats):
        _progress(f"{name} ...")
        svmax[name] = _time(lambda: _common.materialize(step()), n)

    in_graph_calls = 20
    in_graph = {}
    for method in ("gram", "svd", "newton_schulz"):
        step = _tf_step(lambda x, m=method: tf_svmax.ops.svmax(x, method=m))
        measure(f"tf_svmax.svmax[{method}]", lambda s=step: s(x))
        loop = _in_graph(
            _tf_step(lambda x, m=method: tf_svmax.ops.svmax(x, method=m)).python_function,
            in_graph_calls,
        )
        _progress(f"tf_svmax.svmax[{method}] in-graph ...")
        in_graph[f"tf_svmax.svmax[{method}]"] = _per_call(
            _time(lambda lp=loop: _common.materialize(lp(x)), max(5, repeats // 10)), in_graph_calls
        )
    naive = _tf_step(_naive_s_mu)
    measure("tf.linalg.svd(compute_uv=False) autodiff", lambda: naive(x))
    loop = _in_graph(naive.python_function, in_graph_calls)
    in_graph["tf.linalg.svd(compute_uv=False) autodiff"] = _per_call(
        _time(lambda: _common.materialize(loop(x)), max(5, repeats // 10)), in_graph_calls
    )
    torch_version = None
    if use_torch:
        try:
            torch_step, torch_version = _torch_svdvals(x_np)
            measure("torch.linalg.svdvals", torch_step)
        except ImportError:
            _progress("torch is not installed: skipping torch.linalg.svdvals")
    if xla:
        fast = _tf_step(tf_svmax.ops.svmax, jit_compile=True)
        measure("XLA tf_svmax.svmax[auto]", lambda: fast(x))
        slow = _tf_step(_naive_s_mu, jit_compile=True)
        measure("XLA tf.linalg.svd(compute_uv=False) autodiff", lambda: slow(x), xla_naive_repeats)

    ole = {}
    labels = np.repeat(np.arange(classes_per_batch), batch_size // classes_per_batch)
    ole_step = tf.function(_tf_step_with_labels)
    y = tf.constant(labels)
    _progress("OLE tf_svmax ...")
    ole["tf_svmax.ole_loss"] = _time(lambda: _common.materialize(ole_step(y, x)), repeats)
    ole_loop = _in_graph(_tf_step_with_labels, in_graph_calls)
    _progress("OLE tf_svmax in-graph ...")
    ole_in_graph = {
        "tf_svmax.ole_loss": _per_call(
            _time(lambda: _common.materialize(ole_loop(y, x)), max(5, repeats // 10)),
            in_graph_calls,
        )
    }
    _progress("OLE scipy gesvd reference ...")
    x64 = x_np.astype(np.float64)
    ole["scipy gesvd per class (original semantics)"] = _time(
        lambda: ole_reference(labels, x64), max(10, repeats // 5)
    )
    return {
        "config": {
            "batch_size": batch_size,
            "embedding_dim": embedding_dim,
            "classes_per_batch": classes_per_batch,
            "dtype": "float32",
            "device": "CPU",
        },
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
        },
        "versions": {
            "tf_svmax": tf_svmax.__version__,
            "tensorflow": tf.__version__,
            "keras": __import__("keras").__version__,
            "numpy": np.__version__,
            "scipy": __import__("scipy").__version__,
            "torch": torch_version,
        },
        "svmax_forward_backward": svmax,
        "svmax_forward_backward_in_graph": in_graph,
        "ole_forward_backward": ole,
        "ole_forward_backward_in_graph": ole_in_graph,
    }


def _per_call(summary, calls):
    """Divides a timing summary of `calls` chained evaluations by `calls`."""
    return {k: (v / calls if k.endswith("_ms") else v) for k, v in summary.items()} | {
        "calls_per_timing": calls
    }


def _tf_step_with_labels(y, x):
    import tensorflow as tf

    import tf_svmax

    with tf.GradientTape() as tape:
        tape.watch(x)
        value = tf_svmax.ops.ole_loss(y, x)
    return value, tape.gradient(value, x)


def format_table(results):
    """A markdown table of medians with ratios to the peer in each group."""
    lines = ["| measurement | median ms | p10-p90 ms | ratio |", "|---|---:|---:|---:|"]
    svmax = results["svmax_forward_backward"]
    peer = svmax.get("torch.linalg.svdvals", svmax["tf.linalg.svd(compute_uv=False) autodiff"])
    peer_name = "torch" if "torch.linalg.svdvals" in svmax else "naive TF"
    for name, r in svmax.items():
        lines.append(
            f"| SVMax {name} | {r['median_ms']:.2f} | {r['p10_ms']:.2f}-{r['p90_ms']:.2f} | "
            f"{r['median_ms'] / peer['median_ms']:.2f}x {peer_name} |"
        )
    for name, r in results["svmax_forward_backward_in_graph"].items():
        lines.append(
            f"| SVMax {name}, in-graph per call | {r['median_ms']:.2f} | "
            f"{r['p10_ms']:.2f}-{r['p90_ms']:.2f} | {r['median_ms'] / peer['median_ms']:.2f}x "
            f"{peer_name} |"
        )
    ole = dict(results["ole_forward_backward"])
    ole.update(
        {f"{k}, in-graph per call": v for k, v in results["ole_forward_backward_in_graph"].items()}
    )
    reference = ole["scipy gesvd per class (original semantics)"]
    for name, r in ole.items():
        lines.append(
            f"| OLE {name} | {r['median_ms']:.2f} | {r['p10_ms']:.2f}-{r['p90_ms']:.2f} | "
            f"scipy / this = {reference['median_ms'] / r['median_ms']:.2f} |"
        )
    return "\n".join(lines)


def main(argv):
    del argv
    if FLAGS.batch_size % FLAGS.classes_per_batch:
        raise app.UsageError(
            f"Invalid value for flag `classes_per_batch`. Expected a divisor of batch_size="
            f"{FLAGS.batch_size}. Received: classes_per_batch={FLAGS.classes_per_batch}",
            exitcode=2,
        )
    results = run(
        FLAGS.batch_size,
        FLAGS.embedding_dim,
        FLAGS.classes_per_batch,
        FLAGS.repeats,
        FLAGS.xla_naive_repeats,
        FLAGS.xla,
        FLAGS.torch,
    )
    print(format_table(results))
    if FLAGS.output:
        os.makedirs(os.path.dirname(os.path.abspath(FLAGS.output)), exist_ok=True)
        tmp = FLAGS.output + ".tmp"
        with open(tmp, "w") as f:
            json.dump(results, f, indent=2)
        os.replace(tmp, FLAGS.output)  # atomic: never a half-written results file
        print(f"wrote {FLAGS.output}")


if __name__ == "__main__":
    _common.run(main)
