"""Training-step cost of the two-head architecture against the single softmax head
(dissertation Fig. 5.12: "increases the training time by ≈ 2 %").

One SGD step (`train_on_batch`, b = P x K = 8 x 4 = 32) of the two-head trainer's own model and
losses (`trainers.two_head.build_model` / `build_losses`) in every mode: ``softmax`` (single
head), ``center``, ``semi_hard``, ``hard`` (embedding head on the flattened last map, d = 256)
and ``ole`` (single head, OLÉ on the pooled features); the overhead is the ratio of median step
times to ``softmax``. XLA off (OLÉ refuses it). Backbones: ``small_cnn_bn`` on 32 x 32 grey
images (the embedded glyph set's), ``resnet50`` on 224 x 224 RGB (the dissertation's, random
weights: the step costs the same).

    python -m benchmarks.two_head_overhead --output_dir benchmarks/results/two_head_overhead
"""

import dataclasses
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from benchmarks import _common  # noqa: E402
from trainers import two_head  # noqa: E402  (light: its training code loads when used)

FLAGS = flags.FLAGS
flags.DEFINE_list("backbones", ["small_cnn_bn", "resnet50"], "Backbones to time.")
flags.DEFINE_list("modes", list(two_head.MODES), "Two-head trainer modes to time.")
flags.DEFINE_integer("num_classes", 142, "Classes of the classification head.", lower_bound=2)
flags.DEFINE_integer("repeats", 20, "Timed steps per mode (after 3 warm-up steps).", lower_bound=1)
flags.DEFINE_string("output_dir", "benchmarks/results/two_head_overhead", "Where results go.")

PROGRAM = "two_head_overhead"
# backbone -> input shape of its benchmark batch.
INPUTS = {"small_cnn_bn": (32, 32, 1), "small_cnn": (32, 32, 1), "resnet50": (224, 224, 3)}


def time_mode(backbone, mode, num_classes, repeats):
    import keras  # here, not at the top: a refused flag (exit 2) does not wait seconds for it

    config = two_head.resolve(
        two_head.TwoHeadConfig(
            output_dir="unused",
            dataset="glyphs" if backbone.startswith("small") else "folder",
            data_dir=None if backbone.startswith("small") else "unused",
            backbone=backbone,
            mode=mode,
        )
    )
    shape = INPUTS[backbone]
    split = {"input_shape": shape, "num_classes": num_classes}
    keras.utils.set_random_seed(0)
    model = two_head.build_model(config, split)
    loss, weights, _ = two_head.build_losses(config, num_classes)
    model.compile(
        optimizer=keras.optimizers.SGD(0.01, momentum=0.9),
        loss=loss,
        loss_weights=weights,
        jit_compile=False,
    )
    rng = np.random.default_rng(0)
    batch = config.batch_p * config.batch_k
    x = rng.uniform(0, 255 if shape[-1] == 3 else 1, size=(batch, *shape)).astype(np.float32)
    labels = np.repeat(rng.choice(num_classes, config.batch_p, replace=False), config.batch_k)
    y = {name: labels for name in model.output_names}
    timing = _common.time_calls(lambda: model.train_on_batch(x, y), repeats, warmup=3)
    params = int(sum(np.prod(w.shape) for w in model.trainable_weights))
    return {"backbone": backbone, "mode": mode, "batch": batch, "parameters": params, **timing}


def main(argv):
    del argv
    unknown = [m for m in FLAGS.modes if m not in two_head.MODES]
    unknown += [b for b in FLAGS.backbones if b not in INPUTS]
    if unknown or "softmax" not in FLAGS.modes:
        raise app.UsageError(
            f"--modes from {list(two_head.MODES)} including softmax (the baseline), "
            f"--backbones from {list(INPUTS)}; received {unknown or FLAGS.modes}.",
            exitcode=2,
        )
    rows = []
    for backbone in FLAGS.backbones:
        for mode in FLAGS.modes:
            _common.progress(PROGRAM, f"{backbone} {mode}")
            rows.append(time_mode(backbone, mode, FLAGS.num_classes, FLAGS.repeats))
    base = {r["backbone"]: r["median_ms"] for r in rows if r["mode"] == "softmax"}
    for r in rows:
        r["overhead_ratio"] = r["median_ms"] / base[r["backbone"]]
    out = FLAGS.output_dir
    config = {
        "backbones": FLAGS.backbones,
        "modes": FLAGS.modes,
        "num_classes": FLAGS.num_classes,
        "repeats": FLAGS.repeats,
        "defaults": dataclasses.asdict(two_head.TwoHeadConfig(output_dir="unused")),
    }
    _common.write_records(out, PROGRAM, config, rows)
    print("| backbone | mode | parameters | step ms (median) | p10–p90 ms | ÷ softmax |")
    print("|---|---|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['backbone']} | {r['mode']} | {r['parameters']:,} | {r['median_ms']:.1f} | "
            f"{r['p10_ms']:.1f}–{r['p90_ms']:.1f} | {r['overhead_ratio']:.3f} |"
        )
    print(f"wrote {out}/two_head_overhead.csv and two_head_overhead.json")


if __name__ == "__main__":
    _common.run(main)
