"""The retrieval trainer's real-image input pipeline at CUB-200-2011 size.

Writes (once; later runs reuse it) a CUB-layout tree of JPEGs: `--num_classes` x
`--images_per_class` images of `--image_width` x `--image_height` (CUB's typical 500 x 375) at
quality `--jpeg_quality`: rendered glyphs and shapes on a gradient with sensor-like noise, so a
file is ~80 KB like CUB's photographs (a flat drawing would compress to a few KB and decode
faster than a photograph). Then, on the training split that `read_cub200` returns (classes
1-100), it measures:

- the trainer's training pipeline alone (`pk_batches` over the files with the trainer's own
  `map_fn`: decode, resize to 256, random 224 crop, flip; P x K batches), images/s for each
  `num_parallel_calls` in `--parallel_calls` and each tf.data private threadpool size in
  `--threads` (the cores tf.data may use), and the same with `--decoded_cache` (the trainer's
  cache: decoded and resized once, then crop and flip per batch) and its build time;
- single-threaded costs per image of each stage (read, read + decode, resize + crop + flip of
  a decoded image, crop + flip of a cached one, the whole map function), so the decode share;
- one ResNet-50 training step (the trainer's model and loss, random weights, P x K batch,
  SGD) on a constant batch, and fed by each pipeline: the pipeline's share of a step is its
  seconds per batch divided by the step's seconds.

    python -m benchmarks.input_pipeline --output_dir benchmarks/results/input_pipeline

Refused flags exit with status 2 before any work.
"""

import json
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from absl import flags  # noqa: E402

from benchmarks import _common  # noqa: E402
from trainers import retrieval  # noqa: E402  (light: its training code loads when used)
from trainers.harness.flags import run as run_with_exit_codes  # noqa: E402

# TensorFlow, tf_svmax and the trainers' runtime are imported where they are used: refused
# flags (exit 2) do not wait seconds for them.

FLAGS = flags.FLAGS
flags.DEFINE_string(
    "data_dir",
    os.path.join(tempfile.gettempdir(), "tf_svmax_input_pipeline_cub"),
    "Where the CUB-layout tree is written (reused when it holds one of the same flags).",
)
flags.DEFINE_integer("num_classes", 200, "Classes of the tree (CUB: 200; 1-100 train).")
flags.DEFINE_integer("images_per_class", 60, "Images per class (CUB: ~60).")
flags.DEFINE_integer("image_width", 500, "JPEG width (CUB's typical 500).")
flags.DEFINE_integer("image_height", 375, "JPEG height (CUB's typical 375).")
flags.DEFINE_integer("jpeg_quality", 90, "JPEG quality, 1-95.")
flags.DEFINE_integer("batch_p", 8, "Classes per batch P.")
flags.DEFINE_integer("batch_k", 4, "Images per class K (contrastive: 4).")
flags.DEFINE_integer("input_size", 224, "Crop fed to the backbone (resize: 256/224 of it).")
flags.DEFINE_list("parallel_calls", ["1", "2", "autotune"], "num_parallel_calls of the map.")
flags.DEFINE_list("threads", ["1", "2"], "tf.data private threadpool sizes (cores).")
flags.DEFINE_integer("batches", 25, "Timed batches per pipeline setting and repeat.")
flags.DEFINE_integer("warmup_batches", 3, "Untimed batches first (tracing, buffers).")
flags.DEFINE_integer("repeats", 3, "Repeats of each pipeline setting (median reported).")
flags.DEFINE_integer("stage_images", 150, "Images per single-threaded stage timing.")
flags.DEFINE_bool("cache", True, "Also measure the trainer's --decoded_cache pipeline.")
flags.DEFINE_enum(
    "backbone",
    "resnet50",
    ["resnet50", "small_cnn", "none"],
    "Model of the step timing (small_cnn: smoke tests; none: skip the step).",
)
flags.DEFINE_integer("steps", 4, "Timed training steps per feed (after --warmup_steps).")
flags.DEFINE_integer("warmup_steps", 2, "Untimed training steps first (tracing).")
flags.DEFINE_string("output_dir", "benchmarks/results/input_pipeline", "Where results go.")

PROGRAM = "input_pipeline"
TREE_MARKER = "generated_by_tf_svmax.json"
NOISE_SIGMA = 16.0  # grey levels: makes a 500 x 375 q90 JPEG ~80 KB, photograph-like


# Flags.


def _parallel_calls(values):
    """Each value an int >= 1 or "autotune" (tf.data.AUTOTUNE where a pipeline is built)."""
    out = []
    for value in values:
        if value.lower() == "autotune":
            out.append("autotune")
        elif value.isdigit() and int(value) >= 1:
            out.append(int(value))
        else:
            raise ValueError(
                f"Invalid value for flag `parallel_calls`. Expected positive integers or "
                f"'autotune'. Received: {values}"
            )
    return out


def check_flags():
    """The parsed flags as a dict, or ValueError naming the first bad one."""
    for name in (
        "num_classes",
        "images_per_class",
        "image_width",
        "image_height",
        "batch_p",
        "batch_k",
        "input_size",
        "batches",
        "repeats",
        "stage_images",
        "steps",
    ):
        _common.parse_ints([FLAGS[name].value], name)
    for name in ("warmup_batches", "warmup_steps"):
        if FLAGS[name].value < 0:
            raise ValueError(
                f"Invalid value for flag `{name}`. Expected an int >= 0. "
                f"Received: {FLAGS[name].value}"
            )
    if not 1 <= FLAGS.jpeg_quality <= 95:
        raise ValueError(
            f"Invalid value for flag `jpeg_quality`. Expected an int in [1, 95]. "
            f"Received: {FLAGS.jpeg_quality}"
        )
    train_classes = min(FLAGS.num_classes, 100)
    if FLAGS.batch_p > train_classes:
        raise ValueError(
            f"Invalid value for flag `batch_p`. Expected at most the {train_classes} training "
            f"classes (CUB ids 1-100). Received: {FLAGS.batch_p}"
        )
    if FLAGS.batch_p % 2 or FLAGS.batch_k != 4:
        raise ValueError(
            f"Invalid value for flags `batch_p`, `batch_k`. The trainer's default loss "
            f"(contrastive) needs an even P and K = 4. Received: {FLAGS.batch_p} x {FLAGS.batch_k}"
        )
    if not FLAGS.parallel_calls or not FLAGS.threads:
        raise ValueError("Invalid value for flags `parallel_calls`, `threads`: empty list.")
    return {
        "parallel_calls": _parallel_calls(FLAGS.parallel_calls),
        "threads": _common.parse_ints(FLAGS.threads, "threads"),
    }


# The tree.


def _tree_spec():
    return {
        "num_classes": FLAGS.num_classes,
        "images_per_class": FLAGS.images_per_class,
        "image_width": FLAGS.image_width,
        "image_height": FLAGS.image_height,
        "jpeg_quality": FLAGS.jpeg_quality,
        "noise_sigma": NOISE_SIGMA,
        "version": 1,
    }


def _relative_path(c, j):
    return f"{c:03d}.Glyph_{c}/Glyph_{c}_{j:04d}.jpg"


def _render(args):
    """One JPEG: a two-colour gradient, six class-coloured ellipses and the class's glyph
    (positions and sizes vary per image), plus Gaussian noise; written to `path`."""
    from PIL import Image, ImageDraw, ImageFont

    path, c, j, spec = args
    w, h = spec["image_width"], spec["image_height"]
    rng, class_rng = np.random.default_rng([c, j]), np.random.default_rng(c)
    colours = [tuple(int(v) for v in class_rng.integers(0, 256, 3)) for _ in range(4)]
    blend = rng.uniform(0.3, 1.0)
    gx = np.linspace(0, 1, w, dtype=np.float32)[None, :, None]
    gy = np.linspace(0, 1, h, dtype=np.float32)[:, None, None]
    top, side = np.array(colours[0], np.float32), np.array(colours[1], np.float32)
    image = Image.fromarray(
        np.clip(top * (1 - blend * gx) + side * blend * gy, 0, 255).astype(np.uint8)
    )
    draw = ImageDraw.Draw(image)
    for _ in range(6):
        x, y, r = (
            int(rng.integers(0, w)),
            int(rng.integers(0, h)),
            int(rng.integers(h // 18, h // 3)),
        )
        draw.ellipse([x - r, y - r // 2, x + r, y + r // 2], fill=colours[2])
    font = ImageFont.load_default(size=int(rng.integers(h // 3, h * 3 // 5)))
    corner = (int(rng.integers(0, w // 2)), int(rng.integers(0, h // 3)))
    draw.text(
        corner, chr(0x41 + (c - 1) % 26) + chr(0x61 + (c - 1) // 26), fill=colours[3], font=font
    )
    noisy = np.asarray(image, np.float32) + rng.normal(0, spec["noise_sigma"], (h, w, 3)).astype(
        np.float32
    )
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8)).save(
        path, "JPEG", quality=spec["jpeg_quality"]
    )
    return os.path.getsize(path)


def make_tree(root):
    """``root/CUB_200_2011`` in the official layout; reused when its marker matches. Returns
    ``(base, info)``."""
    import multiprocessing

    base, spec = os.path.join(root, "CUB_200_2011"), _tree_spec()
    marker = os.path.join(base, TREE_MARKER)
    if os.path.isfile(marker):
        with open(marker) as f:
            recorded = json.load(f)
        if recorded.get("spec") == spec:
            return base, {**recorded["info"], "reused": True}
    entries = [
        (c, j) for c in range(1, spec["num_classes"] + 1) for j in range(spec["images_per_class"])
    ]
    jobs = [(os.path.join(base, "images", _relative_path(c, j)), c, j, spec) for c, j in entries]
    started = time.perf_counter()
    with multiprocessing.Pool(os.cpu_count() or 1) as pool:
        sizes = pool.map(_render, jobs, chunksize=32)
    with (
        open(os.path.join(base, "images.txt"), "w") as images,
        open(os.path.join(base, "image_class_labels.txt"), "w") as labels,
        open(os.path.join(base, "train_test_split.txt"), "w") as split,
    ):
        for image_id, (c, j) in enumerate(entries, start=1):
            images.write(f"{image_id} {_relative_path(c, j)}\n")
            labels.write(f"{image_id} {c}\n")
            split.write(f"{image_id} {int(j % 2 == 0)}\n")
    info = {
        "images": len(entries),
        "mean_file_kb": float(np.mean(sizes) / 1e3),
        "total_mb": float(np.sum(sizes) / 1e6),
        "generation_s": time.perf_counter() - started,
    }
    _common.write_json(marker, {"spec": spec, "info": info})
    return base, {**info, "reused": False}


# Pipelines.


def trainer_config(data_dir, decoded_cache):
    """The retrieval trainer's config for a ResNet-50 run on the tree (P x K from the flags)."""
    config = retrieval.RetrievalConfig(
        output_dir=tempfile.gettempdir(),  # checked for writing, never written: no run here
        dataset="cub200",
        data_dir=data_dir,
        backbone="resnet50" if FLAGS.backbone == "resnet50" else "small_cnn",
        input_size=FLAGS.input_size,
        batch_p=FLAGS.batch_p,
        batch_k=FLAGS.batch_k,
        decoded_cache=decoded_cache,
        verbose=0,
    )
    return retrieval.resolve(config, num_train_classes=min(FLAGS.num_classes, 100))


def trainer_inputs(config):
    """What `train_retrieval` feeds `pk_batches` (through the same load_split and train_features):
    ``(features, labels, map_fn, build_seconds)``."""
    train, _, input_shape, loaders = retrieval.load_split(config)
    started = time.perf_counter()
    features, map_fn = retrieval.train_features(config, train[0], input_shape, loaders)
    return features, train[1], map_fn, time.perf_counter() - started


def trainer_batches(config, inputs, parallel_calls="autotune", threads=None):
    """The trainer's P x K batches (`train_retrieval`'s `batches`) mapped with `parallel_calls`
    (an int or "autotune"), with tf.data's private threadpool set to `threads` (None: tf.data's
    default, as the trainer runs)."""
    import tensorflow as tf

    from trainers.harness import runtime

    features, labels, map_fn, _ = inputs
    out = runtime.pk_batches(
        config,
        features,
        labels,
        map_fn=map_fn,
        start_step=0,
        num_parallel_calls=tf.data.AUTOTUNE if parallel_calls == "autotune" else parallel_calls,
    )
    if threads is not None:
        options = tf.data.Options()
        options.threading.private_threadpool_size = threads
        out = out.with_options(options)
    return out


def images_per_second(dataset, batch, warmup, batches):
    iterator = iter(dataset)
    for _ in range(warmup):
        next(iterator)
    started = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return batches * batch / (time.perf_counter() - started)


def pipeline_rows(name, config, inputs, settings):
    rows, batch = [], config.batch_p * config.batch_k
    for parallel_calls in settings["parallel_calls"]:
        for threads in settings["threads"]:
            rates = [
                images_per_second(
                    trainer_batches(config, inputs, parallel_calls, threads),
                    batch,
                    FLAGS.warmup_batches,
                    FLAGS.batches,
                )
                for _ in range(FLAGS.repeats)
            ]
            rate = float(np.median(rates))
            _common.progress(
                PROGRAM,
                f"{name} parallel_calls={parallel_calls} threads={threads}: {rate:.1f} images/s",
            )
            rows.append(
                {
                    "kind": "pipeline",
                    "pipeline": name,
                    "num_parallel_calls": str(parallel_calls),
                    "threads": threads,
                    "images_per_s": rate,
                    "images_per_s_min": float(np.min(rates)),
                    "images_per_s_max": float(np.max(rates)),
                    "seconds_per_batch": batch / rate,
                    "repeats": FLAGS.repeats,
                }
            )
    return rows


# Stages, single-threaded.


def _ms_per_image(dataset, count):
    """Per element of `dataset` on one tf.data thread, iterated from Python after two untimed
    elements (tracing, the page cache); the iterator is made outside the timing. The stage
    ``none`` measures what the iteration itself costs per element."""
    import tensorflow as tf

    options = tf.data.Options()
    options.threading.private_threadpool_size = 1
    options.threading.max_intra_op_parallelism = 1
    iterator = iter(dataset.repeat().with_options(options))
    for _ in range(2):
        next(iterator)
    started = time.perf_counter()
    for _ in range(count):
        next(iterator)
    return (time.perf_counter() - started) / count * 1e3


def stage_rows(files_config, files_inputs, cache_inputs):
    import tensorflow as tf

    from tf_svmax import data

    paths = files_inputs[0][: FLAGS.stage_images]
    count = len(paths)
    size = files_config.input_size
    resize = data.default_resize_size(size)
    loader = files_inputs[2]  # the trainer's own map_fn
    # One decoded image, repeated without copies (every file has the same size, so the same
    # resize cost).
    decoded = tf.data.Dataset.from_tensors(data.decode_image(paths[0]))
    path_ds = tf.data.Dataset.from_tensor_slices(paths)
    stages = {
        # The fixed cost of the measurement (iterator, function call) spread over `count`.
        "none (per-element cost of this timing)": tf.data.Dataset.range(count),
        "read file": path_ds.map(tf.io.read_file),
        "read + decode": path_ds.map(data.decode_image),
        "resize + crop + flip (decoded image)": decoded.map(
            lambda image: data.train_transform(image, input_size=size, resize_size=resize)
        ),
        "whole map_fn (read, decode, resize, crop, flip)": path_ds.map(loader),
    }
    if cache_inputs is not None:
        cache, map_fn = cache_inputs[0], cache_inputs[2]
        stages["crop + flip (decoded_cache row)"] = tf.data.Dataset.range(count).map(
            lambda i: map_fn(tf.gather(cache, i))
        )
    rows = []
    for stage, dataset in stages.items():
        ms = _ms_per_image(dataset, count)
        _common.progress(PROGRAM, f"stage {stage}: {ms:.2f} ms/image")
        rows.append({"kind": "stage", "stage": stage, "ms_per_image_1_thread": ms, "images": count})
    return rows


# Training steps.


class _StepTimes:
    """A Keras callback's end-of-batch times."""

    def __new__(cls):
        import keras

        class Times(keras.callbacks.Callback):
            def on_train_begin(self, logs=None):
                self.ends = [time.perf_counter()]

            def on_train_batch_end(self, batch, logs=None):
                self.ends.append(time.perf_counter())

        return Times()


def step_rows(files_config, feeds):
    """Median seconds between consecutive steps of the trainer's model, loss and optimizer
    (`fit` with one step per batch) on each feed; the first `--warmup_steps` are untimed."""
    import keras

    from tf_svmax import metrics, models

    rows = []
    for feed, make_dataset in feeds.items():
        keras.utils.set_random_seed(0)
        size = files_config.input_size
        model = models.build_embedding_model(
            files_config.backbone, input_shape=(size, size, 3), embedding_dim=128
        )
        model.compile(
            optimizer=keras.optimizers.SGD(files_config.learning_rate, momentum=0.9),
            loss=retrieval.build_loss(files_config),
            metrics=metrics.svmax_metrics(),
        )
        times = _StepTimes()
        total = FLAGS.warmup_steps + FLAGS.steps
        model.fit(make_dataset(), steps_per_epoch=total, epochs=1, callbacks=[times], verbose=0)
        steps = np.diff(times.ends)[FLAGS.warmup_steps :]
        summary = _common.summarize(steps)
        _common.progress(PROGRAM, f"step fed by {feed}: {summary['median_ms'] / 1e3:.2f} s")
        rows.append(
            {
                "kind": "step",
                "feed": feed,
                "backbone": files_config.backbone,
                "batch": files_config.batch_p * files_config.batch_k,
                "step_s": summary["median_ms"] / 1e3,
                "step_s_p10": summary["p10_ms"] / 1e3,
                "step_s_p90": summary["p90_ms"] / 1e3,
                "steps": FLAGS.steps,
            }
        )
    return rows


def constant_feed(config, inputs):
    import tensorflow as tf

    images, labels = next(iter(trainer_batches(config, inputs)))
    return lambda: tf.data.Dataset.from_tensors((images, labels)).repeat()


# Report.


def summarize_run(rows):
    pipes = [r for r in rows if r["kind"] == "pipeline"]
    stages = {r["stage"]: r["ms_per_image_1_thread"] for r in rows if r["kind"] == "stage"}
    steps = {r["feed"]: r["step_s"] for r in rows if r["kind"] == "step"}
    out = {}
    whole = stages.get("whole map_fn (read, decode, resize, crop, flip)")
    if whole:
        out["decode_share_of_map_fn"] = stages["read + decode"] / whole
        out["transform_share_of_map_fn"] = stages["resize + crop + flip (decoded image)"] / whole
    for name in ("files", "decoded_cache"):
        mine = [r for r in pipes if r["pipeline"] == name]
        if mine:
            best = max(mine, key=lambda r: r["images_per_s"])
            out[f"{name}_best"] = {
                k: best[k] for k in ("num_parallel_calls", "threads", "images_per_s")
            }
    if "constant" in steps:
        step = steps["constant"]
        out["step_s_constant_batch"] = step
        out["pipeline_share_of_step"] = {
            f"{r['pipeline']}|{r['num_parallel_calls']}|{r['threads']}": r["seconds_per_batch"]
            / step
            for r in pipes
        }
        for feed in ("files", "decoded_cache"):
            if feed in steps:
                out[f"step_slowdown_fed_by_{feed}"] = steps[feed] / step
    return out


def plot(path, rows, summary, title, *, batch, backbone):
    """Bars of images/s per setting (files, cache) and the rate one training step consumes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pipes = [r for r in rows if r["kind"] == "pipeline"]
    names = sorted({r["pipeline"] for r in pipes}, key=["files", "decoded_cache"].index)
    labels = {"files": "JPEG files (trainer default)", "decoded_cache": "--decoded_cache"}
    settings = list(dict.fromkeys((r["num_parallel_calls"], r["threads"]) for r in pipes))
    fig, ax = plt.subplots(figsize=(9, 5.5))
    width = 0.8 / len(names)
    for k, name in enumerate(names):
        by = {(r["num_parallel_calls"], r["threads"]): r for r in pipes if r["pipeline"] == name}
        xs = np.arange(len(settings)) + (k - (len(names) - 1) / 2) * width
        bars = ax.bar(xs, [by[s]["images_per_s"] for s in settings], width, label=labels[name])
        ax.bar_label(bars, fmt="%.0f", fontsize=8)
    if "step_s_constant_batch" in summary:
        need = batch / summary["step_s_constant_batch"]
        ax.axhline(
            need, color="k", ls="--", lw=1, label=f"{backbone} step consumes {need:.2g} images/s"
        )
    ax.set_xticks(range(len(settings)), [f"{p}\n{t}" for p, t in settings], fontsize=8)
    ax.set_xlabel("num_parallel_calls / tf.data threads (cores)")
    ax.set_yscale("log")
    ax.set_ylabel("training images / s (P x K batches)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.17), ncol=3)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_title(env, load):
    return (
        f"Retrieval trainer's input pipeline, CUB-sized tree ({FLAGS.num_classes} x "
        f"{FLAGS.images_per_class} JPEGs {FLAGS.image_width}x{FLAGS.image_height}, train split), "
        f"P x K = {FLAGS.batch_p} x {FLAGS.batch_k}, {FLAGS.input_size} crops\n"
        f"{env['machine']['cpu_count']}-core {env['machine']['processor']} CPU (load average "
        f"{load:.1f}), TF {env['versions']['tensorflow']}, Keras {env['versions']['keras']}; "
        f"median of {FLAGS.repeats} x {FLAGS.batches} batches"
    )


def main(argv):
    del argv
    try:
        settings = check_flags()
    except ValueError as error:
        print(f"[{PROGRAM}] refused: {error}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    from tf_svmax import data

    load_before = os.getloadavg()
    _common.progress(PROGRAM, f"tree in {FLAGS.data_dir}")
    base, tree = make_tree(FLAGS.data_dir)
    _common.progress(PROGRAM, f"tree: {tree}")
    files_config = trainer_config(base, decoded_cache=False)
    files_inputs = trainer_inputs(files_config)
    rows = pipeline_rows("files", files_config, files_inputs, settings)
    cache_config = cache_inputs = None
    cache_info = None
    if FLAGS.cache:
        cache_config = trainer_config(base, decoded_cache=True)
        cache_inputs = trainer_inputs(cache_config)
        cache = cache_inputs[0]
        cache_info = {
            "build_s": cache_inputs[3],
            "images": int(cache.shape[0]),
            "mb": cache.shape.num_elements() / 1e6,
            "build_images_per_s": int(cache.shape[0]) / cache_inputs[3],
        }
        _common.progress(PROGRAM, f"decoded cache: {cache_info}")
        rows += pipeline_rows("decoded_cache", cache_config, cache_inputs, settings)
    rows += stage_rows(files_config, files_inputs, cache_inputs)
    if FLAGS.backbone != "none":
        feeds = {
            "constant": constant_feed(files_config, files_inputs),
            "files": lambda: trainer_batches(files_config, files_inputs),
        }
        if cache_inputs is not None:
            feeds["decoded_cache"] = lambda: trainer_batches(cache_config, cache_inputs)
        rows += step_rows(files_config, feeds)
    summary = summarize_run(rows)
    env = _common.environment()
    config = {
        **_tree_spec(),
        "data_dir": base,
        "batch_p": FLAGS.batch_p,
        "batch_k": FLAGS.batch_k,
        "input_size": FLAGS.input_size,
        "resize_size": data.default_resize_size(FLAGS.input_size),
        "parallel_calls": FLAGS.parallel_calls,
        "threads": settings["threads"],
        "batches": FLAGS.batches,
        "warmup_batches": FLAGS.warmup_batches,
        "repeats": FLAGS.repeats,
        "stage_images": FLAGS.stage_images,
        "backbone": FLAGS.backbone,
        "steps": FLAGS.steps,
        "warmup_steps": FLAGS.warmup_steps,
        "load_average_1min_before_after": [load_before[0], os.getloadavg()[0]],
        "tf_data_options": "trainer's defaults; 'threads' = Options.threading."
        "private_threadpool_size; stages: 1 private thread, max_intra_op_parallelism 1",
    }
    out = FLAGS.output_dir
    _common.write_records(
        out, PROGRAM, config, rows, tree=tree, decoded_cache=cache_info, summary=summary
    )
    plot(
        os.path.join(out, f"{PROGRAM}.png"),
        rows,
        summary,
        plot_title(env, max(config["load_average_1min_before_after"])),
        batch=FLAGS.batch_p * FLAGS.batch_k,
        backbone=FLAGS.backbone,
    )
    print_tables(rows, summary, cache_info)
    print(f"wrote {out}/{PROGRAM}.csv, {PROGRAM}.json and {PROGRAM}.png")


def print_tables(rows, summary, cache_info):
    step = summary.get("step_s_constant_batch")
    print("| pipeline | num_parallel_calls | threads | images/s | s / batch | share of a step |")
    print("|---|---|---:|---:|---:|---:|")
    for r in rows:
        if r["kind"] == "pipeline":
            share = f"{r['seconds_per_batch'] / step:.1%}" if step else "-"
            print(
                f"| {r['pipeline']} | {r['num_parallel_calls']} | {r['threads']} | "
                f"{r['images_per_s']:.1f} | {r['seconds_per_batch']:.3f} | {share} |"
            )
    print("\n| stage (1 thread) | ms / image |\n|---|---:|")
    for r in rows:
        if r["kind"] == "stage":
            print(f"| {r['stage']} | {r['ms_per_image_1_thread']:.2f} |")
    print("\n| step fed by | s / step (median) |\n|---|---:|")
    for r in rows:
        if r["kind"] == "step":
            print(f"| {r['feed']} | {r['step_s']:.3f} |")
    if "decode_share_of_map_fn" in summary:
        print(f"\ndecode share of the map function: {summary['decode_share_of_map_fn']:.1%}")
    if cache_info:
        print(
            f"decoded cache: {cache_info['images']} images, {cache_info['mb']:.0f} MB, "
            f"built in {cache_info['build_s']:.1f} s"
        )


if __name__ == "__main__":
    run_with_exit_codes(main)
