"""Cost of the cross-batch memory (`losses.CrossBatchMemory`) in a training step: the same
model and loss with a filled memory of M rows against without one, in one process, the settings
interleaved (repeat r times every setting once, in turn), so that a shared machine's load falls
on all of them alike.

The step: Keras' own (`train_on_batch`) on a Dense(512 -> d) embedding with unit-norm rows and
the memory layer, SGD; the loss mines the batch's b anchors against b + M references, so its
cost grows with M while the network's does not (with a convolutional backbone, as in
`train_retrieval`, the memory's share of the step is smaller). Before timing, each memory is
filled (ceil(M / b) untimed steps).

    python -m benchmarks.xbm_overhead --output_dir benchmarks/results/xbm_overhead
"""

import math
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

from benchmarks import _common  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_list("batches", ["32", "144"], "Batch sizes b (P x K with K = 4).")
flags.DEFINE_list("memory_sizes", ["0", "1024"], "Memory rows M (0: no memory).")
flags.DEFINE_list(
    "losses",
    ["contrastive_pairs", "triplet_semihard", "lifted"],
    "Wrapped losses: contrastive_pairs (AllPairsContrastiveLoss), triplet_semihard, lifted.",
)
flags.DEFINE_integer("embedding_dim", 128, "Embedding dimension d.", lower_bound=1)
flags.DEFINE_integer("repeats", 20, "Timed steps per setting.", lower_bound=1)
flags.DEFINE_string("output_dir", "benchmarks/results/xbm_overhead", "Where results go.")

PROGRAM = "xbm_overhead"
INPUT_DIM = 512
K = 4  # images per class in a batch


def _loss(name):
    from tf_svmax import losses

    return {
        "contrastive_pairs": losses.AllPairsContrastiveLoss,
        "triplet_semihard": losses.TripletSemiHardLoss,
        "lifted": losses.LiftedStructLoss,
    }[name]()


def _setting(loss_name, b, memory, dim):
    """A compiled model and one batch; the memory filled when M > 0."""
    import keras
    import numpy as np

    from tf_svmax import losses

    keras.utils.set_random_seed(0)
    layers = [
        keras.Input((INPUT_DIM,)),
        keras.layers.Dense(dim),
        keras.layers.UnitNormalization(),
    ]
    loss = _loss(loss_name)
    if memory:
        loss = losses.CrossBatchMemory(loss, memory_size=memory)
        layers.append(loss.memory)
    model = keras.Sequential(layers)
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss=loss, jit_compile=False)
    rng = np.random.default_rng(b)
    x = rng.standard_normal((b, INPUT_DIM)).astype("float32")
    y = np.repeat(np.arange(b // K), K).astype("int64")
    for _ in range(max(2, math.ceil(memory / b) + 1)):  # tracing, and the memory filled
        model.train_on_batch(x, y)
    return model, x, y


def main(argv):
    del argv
    try:
        batches = _common.parse_ints(FLAGS.batches, "--batches")
        memories = [int(v) for v in FLAGS.memory_sizes]
        if any(m < 0 for m in memories):
            raise ValueError(f"--memory_sizes must be >= 0; received {FLAGS.memory_sizes}")
        unknown = [
            n for n in FLAGS.losses if n not in ("contrastive_pairs", "triplet_semihard", "lifted")
        ]
        if unknown or not FLAGS.losses:
            raise ValueError(
                "--losses must name contrastive_pairs, triplet_semihard or lifted; received "
                f"{FLAGS.losses}"
            )
        if any(b % K for b in batches):
            raise ValueError(f"--batches must be multiples of {K}; received {FLAGS.batches}")
    except ValueError as error:
        raise app.UsageError(str(error), exitcode=2) from None

    settings = {}
    for name in FLAGS.losses:
        for b in batches:
            for m in memories:
                _common.progress(PROGRAM, f"building {name} b={b} M={m}")
                settings[(name, b, m)] = _setting(name, b, m, FLAGS.embedding_dim)
    times = {key: [] for key in settings}
    for _ in range(FLAGS.repeats):
        for key, (model, x, y) in settings.items():
            start = time.perf_counter()
            model.train_on_batch(x, y)
            times[key].append(time.perf_counter() - start)
    rows = []
    for (name, b, m), seconds in times.items():
        row = {"loss": name, "batch": b, "memory": m, **_common.summarize(seconds)}
        base = _common.summarize(times[(name, b, 0)])["median_ms"] if 0 in memories else None
        row["ratio_to_no_memory"] = row["median_ms"] / base if base else None
        rows.append(row)
    config = {
        "batches": batches,
        "memory_sizes": memories,
        "losses": FLAGS.losses,
        "embedding_dim": FLAGS.embedding_dim,
        "repeats": FLAGS.repeats,
        "model": f"Dense({INPUT_DIM} -> d) + UnitNormalization (+ the memory layer)",
        "step": "keras train_on_batch, SGD; settings interleaved per repeat",
    }
    _common.write_records(FLAGS.output_dir, PROGRAM, config, rows)
    print("| loss | b | M | median ms | p10–p90 ms | × no memory |")
    print("|---|---:|---:|---:|---|---:|")
    for row in rows:
        ratio = row["ratio_to_no_memory"]
        print(
            f"| {row['loss']} | {row['batch']} | {row['memory']} | {row['median_ms']:.2f} | "
            f"{row['p10_ms']:.2f}–{row['p90_ms']:.2f} | "
            f"{'–' if ratio is None else f'{ratio:.2f}'} |"
        )


if __name__ == "__main__":
    _common.run(main)
