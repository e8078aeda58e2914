"""SVMax forward + backward on each Keras backend, every path, beside ``torch.linalg.svdvals``.

One long-lived worker process per Keras backend (the backend is fixed when Keras is imported)
times ``tf_svmax.ops.svmax`` (the bounded penalty, float32, L2-normalized rows, seed 0) with its
gradient, with ``method="auto"`` and with each explicit method:

* TensorFlow: in a ``tf.function`` (``"auto"``, ``"gram"``, ``"svd"``, ``"newton_schulz"``) and
  under XLA (``jit_compile=True``: ``"auto"``, ``"gram"``, ``"newton_schulz"``; not ``"svd"``,
  which XLA compiles to its Jacobi SVD, hundreds of times slower, and which the library warns
  against there);
* JAX: under ``jax.jit`` (XLA, JAX's only compiled mode), every method, and the peer
  ``jnp.linalg.svd(compute_uv=False)`` with autodiff;
* PyTorch: eagerly (what Keras' ``jit_compile="auto"`` does there), every method, and the peer
  ``torch.linalg.svdvals`` with autograd, the reference of every ratio.

The workers take turns: every round times each measurement `--repeats` times right beside
`--repeats` calls of the PyTorch peer at the same shape (the peer first every other round, the
measurements in reverse order every other round), so that the load of a shared CPU falls on
both alike. A row's figure is the median over `--rounds` of its round medians; its ratio is the
median over rounds of (its round median / the peer's beside it); the peer's row has the median
of all its timings. Which explicit method ``"auto"`` took is read from the results: the one
whose value and gradient are bit-identical to ``"auto"``'s.

`--threads=1` runs every backend single-threaded, LAPACK's OpenMP threads included (on a shared
2-core CPU at load 3 the peer's default-threaded round medians at b = 1,024 ranged 3.5-888 ms,
the single-threaded ones 4.3-8.7 ms). The record has the CPU's model and
vector extensions (AVX2 and AVX-512 change the kernels of every backend) and the load average
before, after and at every round.

`--isa=avx2` caps the instruction sets of every library at AVX2 at run time, through each one's
own switch in every worker's environment (`ISA_CAPS`): PyTorch's ATen kernels
(``ATEN_CPU_CAPABILITY``) and its MKL (``MKL_ENABLE_INSTRUCTIONS``), oneDNN under TensorFlow
(``ONEDNN_MAX_CPU_ISA``), XLA's code generation under TensorFlow and JAX
(``--xla_cpu_max_isa``) and the OpenBLAS behind JAX's ``eigh`` and ``svd`` (scipy's LAPACK,
``OPENBLAS_CORETYPE``). The CPU is still the one it is: such a record is "<CPU>, instruction sets
capped at AVX2", not an AVX2 CPU (whose caches, clocks and vector units differ). Each worker
reports what its libraries say they run (`isa_check`, in the record's ``backend_versions``):
PyTorch's CPU capability and whether its MKL takes this CPU for an Intel one (MKL picks its
kernels by the CPU's vendor as well as its instruction sets, and reports no ISA), oneDNN's ISA
(from ``ONEDNN_VERBOSE`` in a child process: it prints on stdout, the worker's channel) and
OpenBLAS' core; XLA reports nothing at run time (it refuses an unknown XLA flag, and warns of an
unknown ISA).

`--backends` and `--methods` narrow what is timed, e.g. ``--backends=torch --methods=auto`` for
the PyTorch backend's default path beside its peer only (the peers are always timed; without
every explicit method the record cannot say which one ``"auto"`` took).

Writes ``<output>/backend_speed.{csv,json}`` (machine and versions of every worker) and prints a
table, in milliseconds.

    python -m benchmarks.backend_speed --threads=1 --output=benchmarks/results/backend_speed
    python -m benchmarks.backend_speed --output=benchmarks/results/backend_speed_default_threads
    python -m benchmarks.backend_speed --threads=1 --isa=avx2 \
        --output=benchmarks/results/backend_speed_avx2cap/avx2cap_run1
"""

import json
import os
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from absl import flags  # noqa: E402

from benchmarks import _common  # noqa: E402

FLAGS = flags.FLAGS
BACKENDS = ("tensorflow", "jax", "torch")
PEER = "torch.linalg.svdvals (autograd)"
JAX_PEER = "jnp.linalg.svd(compute_uv=False) mean"
METHODS = ("auto", "gram", "svd", "newton_schulz")
# (backend, mode) -> the methods timed there.
MODES = {
    ("tensorflow", "tf.function"): METHODS,
    ("tensorflow", "XLA"): ("auto", "gram", "newton_schulz"),  # svd: XLA's Jacobi SVD, see above
    ("jax", "jax.jit"): METHODS,
    ("torch", "eager"): METHODS,
}
flags.DEFINE_list("backends", list(BACKENDS), f"Keras backends to time, of {list(BACKENDS)}.")
flags.DEFINE_list(
    "shapes", ["16x128", "144x128", "1024x128"], "Batch shapes b x d (paper: 144 x 128)."
)
flags.DEFINE_list(
    "methods",
    list(METHODS),
    f"The methods of tf_svmax.ops.svmax to time, of {list(METHODS)} (where the mode has them; "
    'the peers are always timed). Without every explicit one, which method "auto" took is '
    "not known (`auto_took` empty).",
)
flags.DEFINE_integer("rounds", 7, "Interleaved rounds (each worker once per round).", 1)
flags.DEFINE_integer("repeats", 15, "Timed calls per measurement per round (after warm-up).", 1)
flags.DEFINE_integer("threads", 0, "Threads of every backend (0: the backend's default).", 0)
# The run-time switches that cap each library at an instruction set, set in every worker's
# environment (see the module docstring). XLA_FLAGS is added to, not replaced.
ISA_CAPS = {
    "native": {},
    "avx2": {
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "OPENBLAS_CORETYPE": "Haswell",
        "XLA_FLAGS": "--xla_cpu_max_isa=AVX2",
    },
}
flags.DEFINE_enum(
    "isa",
    "native",
    list(ISA_CAPS),
    "Instruction sets of every library: native (all the CPU has) or avx2 (capped at AVX2 at "
    "run time on this CPU, through each library's own switch; see the module docstring).",
)
flags.DEFINE_string("output", None, "Folder for backend_speed.csv/.json (none: print only).")
flags.DEFINE_string("worker", None, "Internal: serve timings on this backend over stdin/stdout.")


def _batch(b, d):
    x = np.random.default_rng(0).normal(size=(b, d)).astype("float32")
    return x / np.linalg.norm(x, axis=1, keepdims=True)  # the bounds assume unit rows


def _name(mode, method):
    return f"tf_svmax.ops.svmax, {mode}, method={method!r}"


def _methods(backend, mode):
    """The methods timed in `mode` of `backend`: those of `MODES` that `--methods` names."""
    return [m for m in MODES[(backend, mode)] if m in FLAGS.methods]


def _tensorflow(x):
    import tensorflow as tf

    import tf_svmax

    def step(method, jit_compile):
        @tf.function(jit_compile=jit_compile)
        def run(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                value = tf_svmax.ops.svmax(x, method=method)
            return value, tape.gradient(value, x)

        return lambda: [np.asarray(t) for t in run(x)]

    x = tf.constant(x)
    return {
        _name(mode, method): step(method, mode == "XLA")
        for (backend, mode) in MODES
        if backend == "tensorflow"
        for method in _methods(backend, mode)
    }


def _jax(x):
    import jax
    import jax.numpy as jnp

    import tf_svmax

    def step(fn):
        run = jax.jit(jax.value_and_grad(fn))
        return lambda: [np.asarray(t) for t in jax.block_until_ready(run(x))]

    x = jnp.asarray(x)
    steps = {
        _name("jax.jit", method): step(lambda e, m=method: tf_svmax.ops.svmax(e, method=m))
        for method in _methods("jax", "jax.jit")
    }
    steps[JAX_PEER + ", jax.jit"] = step(lambda e: jnp.mean(jnp.linalg.svd(e, compute_uv=False)))
    return steps


def _torch(x):
    import torch

    import tf_svmax

    # Keras' PyTorch backend puts tensors on the GPU where there is one: the peer runs there too.
    device = "cuda" if torch.cuda.is_available() else "cpu"

    def step(fn):
        def run():
            e = torch.tensor(x, requires_grad=True, device=device)
            value = fn(e)
            (grad,) = torch.autograd.grad(value, e)
            # .cpu() waits for the device: the time includes the whole computation.
            return [value.detach().cpu().numpy(), grad.cpu().numpy()]

        return run

    steps = {
        _name("eager", method): step(lambda e, m=method: tf_svmax.ops.svmax(e, method=m))
        for method in _methods("torch", "eager")
    }
    steps[PEER] = step(lambda e: torch.linalg.svdvals(e).mean())
    return steps


def _versions():
    from tf_svmax import records

    return records.environment()["versions"]


def _onednn_isa():
    """The ISA oneDNN runs under TensorFlow, from ``ONEDNN_VERBOSE`` in a child process (it
    prints on stdout, this worker's channel); None without a oneDNN matmul (oneDNN off)."""
    snippet = "import tensorflow as tf; tf.linalg.matmul(tf.ones((8, 8)), tf.ones((8, 8)))"
    done = subprocess.run(
        [sys.executable, "-c", snippet],
        env={**os.environ, "ONEDNN_VERBOSE": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if ",info,cpu,isa:" in line]
    return lines[0].split("isa:", 1)[1] if lines else None


def _mkl_intel_cpu():
    """Whether the MKL inside PyTorch takes this CPU for an Intel one (it picks its kernels by
    vendor as well as by instruction set); None where it does not say (no such symbol)."""
    import ctypes

    import torch

    try:
        lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
        return bool(lib.mkl_serv_intel_cpu_true())
    except (OSError, AttributeError):
        return None


def _openblas_cores():
    """The cores OpenBLAS runs (scipy's is the LAPACK behind JAX's eigh and svd): {library
    file: core}, from threadpoolctl (None without it)."""
    try:
        import threadpoolctl
    except ImportError:
        return None
    import scipy.linalg.cython_lapack  # noqa: F401  loads scipy's OpenBLAS

    return {
        os.path.basename(info["filepath"]): info.get("architecture")
        for info in threadpoolctl.threadpool_info()
        if info["internal_api"] == "openblas"
    }


def isa_check(backend):
    """What the libraries of this worker's backend say about the instruction sets they run."""
    if backend == "torch":
        import torch

        return {
            "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "mkl_intel_cpu": _mkl_intel_cpu(),
        }
    if backend == "tensorflow":
        return {"onednn_isa": _onednn_isa(), "xla_flags": os.environ.get("XLA_FLAGS")}
    return {"openblas_cores": _openblas_cores(), "xla_flags": os.environ.get("XLA_FLAGS")}


def _device(backend):
    """Where this worker's backend computes: "cpu", or the GPU's name."""
    if backend == "jax":
        import jax

        device = jax.devices()[0]
        return "cpu" if device.platform == "cpu" else device.device_kind
    if backend == "torch":
        import torch

        return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    return tf.config.experimental.get_device_details(gpus[0]).get("device_name") if gpus else "cpu"


def _auto_took(results):
    """{measurement of "auto": the explicit method whose value and gradient are bit-identical}."""
    took = {}
    for name, (value, grad) in results.items():
        if not name.endswith("method='auto'"):
            continue
        prefix = name[: -len("'auto'")]
        for method in METHODS[1:]:
            other = results.get(f"{prefix}{method!r}")
            pairs = zip((value, grad), other or (), strict=False)
            if other is not None and all(np.array_equal(a, b) for a, b in pairs):
                took[name] = method
                break
    return took


def serve(backend, threads):
    """Worker: answers one JSON line per request line on stdin. ``{"shape": "bxd"}`` builds (and
    warms up) the steps of that shape and answers their names, the device, the versions and
    `auto_took`; ``{"shape": "bxd", "name": measurement, "repeats": n}`` answers
    ``{"seconds": [...]}``, `n` timed calls of that step."""
    _common.set_threads(backend, threads)
    timers = {"tensorflow": _tensorflow, "jax": _jax, "torch": _torch}[backend]
    checked = isa_check(backend)
    steps = {}
    for line in sys.stdin:
        request = json.loads(line)
        if "name" not in request:
            b, d = (int(v) for v in request["shape"].split("x"))
            steps[request["shape"]] = timers(_batch(b, d))
            results = {name: fn() for name, fn in steps[request["shape"]].items()}
            for fn in steps[request["shape"]].values():
                for _ in range(3):  # warm-up: tracing, compilation, caches
                    fn()
            answer = {
                "names": list(results),
                "device": _device(backend),
                "versions": {**_versions(), "isa_check": checked},
                "auto_took": _auto_took(results),
            }
        else:
            fn = steps[request["shape"]][request["name"]]
            seconds = []
            for _ in range(request["repeats"]):
                start = time.perf_counter()
                fn()
                seconds.append(time.perf_counter() - start)
            answer = {"seconds": seconds}
        print(json.dumps(answer), flush=True)


class _Worker:
    """One backend's long-lived worker process."""

    def __init__(self, backend, threads, isa):
        env = {**os.environ, "KERAS_BACKEND": backend}
        for name, value in ISA_CAPS[isa].items():
            env[name] = f"{env.get(name, '')} {value}".strip() if name == "XLA_FLAGS" else value
        if threads:
            # The LAPACK behind JAX's `eigh` and `svd` runs OpenMP threads of its own, which on
            # a loaded CPU stall a 128 x 128 decomposition to ~100 ms now and then.
            env["OMP_NUM_THREADS"] = str(threads)
        if threads and backend == "jax":
            # XLA's CPU thread pool has no XLA flag for its size; one thread for its Eigen
            # kernels is this one (a token without "--" after a flag is silently ignored).
            env["XLA_FLAGS"] = (
                f"{env.get('XLA_FLAGS', '')} --xla_cpu_multi_thread_eigen=false".strip()
            )
        self.backend = backend
        command = [sys.executable, "-m", "benchmarks.backend_speed", f"--worker={backend}"]
        self.process = subprocess.Popen(
            command + [f"--threads={threads}", f"--methods={','.join(FLAGS.methods)}"],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def ask(self, request):
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.backend} worker exited; see its stderr above")
        return json.loads(line)

    def close(self):
        self.process.stdin.close()
        self.process.wait()


def parse_shapes(values):
    shapes = []
    for value in values:
        parts = value.lower().split("x")
        if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise ValueError(
                "Invalid value for flag `--shapes`. Expected shapes like 144x128 (positive "
                f"b x d). Received: {value!r}"
            )
        shapes.append((int(parts[0]), int(parts[1])))
    return shapes


def check_some_of(values, allowed, flag):
    """`values` of the list flag `--flag` if they are some of `allowed`, else a ValueError."""
    unknown = [v for v in values if v not in allowed]
    if unknown or not values:
        raise ValueError(
            f"Invalid value for flag `--{flag}`. Expected some of {list(allowed)}. "
            f"Received: {values}"
        )
    return values


def measure(backends, shapes, rounds, repeats, threads, isa="native"):
    """Rows of every (backend, measurement, shape) with their round medians and their ratios to
    the PyTorch peer timed right beside them; the workers' versions; the load per round."""
    workers = {backend: _Worker(backend, threads, isa) for backend in (*backends, "torch")}
    info, versions, loads = {}, {}, []
    medians, ratios, peer_ms = {}, {}, {}
    try:
        for (backend, worker), (b, d) in ((w, s) for w in workers.items() for s in shapes):
            if (backend, f"{b}x{d}") not in info:
                _common.progress("backend_speed", f"{backend}: building {b}x{d}")
                info[(backend, f"{b}x{d}")] = worker.ask({"shape": f"{b}x{d}"})
                versions[backend] = info[(backend, f"{b}x{d}")]["versions"]
        keys = [
            (backend, name, b, d)
            for b, d in shapes
            for backend in backends
            for name in info[(backend, f"{b}x{d}")]["names"]
            if name != PEER
        ]
        for r in range(rounds):
            loads.append(os.getloadavg()[0])
            _common.progress("backend_speed", f"round {r + 1}/{rounds}, load {os.getloadavg()}")
            # Every measurement right beside a timing of the peer; the measurements in reverse
            # order, and the peer first, every other round.
            for backend, name, b, d in keys if r % 2 == 0 else keys[::-1]:
                pair = [("row", backend, name), ("peer", "torch", PEER)]
                timed = {}
                for label, side, measurement in pair if r % 2 == 0 else pair[::-1]:
                    answer = workers[side].ask(
                        {"shape": f"{b}x{d}", "name": measurement, "repeats": repeats}
                    )
                    timed[label] = float(np.median(answer["seconds"])) * 1e3
                medians.setdefault((backend, name, b, d), []).append(timed["row"])
                ratios.setdefault((backend, name, b, d), []).append(timed["row"] / timed["peer"])
                peer_ms.setdefault((b, d), []).append(timed["peer"])
    finally:
        for worker in workers.values():
            worker.close()
    rows = []
    for backend, name, b, d in keys + [("torch", PEER, b, d) for b, d in shapes]:
        answer = info[(backend, f"{b}x{d}")]
        per_round = peer_ms[(b, d)] if name == PEER else medians[(backend, name, b, d)]
        per_ratio = [1.0] if name == PEER else ratios[(backend, name, b, d)]
        rows.append(
            {
                "backend": backend,
                "device": answer["device"],
                "measurement": name,
                "auto_took": answer["auto_took"].get(name),
                "b": b,
                "d": d,
                "isa": isa,
                "median_ms": float(np.median(per_round)),
                "min_round_ms": float(np.min(per_round)),
                "max_round_ms": float(np.max(per_round)),
                "round_ms": [round(v, 4) for v in per_round],
                "ratio_to_torch_svdvals": float(np.median(per_ratio)),
                "round_ratios": [round(v, 3) for v in per_ratio],
            }
        )
    return rows, versions, loads


def isa_title(isa):
    """How a record made with `--isa` is labelled: the CPU keeps its own instruction sets."""
    return (
        "native instruction sets"
        if isa == "native"
        else f"instruction sets capped at {isa.upper()}"
    )


def format_table(rows):
    lines = [
        "| b x d | backend | device | measurement | median ms | round min-max ms "
        "| / torch.linalg.svdvals (median of rounds) | round min-max |",
        "|---|---|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        ratio, took = r["ratio_to_torch_svdvals"], r["auto_took"]
        spread = f"{min(r['round_ratios']):.2f}-{max(r['round_ratios']):.2f}"
        lines.append(
            f"| {r['b']} x {r['d']} | {r['backend']} | {r['device']} | {r['measurement']}"
            f"{f' (took {took})' if took else ''} | "
            f"{r['median_ms']:.2f} | {r['min_round_ms']:.2f}-{r['max_round_ms']:.2f} | "
            f"{ratio:.2f}x | {spread} |"
        )
    return "\n".join(lines)


def main(argv):
    del argv
    from absl import app

    try:
        shapes = parse_shapes(FLAGS.shapes)
        backends = check_some_of(FLAGS.backends, BACKENDS, "backends")
        check_some_of(FLAGS.methods, METHODS, "methods")
    except ValueError as error:
        raise app.UsageError(str(error), exitcode=2) from error
    if FLAGS.worker:
        serve(FLAGS.worker, FLAGS.threads)
        return
    load_before = os.getloadavg()
    rows, versions, loads = measure(
        backends, shapes, FLAGS.rounds, FLAGS.repeats, FLAGS.threads, FLAGS.isa
    )
    load_after = os.getloadavg()
    rows = sorted(rows, key=lambda r: (r["b"], r["d"], BACKENDS.index(r["backend"])))
    cpu = _common.cpu()
    print(
        f"CPU {cpu}, {isa_title(FLAGS.isa)}, threads {FLAGS.threads or 'backend default'}, "
        f"{FLAGS.rounds} rounds x {FLAGS.repeats} calls; load average before {load_before}, "
        f"after {load_after}"
    )
    print("isa_check: " + json.dumps({b: v["isa_check"] for b, v in versions.items()}))
    print(format_table(rows))
    if FLAGS.output:
        config = {
            "backends": backends,
            "methods": FLAGS.methods,
            "shapes": FLAGS.shapes,
            "rounds": FLAGS.rounds,
            "repeats": FLAGS.repeats,
            "threads": FLAGS.threads or "backend default",
            "cpu": cpu,
            "isa": isa_title(FLAGS.isa),
            "isa_caps": ISA_CAPS[FLAGS.isa],
            "load_average_before": load_before,
            "load_average_after": load_after,
            "load_average_1min_per_round": loads,
        }
        _common.write_records(
            FLAGS.output, "backend_speed", config, rows, backend_versions=versions
        )
        print(f"wrote {FLAGS.output}/backend_speed.csv and .json")


if __name__ == "__main__":
    _common.run(main)
