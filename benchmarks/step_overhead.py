"""Training-step overhead of SVMax and OLE on a real backbone (dissertation Fig. 3.6 right).

One SGD step (`train_on_batch`) of MobileNetV2 (random init) + a Dense embedding head with
L2-normalized output, with the ranking loss alone (the papers' P x 4 contrastive loss), with
+ SVMax (lambda 1) and with + OLE; the overhead is the ratio of median step times. XLA is off
(the library refuses OLE under XLA, and on a CPU XLA's SVD would dominate).

    python -m benchmarks.step_overhead --output_dir benchmarks/results/step_overhead

Cross grid: b in --batch_sizes at d = --sweep_dim, d in --dims at b = --sweep_batch.
"""

import itertools
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from benchmarks import _common  # noqa: E402

# Keras and tf_svmax are imported where they are used: a refused flag (exit 2) does not wait
# seconds for them.

FLAGS = flags.FLAGS
flags.DEFINE_list("batch_sizes", ["72", "144", "288"], "b swept at d = --sweep_dim (x 8).")
flags.DEFINE_list("dims", ["64", "128", "256"], "d swept at b = --sweep_batch.")
flags.DEFINE_integer("sweep_dim", 128, "d used while sweeping b.")
flags.DEFINE_integer("sweep_batch", 144, "b used while sweeping d.")
flags.DEFINE_integer("image_size", 224, "Input resolution (MobileNetV2 default 224).")
flags.DEFINE_enum(
    "backbone",
    "mobilenet_v2",
    ["mobilenet_v2", "small_cnn"],
    "Backbone; small_cnn is for smoke tests.",
)
flags.DEFINE_integer("repeats", 3, "Timed steps per configuration (after 2 warm-up steps).")
flags.DEFINE_string("output_dir", "benchmarks/results/step_overhead", "Where results go.")

PROGRAM = "step_overhead"


def build_model(backbone, image_size, dim):
    import keras

    inputs = keras.Input((image_size, image_size, 3))
    if backbone == "mobilenet_v2":
        features = keras.applications.MobileNetV2(
            input_shape=(image_size, image_size, 3), include_top=False, weights=None, pooling="avg"
        )(inputs)
    else:
        x = keras.layers.Conv2D(8, 3, strides=2, activation="relu")(inputs)
        features = keras.layers.GlobalAveragePooling2D()(x)
    embeddings = keras.layers.UnitNormalization()(keras.layers.Dense(dim)(features))
    return keras.Model(inputs, embeddings)


def loss_variants():
    from tf_svmax import losses

    return {
        "ranking": lambda: losses.PKContrastiveLoss(),
        "ranking+svmax": lambda: losses.RegularizedLoss(
            losses.PKContrastiveLoss(), [losses.SVMaxLoss(lambda_=1.0)]
        ),
        "ranking+ole": lambda: losses.RegularizedLoss(
            losses.PKContrastiveLoss(), [losses.OLELoss()]
        ),
    }


def run(configs, backbone, image_size, repeats):
    import keras

    rows = []
    rng = np.random.default_rng(0)
    for b, d in configs:
        x = rng.uniform(size=(b, image_size, image_size, 3)).astype(np.float32)
        y = np.repeat(np.arange(b // 4), 4)
        for name, make in loss_variants().items():
            _common.progress(PROGRAM, f"b={b} d={d} {name}")
            keras.utils.set_random_seed(0)
            model = build_model(backbone, image_size, d)
            model.compile(keras.optimizers.SGD(1e-3, momentum=0.9), loss=make(), jit_compile=False)
            timing = _common.time_calls(
                lambda m=model, x=x, y=y: m.train_on_batch(x, y), repeats, warmup=2
            )
            rows.append(
                {
                    "b": b,
                    "d": d,
                    "loss": name,
                    "backbone": backbone,
                    "image_size": image_size,
                    **timing,
                }
            )
    return rows


def overheads(rows):
    base = {(r["b"], r["d"]): r["median_ms"] for r in rows if r["loss"] == "ranking"}
    return [
        {
            "b": r["b"],
            "d": r["d"],
            "loss": r["loss"],
            "overhead_ratio": r["median_ms"] / base[(r["b"], r["d"])],
        }
        for r in rows
        if r["loss"] != "ranking"
    ]


def main(argv):
    del argv
    try:
        batch_sizes = _common.parse_ints(FLAGS.batch_sizes, "batch_sizes")
        dims = _common.parse_ints(FLAGS.dims, "dims")
        configs = sorted(
            {(b, FLAGS.sweep_dim) for b in batch_sizes} | {(FLAGS.sweep_batch, d) for d in dims}
        )
        for b, _ in configs:
            if b % 8:
                raise ValueError(
                    f"Invalid value for flag `batch_sizes`. Expected multiples of 8 "
                    f"(P x 4 contrastive batches, P even). Received: {b}"
                )
    except ValueError as error:
        raise app.UsageError(str(error), exitcode=2) from None
    rows = run(configs, FLAGS.backbone, FLAGS.image_size, FLAGS.repeats)
    ratios = overheads(rows)
    out = FLAGS.output_dir
    config = {
        "configs": configs,
        "backbone": FLAGS.backbone,
        "image_size": FLAGS.image_size,
        "repeats": FLAGS.repeats,
    }
    _common.write_records(out, PROGRAM, config, rows, overheads=ratios)
    series = {}
    for name in loss_variants():
        pts = sorted(
            (r["b"], r["median_ms"])
            for r in rows
            if r["loss"] == name and r["d"] == FLAGS.sweep_dim
        )
        series[name] = tuple(zip(*pts, strict=True)) if pts else ((), ())
    _common.line_plot(
        os.path.join(out, "step_time_vs_b.png"),
        series,
        f"b (d = {FLAGS.sweep_dim})",
        "train step, median ms",
        f"{FLAGS.backbone} {FLAGS.image_size}x{FLAGS.image_size} training step",
    )
    print("| b | d | ranking ms | +SVMax ms | +OLE ms | SVMax overhead | OLE overhead |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    by = {(r["b"], r["d"], r["loss"]): r["median_ms"] for r in rows}
    for ((b, d),) in itertools.product(configs):
        base = by[(b, d, "ranking")]
        sv, ole = by[(b, d, "ranking+svmax")], by[(b, d, "ranking+ole")]
        print(
            f"| {b} | {d} | {base:.0f} | {sv:.0f} | {ole:.0f} | {sv / base:.3f}x | "
            f"{ole / base:.3f}x |"
        )
    print(f"wrote {out}/step_overhead.csv, step_overhead.json and step_time_vs_b.png")


if __name__ == "__main__":
    _common.run(main)
