"""One Keras backend's share of `benchmarks/gpu.py`: the cases, their steps and their records.

Run by `benchmarks.gpu` as ``KERAS_BACKEND=<backend> python -m benchmarks.gpu_worker SPEC.json``
(the backend is fixed when Keras is imported, so every backend has a process of its own). The
spec names the grid, the deadline (epoch seconds) and the file the rows go to: one JSON line per
case, written as soon as the case ends, so the rows measured before a kill survive it. No absl
flags here (this module is imported by the tests and by `gpu.py`).

One step is a forward + backward pass on the device, synchronised before the clock stops
(`jax.block_until_ready`; `torch.cuda.synchronize`): JAX under ``jax.jit`` (compiled ahead, the
compile time recorded apart), PyTorch eagerly (what Keras' ``jit_compile="auto"`` does there).
Peak device memory: PyTorch's allocator peak over one step (``torch.cuda.max_memory_allocated``
after ``reset_peak_memory_stats``); JAX's compiled program's own plan (XLA's
``memory_analysis()``: temporaries + arguments + outputs), as no per-step peak can be reset
there. On a CPU PyTorch records none.
"""

import gc
import json
import os
import sys
import time

import numpy as np

from benchmarks import _common

# Grids. "full" is issue 58's; "tiny" runs in seconds on a CPU (the tests).
GRIDS = {
    "full": {
        "svmax_shapes": [(b, d) for b in (144, 1024, 4096) for d in (128, 512)],
        "ole_classes": [36, 100],
        "ole_rows_per_class": 4,
        "ole_dim": 128,
        "mining_batches": [1024, 4096, 8192, 16384],
        "mining_dim": 128,
        "fit_classes": 36,  # the retrieval trainer's contrastive default: P x K = 36 x 4
        "fit_image_size": 32,  # the glyph set's 32 x 32 grey images
        "repeats": 20,
        "warmup": 3,
        "seconds_per_case": 3.0,
    },
    "tiny": {
        "svmax_shapes": [(12, 8)],
        "ole_classes": [3],
        "ole_rows_per_class": 4,
        "ole_dim": 8,
        "mining_batches": [16, 32],
        "mining_dim": 8,
        "fit_classes": 4,
        "fit_image_size": 8,
        "repeats": 3,
        "warmup": 2,
        "seconds_per_case": 0.2,
    },
}
BACKENDS = ("jax", "torch")
SVMAX_METHODS = ("auto", "gram", "svd", "newton_schulz")  # tf_svmax.ops.spectral.METHODS
SVD_PEERS = {"jax": "jnp.linalg.svd", "torch": "torch.linalg.svdvals"}
OLE_PEERS = {"jax": "batched jnp.linalg.svd", "torch": "batched torch.linalg.svdvals"}
MINING = ("semihard", "hard", "lifted", "batch_hard", "contrastive_pairs")
# pytorch-metric-learning's counterpart of each mining loss (hard and batch-hard share one).
PML_PEER_OF = {
    "semihard": "pml_semihard",
    "hard": "pml_batch_hard",
    "lifted": "pml_lifted",
    "batch_hard": "pml_batch_hard",
    "contrastive_pairs": "pml_contrastive",
}
PML = ("pml_semihard", "pml_batch_hard", "pml_lifted", "pml_contrastive")
FIT = "train_on_batch: retrieval trainer's default model, jit_compile=False"
FIT_XLA = "train_on_batch: retrieval trainer's default model, jit_compile=True"
STATUSES = ("ok", "out of memory", "failed", "skipped", "absent")
# A case is not started with less than this left before the deadline (seconds).
MIN_CASE_S = 1.0


def plan(grid, backend):
    """The cases of `backend` on `grid` (a `GRIDS` entry), in the order they run: each a dict of
    section, measurement, implementation ("tf_svmax" or "peer") and its sizes.

    What issue 58's goals read comes first, so that a slow run (a tight time budget, long
    compilations) loses the least: SVMax's ``"auto"`` beside the SVD peer at every shape, OLE,
    the mining losses and their peers (each series in increasing b), the training step, then the
    other SVMax methods."""
    svmax = grid["svmax_shapes"]
    cases = []
    for b, d in svmax:
        cases.append(_case("svmax", "auto", "tf_svmax", b=b, d=d))
        cases.append(_case("svmax", SVD_PEERS[backend], "peer", b=b, d=d))
    k = grid["ole_rows_per_class"]
    for classes in grid["ole_classes"]:
        sizes = {"b": classes * k, "d": grid["ole_dim"], "classes": classes}
        cases.append(_case("ole", "tf_svmax.ops.ole_loss", "tf_svmax", **sizes))
        cases.append(_case("ole", OLE_PEERS[backend], "peer", **sizes))
    for b in grid["mining_batches"]:
        for loss in MINING:
            cases.append(_case("mining", loss, "tf_svmax", b=b, d=grid["mining_dim"]))
        if backend == "torch":
            for peer in PML:
                cases.append(_case("mining", peer, "peer", b=b, d=grid["mining_dim"]))
    p, size = grid["fit_classes"], grid["fit_image_size"]
    fit = {"b": 4 * p, "d": 128, "classes": p, "image_size": size}
    cases.append(_case("fit", FIT, "tf_svmax", jit_compile=False, **fit))
    if backend == "jax":  # PyTorch's jit_compile=True is torch.compile: minutes, not measured
        cases.append(_case("fit", FIT_XLA, "tf_svmax", jit_compile=True, **fit))
    for b, d in svmax:
        for method in SVMAX_METHODS[1:]:
            cases.append(_case("svmax", method, "tf_svmax", b=b, d=d))
    return cases


def _case(section, measurement, implementation, **sizes):
    return {
        "section": section,
        "measurement": measurement,
        "implementation": implementation,
        **sizes,
    }


def case_key(row):
    """What identifies a case across the plan and the rows."""
    return (row["section"], row["measurement"], row.get("b"), row.get("d"), row.get("classes"))


# Data.


def unit_rows(b, d, seed=0):
    x = np.random.default_rng(seed).standard_normal((b, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)  # the SVMax bounds assume unit rows


def pk_labels(b, k=4):
    return np.repeat(np.arange(b // k), k).astype(np.int32)


def mean_singular_value_reference(x):
    """``(s_mu, d s_mu / d x)`` in float64 by NumPy's SVD: the mean singular value and its
    gradient ``U V^T / k`` (independent of tf_svmax)."""
    x64 = np.asarray(x, np.float64)
    u, s, vt = np.linalg.svd(x64, full_matrices=False)
    return s.mean(), (u @ vt) / min(x64.shape)


def relative_errors(outputs, reference):
    """``{value_rel_error, grad_rel_error}`` of float32 `outputs` ``(value, grad)`` against a
    float64 `reference`; Frobenius norms for the gradient."""
    value, grad = (np.asarray(t, np.float64) for t in outputs)
    ref_value, ref_grad = reference
    return {
        "value_rel_error": float(abs(value - ref_value) / abs(ref_value)),
        "grad_rel_error": float(np.linalg.norm(grad - ref_grad) / np.linalg.norm(ref_grad)),
    }


# The backends.


class JaxSteps:
    """``jax.jit(jax.value_and_grad(fn))`` compiled ahead for the arguments; memory from XLA's
    plan of the compiled program."""

    name = "jax"

    def __init__(self):
        import jax

        self.jax = jax
        device = jax.devices()[0]
        self.device = "cpu" if device.platform == "cpu" else device.device_kind

    def array(self, value):
        return self.jax.numpy.asarray(value)

    def program(self, fn, *args):
        """`(call, compile_s, memory_mb)` of ``value_and_grad(fn)`` w.r.t. the first argument."""
        args = tuple(self.array(a) for a in args)
        start = time.perf_counter()
        compiled = self.jax.jit(self.jax.value_and_grad(fn)).lower(*args).compile()
        compile_s = time.perf_counter() - start
        return (
            lambda: self.jax.block_until_ready(compiled(*args)),
            compile_s,
            _xla_memory_mb(compiled),
        )

    def host(self, outputs):
        return [np.asarray(t) for t in outputs]

    def peak_mb(self, call):
        del call
        return None  # XLA's plan, recorded by `program`

    def is_out_of_memory(self, error):
        text = str(error)
        return "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower()

    def free(self):
        gc.collect()

    def svd_peer(self):
        jnp = self.jax.numpy
        return lambda e: jnp.mean(jnp.linalg.svd(e, compute_uv=False))

    def batched_svd_peer(self, classes, rows):
        jnp = self.jax.numpy

        def ole(e):
            blocks = jnp.reshape(e, (classes, rows, e.shape[-1]))
            per_class = jnp.sum(jnp.linalg.svd(blocks, compute_uv=False))
            return (per_class - jnp.sum(jnp.linalg.svd(e, compute_uv=False))) / e.shape[0]

        return ole

    def runtime(self):
        import importlib.metadata

        plugins = {}
        for name in ("jaxlib", "jax-cuda13-plugin", "jax-cuda12-plugin"):
            try:
                plugins[name] = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                pass
        return {
            "device": self.device,
            "platform": self.jax.default_backend(),
            "jax_default_matmul_precision": self.jax.config.jax_default_matmul_precision,
            **plugins,
        }


def _xla_memory_mb(compiled):
    try:
        stats = compiled.memory_analysis()
    except Exception:  # noqa: BLE001 (not every platform's client plans memory)
        return None
    if stats is None:
        return None
    total = (
        stats.temp_size_in_bytes
        + stats.argument_size_in_bytes
        + stats.output_size_in_bytes
        - stats.alias_size_in_bytes
    )
    return total / 2**20


class TorchSteps:
    """Eager forward + autograd backward on Keras' device (the GPU where there is one)."""

    name = "torch"

    def __init__(self):
        import torch

        self.torch = torch
        self.cuda = torch.cuda.is_available()
        self.device = torch.cuda.get_device_name() if self.cuda else "cpu"
        if not self.cuda:
            # The CPU runs only the tests' tiny grid: PyTorch's default threads oversubscribe a
            # shared CPU (a fit step took 5x longer on 2 cores), one thread is faster there.
            torch.set_num_threads(1)

    def array(self, value):
        return self.torch.tensor(value, device="cuda" if self.cuda else "cpu")

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def program(self, fn, *args):
        leaf, *rest = (self.array(a) for a in args)

        def call():
            e = leaf.detach().requires_grad_(True)
            value = fn(e, *rest)
            (grad,) = self.torch.autograd.grad(value, e)
            self.sync()
            return value, grad

        return call, None, None

    def host(self, outputs):
        return [t.detach().cpu().numpy() for t in outputs]

    def peak_mb(self, call):
        """The allocator's peak over one `call` (None on a CPU)."""
        if not self.cuda:
            return None
        self.free()
        self.torch.cuda.reset_peak_memory_stats()
        call()
        return self.torch.cuda.max_memory_allocated() / 2**20

    def is_out_of_memory(self, error):
        return isinstance(error, self.torch.cuda.OutOfMemoryError) or "out of memory" in str(error)

    def free(self):
        gc.collect()
        if self.cuda:
            self.torch.cuda.synchronize()
            self.torch.cuda.empty_cache()

    def svd_peer(self):
        return lambda e: self.torch.linalg.svdvals(e).mean()

    def batched_svd_peer(self, classes, rows):
        svdvals = self.torch.linalg.svdvals

        def ole(e):
            per_class = svdvals(e.reshape(classes, rows, e.shape[-1])).sum()
            return (per_class - svdvals(e).sum()) / e.shape[0]

        return ole

    def runtime(self):
        torch = self.torch
        out = {
            "device": self.device,
            "torch_cuda": torch.version.cuda,
            "allow_tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
        }
        if self.cuda:
            out["cudnn"] = torch.backends.cudnn.version()
            out["device_capability"] = list(torch.cuda.get_device_capability())
            out["device_memory_mb"] = torch.cuda.get_device_properties(0).total_memory / 2**20
        return out


# The programs of each section: (call, compile_s, memory_mb, reference or None).


def svmax_program(steps, case):
    from tf_svmax import ops

    x = unit_rows(case["b"], case["d"])
    if case["implementation"] == "peer":
        fn = steps.svd_peer()
    else:
        method = case["measurement"]
        fn = lambda e: ops.mean_singular_value(e, method=method)  # noqa: E731
    return (*steps.program(fn, x), mean_singular_value_reference(x))


def ole_program(steps, case):
    from benchmarks.reference_ole import ole_reference
    from tf_svmax import ops

    classes, n = case["classes"], case["b"]
    rows = n // classes
    x = np.random.default_rng(0).standard_normal((n, case["d"])).astype(np.float32)
    labels = np.repeat(np.arange(classes), rows).astype(np.int32)
    reference = ole_reference(labels, x.astype(np.float64))
    if case["implementation"] == "peer":
        return (*steps.program(steps.batched_svd_peer(classes, rows), x), reference)

    def fn(e, y):
        return ops.ole_loss(y, e, num_classes=classes)

    return (*steps.program(fn, x, labels), reference)


def mining_program(steps, case):
    from keras import ops

    from tf_svmax import losses

    ours = {
        "semihard": lambda y, e: losses.triplet_semihard_loss(y, e, margin=0.2),
        "hard": lambda y, e: losses.triplet_hard_loss(y, e, margin=0.2),
        "lifted": lambda y, e: losses.lifted_struct_loss(y, e, margin=1.0),
        "batch_hard": lambda y, e: losses.batch_hard_triplet_loss(y, e, margin=0.2),
        "contrastive_pairs": losses.all_pairs_contrastive_loss,
    }[case["measurement"]]
    x, y = unit_rows(case["b"], case["d"]), pk_labels(case["b"])

    def fn(e, labels):
        # Per-anchor losses return [b]; Keras' reduction is their mean.
        return ops.mean(ours(labels, e))

    return (*steps.program(fn, x, y), None)


def pml_program(steps, case):
    """pytorch-metric-learning's counterpart (the torch worker only), float32 on the same data."""
    from pytorch_metric_learning import distances, losses, miners

    name = case["measurement"]
    if name == "pml_semihard":
        miner = miners.TripletMarginMiner(margin=0.2, type_of_triplets="semihard")
        loss = losses.TripletMarginLoss(margin=0.2)
    elif name == "pml_batch_hard":
        miner, loss = miners.BatchHardMiner(), losses.TripletMarginLoss(margin=0.2)
    elif name == "pml_lifted":
        miner, loss = None, losses.LiftedStructureLoss(neg_margin=1.0, pos_margin=0.0)
    else:  # the XBM paper's all-pairs contrastive loss on cosine similarities
        miner = None
        loss = losses.ContrastiveLoss(
            pos_margin=1.0, neg_margin=0.5, distance=distances.CosineSimilarity()
        )

    def fn(e, labels):
        return loss(e, labels) if miner is None else loss(e, labels, miner(e, labels))

    x, y = unit_rows(case["b"], case["d"]), pk_labels(case["b"]).astype(np.int64)
    return (*steps.program(fn, x, y), None)


def fit_program(steps, case):
    """One `train_on_batch` of the retrieval trainer's model, loss, optimizer and metrics as
    `train_retrieval` builds them from its defaults (small_cnn, 128-d unit embeddings,
    contrastive P x 4 + SVMax at the paper's lambda, SGD with momentum 0.9 at the paper's
    schedule, the SVMax metrics), P = the case's classes, on random images of the glyph set's
    shape (32 x 32 grey), compiled with the case's `jit_compile` (the trainer's default: False)."""
    import dataclasses
    import tempfile

    from tf_svmax import metrics, models
    from trainers.retrieval.config import RetrievalConfig, resolve
    from trainers.retrieval.model import build_loss, build_optimizer, build_training_model

    with tempfile.TemporaryDirectory() as folder:  # the config checks its output folder
        config = RetrievalConfig(output_dir=folder, batch_p=case["classes"])
        config = resolve(dataclasses.replace(config, jit_compile=case["jit_compile"]))
    size = case["image_size"]
    embedding = models.build_embedding_model(
        config.backbone,
        input_shape=(size, size, 1),
        embedding_dim=config.embedding_dim,
        weights=config.weights,
    )
    model = build_training_model(config, embedding, config.batch_p)
    optimizer, _ = build_optimizer(config)
    model.compile(
        optimizer=optimizer,
        loss=build_loss(config),
        metrics=metrics.svmax_metrics(),
        jit_compile=config.jit_compile,
    )
    rng = np.random.default_rng(0)
    b = config.batch_p * config.batch_k
    images = rng.uniform(size=(b, size, size, 1)).astype(np.float32)
    labels = pk_labels(b, config.batch_k)
    start = time.perf_counter()
    model.train_on_batch(images, labels)  # builds the optimizer and (JAX) compiles the step
    compile_s = time.perf_counter() - start
    # train_on_batch returns the loss on the host: the step has ended when it returns.
    return lambda: model.train_on_batch(images, labels), compile_s, None, None


PROGRAMS = {"svmax": svmax_program, "ole": ole_program, "fit": fit_program}


def program_for(steps, case):
    if case["section"] == "mining":
        if case["implementation"] == "peer":
            return pml_program(steps, case)
        return mining_program(steps, case)
    return PROGRAMS[case["section"]](steps, case)


# Timing under a deadline.


def time_call(call, grid, deadline):
    """Median of up to ``grid["repeats"]`` calls after the warm-ups (the first call's outputs
    returned for the error check); fewer repeats when a call is slow (``seconds_per_case``) or the
    deadline is near, at least one."""
    start = time.perf_counter()
    outputs = call()
    once = time.perf_counter() - start
    for _ in range(grid["warmup"] - 1):
        start = time.perf_counter()
        call()
        once = time.perf_counter() - start
    fit = int((deadline - time.time() - MIN_CASE_S) / max(once, 1e-6))
    repeats = max(1, min(grid["repeats"], max(3, int(grid["seconds_per_case"] / max(once, 1e-6)))))
    repeats = max(1, min(repeats, fit))
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - start)
    return outputs, {**_common.summarize(seconds), "warmup": grid["warmup"]}


def predicted_seconds(case, previous, grid):
    """What `case` will take, from its series' last measured (smaller) case: the mining losses
    grow as b squared, the spectral ones at most as b x d. None without a measured case."""
    if previous is None or previous.get("status") != "ok":
        return None
    if case["section"] == "mining":
        growth = (case["b"] / previous["b"]) ** 2
    else:
        growth = case["b"] * case["d"] / (previous["b"] * previous["d"])
    once = previous["median_ms"] / 1e3 * growth
    return (previous.get("compile_s") or 0.0) + once * (grid["warmup"] + 3)


def skip_reason(case, previous, grid, deadline):
    """Why `case` is not started (None: it is). A series whose smaller case ran out of memory
    (or was skipped for it) is skipped above it; nothing starts too close to the deadline."""
    if previous is not None and previous["status"] == "out of memory":
        return f"out of memory at b={previous['b']} and above"
    if previous is not None and previous.get("reason", "").startswith("out of memory at"):
        return previous["reason"]
    left = deadline - time.time()
    if left < MIN_CASE_S:
        return f"time budget: {max(left, 0):.1f} s left"
    need = predicted_seconds(case, previous, grid)
    if need is not None and need > left - MIN_CASE_S:
        return f"time budget: predicted {need:.1f} s, {left:.1f} s left"
    return None


def measure(steps, case, grid, deadline):
    """One case's row: times, memory, errors against the float64 reference, or why not."""
    row = {"backend": steps.name, "device": steps.device, **case}
    try:
        call, compile_s, memory_mb, reference = program_for(steps, case)
        outputs, timing = time_call(call, grid, deadline)
        row.update(timing, status="ok", compile_s=compile_s)
        if memory_mb is None:
            memory_mb = steps.peak_mb(call)
        row["peak_memory_mb"] = memory_mb
        row["memory_method"] = _memory_method(steps, memory_mb)
        if case["section"] != "fit":
            host = steps.host(outputs)
            row["value"] = float(host[0])  # compare the peers' definitions
            if reference is not None:
                row.update(relative_errors(host, reference))
    except ImportError as error:
        row.update(status="absent", reason=f"{type(error).__name__}: {error}"[:300])
    except Exception as error:  # noqa: BLE001 (recorded; the run goes on)
        kind = "out of memory" if steps.is_out_of_memory(error) else "failed"
        first = (str(error).strip().splitlines() or [""])[0]
        row.update(status=kind, reason=f"{type(error).__name__}: {first}"[:300])
    finally:
        call = outputs = None
        steps.free()
    return row


def _memory_method(steps, memory_mb):
    if memory_mb is None:
        return "none"
    if steps.name == "jax":
        return "XLA memory_analysis: temp + arguments + outputs"
    return "torch.cuda.max_memory_allocated over one step"


def run(spec):
    """Measures every case of the spec's plan in turn, appending one JSON line per case."""
    grid = GRIDS[spec["grid"]]
    steps = {"jax": JaxSteps, "torch": TorchSteps}[spec["backend"]]()
    from tf_svmax import records

    deadline = spec["deadline"]
    with open(spec["rows_path"], "a") as out:

        def emit(record):
            out.write(json.dumps(record, default=_plain) + "\n")
            out.flush()

        emit({"environment": {**records.environment(), "runtime": steps.runtime()}})
        last = {}  # (section, measurement) -> the series' last measured (or out of memory) row
        for case in plan(grid, spec["backend"]):
            series = (case["section"], case["measurement"])
            previous = last.get(series)
            reason = skip_reason(case, previous, grid, deadline)
            if reason is None:
                print(f"[gpu:{steps.name}] {_describe(case)}", file=sys.stderr, flush=True)
                row = measure(steps, case, grid, deadline)
            else:
                row = {"backend": steps.name, "device": steps.device, **case}
                row.update(status="skipped", reason=reason)
            if row["status"] != "skipped" or row["reason"].startswith("out of memory"):
                last[series] = row
            emit({"row": row})


def _describe(case):
    sizes = ", ".join(f"{k}={case[k]}" for k in ("b", "d", "classes") if k in case)
    return f"{case['section']}: {case['measurement']} ({sizes})"


def _plain(value):
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: KERAS_BACKEND=jax|torch python -m benchmarks.gpu_worker SPEC.json")
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    if os.environ.get("KERAS_BACKEND") != spec["backend"]:
        sys.exit(f"KERAS_BACKEND={os.environ.get('KERAS_BACKEND')!r}; the spec says {spec}")
    run(spec)
