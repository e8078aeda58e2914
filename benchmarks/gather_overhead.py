"""Cost of global-batch losses under tf.distribute: one training step with the loss evaluated on
the gathered global batch (`global_batch=True`, the default) against per-replica evaluation
(`global_batch=False`) and against one device, on N logical CPU devices.

The step: a Dense(512 -> 128) embedding with unit-norm rows (``--model=small_cnn``: the glyph
trainer's convolutional network on 32 x 32 x 3 images instead), `RegularizedLoss(
TripletHardLoss(margin=0.2), [SVMaxLoss(lambda_=0.1)])` (batch-hard mining, b x b), SGD,
Keras' own step function (`fit`'s) on a global batch of b rows from a distributed iterator
(b = 144 ... 1024, split evenly across the replicas; `train_on_batch` would give every replica
the whole batch, which is how the runs before 2026-11-25's third session measured it). Global
evaluation costs an all-gather of the embeddings and labels per loss term; each replica mines
its own b/N anchors against all b rows, and the SVD is repeated on every replica. Not
`TripletSemiHardLoss`: its tensorflow-addons formulation materializes b x b x b tensors, and at
b = 1024 two replicas doing so at once exhausted this 24 GB machine.

``--loss`` picks another loss split by anchors: ``lifted`` (`LiftedStructLoss`, margin 1) or
``proxy_anchor`` (`ProxyAnchorLoss` on a `CosineProxies` head of `PROXIES` classes, the labels
taken modulo). ``--compare_unsplit`` adds the mode ``global_unsplit``: the same loss with its
anchor split switched off (every replica evaluates all b rows, the code before the split), in
the same process for a side-by-side before/after.

Logical CPU devices share the machine's cores, so these numbers measure the code path's overhead,
not a multi-device speed-up; GPU numbers are not yet measured. Each replica count runs in its own
process (logical devices are fixed when TensorFlow starts; collective keys of two strategies in
one process collide).

    python -m benchmarks.gather_overhead --output_dir benchmarks/results/gather_overhead
"""

import functools
import json
import os
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags  # noqa: E402

from benchmarks import _common  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_list("replicas", ["1", "2", "4"], "Logical CPU device counts (1: one device).")
flags.DEFINE_list("batches", ["144", "256", "512", "1024"], "Global batch sizes b.")
flags.DEFINE_integer("embedding_dim", 128, "Embedding dimension d.", lower_bound=1)
flags.DEFINE_integer(
    "repeats", 10, "Timed steps per setting (after 3 warm-up steps).", lower_bound=1
)
flags.DEFINE_string("output_dir", "benchmarks/results/gather_overhead", "Where results go.")
flags.DEFINE_integer("child_replicas", 0, "Internal: time this replica count in this process.")
flags.DEFINE_enum(
    "loss", "triplet_hard_svmax", ["triplet_hard_svmax", "lifted", "proxy_anchor"], "The loss."
)
flags.DEFINE_bool(
    "compare_unsplit", False, "Also time the global batch with the anchor split switched off."
)
flags.DEFINE_enum(
    "model",
    "dense",
    ["dense", "small_cnn"],
    "The embedding network: dense (Dense(512 -> d), the loss is most of the step) or small_cnn "
    "(the glyph trainer's network on 32 x 32 x 3 images, as `train_retrieval` builds it).",
)

PROGRAM = "gather_overhead"
INPUT_DIM = 512
# Classes of the proxy-anchor head (CUB-200's training half).
PROXIES = 100
# The glyph trainer's image size (`train_retrieval --dataset=glyphs`).
IMAGE_SHAPE = (32, 32, 3)
MODEL_NAMES = {
    "dense": f"Dense({INPUT_DIM} -> d) + UnitNormalization",
    "small_cnn": "models.build_embedding_model('small_cnn', input_shape=(32, 32, 3))",
}
LOSS_NAMES = {
    "triplet_hard_svmax": "RegularizedLoss(TripletHardLoss(0.2), [SVMaxLoss(0.1)])",
    "lifted": "LiftedStructLoss(1.0)",
    "proxy_anchor": f"ProxyAnchorLoss() on CosineProxies({PROXIES})",
}


def make_loss(name, global_batch, split):
    """The timed loss; ``split=False`` switches its anchor split off (on this instance)."""
    from tf_svmax import losses

    if name == "lifted":
        loss = losses.LiftedStructLoss(margin=1.0, global_batch=global_batch)
        parts = [loss]
    elif name == "proxy_anchor":
        loss = losses.ProxyAnchorLoss(global_batch=global_batch)
        parts = [loss]
    else:
        parts = [
            losses.TripletHardLoss(margin=0.2, global_batch=global_batch),
            losses.SVMaxLoss(lambda_=0.1, global_batch=global_batch),
        ]
        loss = losses.RegularizedLoss(parts[0], parts[1:])
    if not split:
        for part in parts:
            part.splits_anchors = False
    return loss


# Each network's input shape (a model is built only inside the strategy's scope, per mode).
INPUT_SHAPES = {"dense": (INPUT_DIM,), "small_cnn": IMAGE_SHAPE}


def embedding_network(model_name, dim):
    """The timed network from `INPUT_SHAPES[model_name]` inputs to unit-norm `[b, dim]`
    embeddings."""
    import keras

    from tf_svmax import models

    if model_name == "small_cnn":
        return models.build_embedding_model("small_cnn", input_shape=IMAGE_SHAPE, embedding_dim=dim)
    return keras.Sequential(
        [
            keras.Input(INPUT_SHAPES["dense"]),
            keras.layers.Dense(dim),
            keras.layers.UnitNormalization(),
        ]
    )


def time_in_this_process(
    replicas, batches, dim, repeats, loss_name, compare_unsplit, model_name="dense"
):
    """Rows of step times for `replicas` logical CPUs (configured before TensorFlow starts)."""
    import tensorflow as tf

    if replicas > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * replicas
        )
    import keras
    import numpy as np

    from tf_svmax import models

    strategy = (
        tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(replicas)])
        if replicas > 1
        else tf.distribute.get_strategy()
    )
    rng = np.random.default_rng(0)
    rows = []
    for batch in batches:
        x = rng.standard_normal((batch, *INPUT_SHAPES[model_name])).astype(np.float32)
        y = np.repeat(np.arange(batch // 4), 4).astype(np.int64)
        if loss_name == "proxy_anchor":
            y = y % PROXIES
        modes = ("global", "per_replica") if replicas > 1 else ("single",)
        if replicas > 1 and compare_unsplit:
            modes += ("global_unsplit",)
        for mode in modes:
            _common.progress(PROGRAM, f"{replicas} replica(s), b = {batch}, {mode}")
            global_batch = mode != "per_replica"
            with strategy.scope():
                keras.utils.set_random_seed(0)
                model = embedding_network(model_name, dim)
                if loss_name == "proxy_anchor":
                    model = keras.Sequential([model, models.CosineProxies(PROXIES)])
                model.compile(
                    keras.optimizers.SGD(0.01),
                    loss=make_loss(loss_name, global_batch, split=mode != "global_unsplit"),
                    jit_compile=False,
                )
            # fit's own step function on a distributed iterator, which splits each global batch
            # across the replicas. Not `train_on_batch`: under a strategy, Keras 3 hands the
            # whole batch to every replica (N copies: a global batch of N x b rows).
            data = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch).repeat()
            iterator = iter(strategy.experimental_distribute_dataset(data))
            model.make_train_function()
            step = functools.partial(model.train_function, iterator)
            timing = _common.time_calls(step, repeats, warmup=3)
            rows.append({"replicas": replicas, "batch": batch, "dim": dim, "mode": mode, **timing})
    return rows


def main(argv):
    del argv
    try:
        replica_counts = _common.parse_ints(FLAGS.replicas, "replicas")
        batches = _common.parse_ints(FLAGS.batches, "batches")
    except ValueError as error:
        raise app.UsageError(str(error), exitcode=2) from None
    if any(b % r for b in batches for r in replica_counts):
        raise app.UsageError(
            f"--replicas must divide every --batches; received {replica_counts}, {batches}.",
            exitcode=2,
        )
    if FLAGS.child_replicas:
        rows = time_in_this_process(
            FLAGS.child_replicas,
            batches,
            FLAGS.embedding_dim,
            FLAGS.repeats,
            FLAGS.loss,
            FLAGS.compare_unsplit,
            FLAGS.model,
        )
        print(json.dumps(rows))
        return
    rows = []
    for replicas in replica_counts:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.gather_overhead",
                f"--child_replicas={replicas}",
                f"--batches={','.join(map(str, batches))}",
                f"--embedding_dim={FLAGS.embedding_dim}",
                f"--repeats={FLAGS.repeats}",
                f"--loss={FLAGS.loss}",
                f"--compare_unsplit={FLAGS.compare_unsplit}",
                f"--model={FLAGS.model}",
            ],
            stdout=subprocess.PIPE,
            text=True,
            check=True,
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        )
        rows += json.loads(done.stdout.strip().splitlines()[-1])
    single = {r["batch"]: r["median_ms"] for r in rows if r["mode"] == "single"}
    per_replica = {
        (r["replicas"], r["batch"]): r["median_ms"] for r in rows if r["mode"] == "per_replica"
    }
    for r in rows:
        if r["batch"] in single:
            r["vs_single_device"] = r["median_ms"] / single[r["batch"]]
        if r["mode"] in ("global", "global_unsplit"):
            r["vs_per_replica"] = r["median_ms"] / per_replica[(r["replicas"], r["batch"])]
    out = FLAGS.output_dir
    config = {
        "replicas": replica_counts,
        "batches": batches,
        "embedding_dim": FLAGS.embedding_dim,
        "model": MODEL_NAMES[FLAGS.model],
        "repeats": FLAGS.repeats,
        "loss": LOSS_NAMES[FLAGS.loss],
        "compare_unsplit": FLAGS.compare_unsplit,
        "devices": "logical CPU devices sharing one machine's cores",
    }
    _common.write_records(out, PROGRAM, config, rows)
    print("| replicas | b | mode | step ms (median) | p10–p90 ms | ÷ per-replica | ÷ one device |")
    print("|---:|---:|---|---:|---:|---:|---:|")
    for r in rows:
        ratio = f"{r['vs_per_replica']:.2f}" if "vs_per_replica" in r else "–"
        single_ratio = f"{r['vs_single_device']:.2f}" if "vs_single_device" in r else "–"
        print(
            f"| {r['replicas']} | {r['batch']} | {r['mode']} | {r['median_ms']:.1f} | "
            f"{r['p10_ms']:.1f}–{r['p90_ms']:.1f} | {ratio} | {single_ratio} |"
        )
    print(f"wrote {out}/gather_overhead.csv and gather_overhead.json")


if __name__ == "__main__":
    _common.run(main)
