"""The trainers' two checkpoint formats on TensorFlow (issue 57 item 2): save and restore time
and bytes on disk of (a) `tf.train.Checkpoint` through a `tf.train.CheckpointManager` (the
harness' TensorFlow format until issue 57, now read only to continue an earlier version's
run; restored by `Checkpoint.restore(...).assert_existing_objects_matched()`, or by the old
harness' `restore_newest_readable` where that exists, as in the committed record, measured
before the change) and (b) Keras' own weights file with a step record
(`trainers.harness.checkpoints.WeightsCheckpoints`, the trainers' one format since), for

- ``main``: the main job's training model as `train_retrieval` builds it by default (small_cnn
  on the embedded glyph set, its loss and SGD optimizer), the optimizer built;
- ``resnet50``: a large backbone, `models.build_embedding_model("resnet50", weights=None)` at
  224 x 224 x 3 with a 128-d head, SGD with momentum, built.

Each round saves one checkpoint of each format into a fresh folder and restores it into the
same model, the formats taking turns at going first, so that a shared machine's load falls on
both alike; the record gives each format's median over the rounds and the ratio of the
medians. The restore reads files just written (the page cache holds them for both formats).

    python -m benchmarks.checkpoint_formats --output_dir benchmarks/results/checkpoint_formats
"""

import os
import shutil
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["KERAS_BACKEND"] = "tensorflow"  # the measurement is of TensorFlow's formats

from absl import app, flags  # noqa: E402

from benchmarks import _common  # noqa: E402

PROGRAM = "checkpoint_formats"
MODELS = ("main", "resnet50")
FORMATS = ("tf_train_checkpoint", "keras_weights")

FLAGS = flags.FLAGS
flags.DEFINE_list("models", list(MODELS), f"Models to checkpoint, of {list(MODELS)}.")
flags.DEFINE_integer("rounds", 7, "Interleaved rounds (one save + restore per format).", 1)
flags.DEFINE_string(
    "note", "", "What the record should say of the machine's conditions (load), verbatim."
)
flags.DEFINE_string("output_dir", "benchmarks/results/checkpoint_formats", "Where results go.")


def _main_model(folder):
    """The main job's compiled training model (train_retrieval's defaults), optimizer built."""
    from trainers.retrieval.config import RetrievalConfig
    from trainers.retrieval.train import _job, setup

    config, split, embedding_model, distribution = setup(
        RetrievalConfig(output_dir=folder, verbose=0)
    )
    evaluated = (embedding_model, lambda: None)
    job = _job(config, split, embedding_model, (), evaluated, distribution)
    job.model.optimizer.build(job.model.trainable_variables)
    return job.model


def _resnet50():
    import keras

    from tf_svmax import models

    model = models.build_embedding_model(
        "resnet50", input_shape=(224, 224, 3), embedding_dim=128, weights=None
    )
    model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9), loss="mse")
    model.optimizer.build(model.trainable_variables)
    return model


def _folder_bytes(folder):
    return sum(
        os.path.getsize(os.path.join(root, name))
        for root, _, names in os.walk(folder)
        for name in names
    )


def _tf_train(model, folder, step):
    """``(save_seconds, restore_seconds, bytes)`` of one tf.train checkpoint."""
    import tensorflow as tf

    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
    manager = tf.train.CheckpointManager(checkpoint, folder, max_to_keep=2)
    start = time.perf_counter()
    manager.save(checkpoint_number=step)
    saved = time.perf_counter() - start
    size = _folder_bytes(folder)
    start = time.perf_counter()
    try:
        from trainers.harness.checkpoints import restore_newest_readable
    except ImportError:  # since issue 57 the harness reads this format only for old runs
        restored = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
        restored.restore(tf.train.latest_checkpoint(folder)).assert_existing_objects_matched()
    else:
        restore_newest_readable(
            tf.train.Checkpoint(model=model, optimizer=model.optimizer), folder, 2
        )
    return saved, time.perf_counter() - start, size


def _keras_weights(model, folder, step):
    """``(save_seconds, restore_seconds, bytes)`` of one WeightsCheckpoints checkpoint."""
    try:
        from trainers.harness.checkpoints import WeightsCheckpoints
    except ImportError:  # before issue 57 it was the JAX and PyTorch runtime's
        from trainers.harness.keras_runtime import WeightsCheckpoints

    checkpoints = WeightsCheckpoints(model, folder, 2)
    start = time.perf_counter()
    checkpoints.save(step)
    saved = time.perf_counter() - start
    size = _folder_bytes(folder)
    start = time.perf_counter()
    WeightsCheckpoints(model, folder, 2)  # restores the newest readable
    return saved, time.perf_counter() - start, size


def main(argv):
    del argv
    unknown = [m for m in FLAGS.models if m not in MODELS]
    if unknown or not FLAGS.models or len(set(FLAGS.models)) != len(FLAGS.models):
        raise app.UsageError(
            f"--models takes distinct names of {list(MODELS)}; received "
            f"--models={','.join(FLAGS.models)}.",
            exitcode=2,
        )
    import keras
    import numpy as np

    scratch = tempfile.mkdtemp(prefix=f"{PROGRAM}-")
    try:
        rows = []
        for name in FLAGS.models:
            _common.progress(PROGRAM, f"building {name}")
            model = _main_model(os.path.join(scratch, "run")) if name == "main" else _resnet50()
            # The restore must reach the optimizer's step: a known value, not 0.
            step = 1234
            model.optimizer.iterations.assign(step)
            parameters = int(sum(np.prod(v.shape) for v in model.weights))
            measures = {f: {"save": [], "restore": [], "bytes": []} for f in FORMATS}
            for r in range(FLAGS.rounds):
                order = FORMATS if r % 2 == 0 else FORMATS[::-1]
                for fmt in order:
                    folder = os.path.join(scratch, f"{name}-{fmt}-{r}")
                    save_s, restore_s, size = (_tf_train if fmt == FORMATS[0] else _keras_weights)(
                        model, folder, step
                    )
                    found = int(keras.ops.convert_to_numpy(model.optimizer.iterations))
                    if found != step:
                        raise RuntimeError(f"{fmt} restored step {found}, not {step}")
                    shutil.rmtree(folder)
                    for key, value in (("save", save_s), ("restore", restore_s), ("bytes", size)):
                        measures[fmt][key].append(value)
                _common.progress(PROGRAM, f"{name}: round {r + 1}/{FLAGS.rounds}")
            for fmt in FORMATS:
                m = measures[fmt]
                rows.append(
                    {
                        "model": name,
                        "format": fmt,
                        "variables": len(model.weights),
                        "parameters": parameters,
                        "bytes": int(np.median(m["bytes"])),
                        **{f"save_{k}": v for k, v in _common.summarize(m["save"]).items()},
                        **{f"restore_{k}": v for k, v in _common.summarize(m["restore"]).items()},
                    }
                )
            base, other = rows[-2], rows[-1]
            for key in ("save_median_ms", "restore_median_ms", "bytes"):
                other[f"{key}_ratio_to_tf_train"] = other[key] / base[key]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    load = os.getloadavg()
    config = {
        "models": FLAGS.models,
        "rounds": FLAGS.rounds,
        "formats": {
            FORMATS[0]: "tf.train.Checkpoint(model, optimizer) + CheckpointManager.save; "
            "restore_newest_readable (or Checkpoint.restore)",
            FORMATS[1]: "WeightsCheckpoints (trainers.harness.checkpoints, before issue 57 "
            "keras_runtime): "
            "Model.save_weights (.weights.h5) + a JSON step record; load_weights",
        },
        "order": "interleaved: every round each format once, the first alternating",
        "load_average_at_end": [round(v, 2) for v in load],
        "note": FLAGS.note,
    }
    _common.write_records(FLAGS.output_dir, PROGRAM, config, rows)
    env = _common.environment()
    lines = [
        f"Checkpoint formats on TensorFlow {env['versions']['tensorflow']}, Keras "
        f"{env['versions']['keras']}; {env['machine']['processor']}, "
        f"{env['machine']['cpu_count']} CPUs; {FLAGS.rounds} interleaved rounds; load average "
        f"at the end {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}"
        + (f"; {FLAGS.note}" if FLAGS.note else ""),
        "",
        "| model | format | parameters | MB on disk | save ms (median, p10–p90) | "
        "restore ms (median, p10–p90) |",
        "|---|---|---:|---:|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['model']} | {row['format']} | {row['parameters']:,} | "
            f"{row['bytes'] / 1e6:.2f} | {row['save_median_ms']:.1f} "
            f"({row['save_p10_ms']:.1f}–{row['save_p90_ms']:.1f}) | "
            f"{row['restore_median_ms']:.1f} "
            f"({row['restore_p10_ms']:.1f}–{row['restore_p90_ms']:.1f}) |"
        )
    for row in rows:
        if "bytes_ratio_to_tf_train" in row:
            lines.append(
                f"\n{row['model']}: Keras' weights / tf.train: save "
                f"{row['save_median_ms_ratio_to_tf_train']:.2f}x, restore "
                f"{row['restore_median_ms_ratio_to_tf_train']:.2f}x, bytes "
                f"{row['bytes_ratio_to_tf_train']:.2f}x"
            )
    table = "\n".join(lines) + "\n"
    with open(os.path.join(FLAGS.output_dir, f"{PROGRAM}.md"), "w") as f:
        f.write(table)
    print(table)


if __name__ == "__main__":
    _common.run(main)
