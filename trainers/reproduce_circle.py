"""The 2-D circle embedding of the SVMax paper's Fig. 4 (dissertation Fig. 3.13): a small network
embeds images onto the unit circle (d = 2, batch b = P x K >> d) with the contrastive loss,
without and with SVMax, over seeds.

    python -m trainers.reproduce_circle --table=/tmp/circle.md            # the original protocol
    python -m trainers.reproduce_circle --protocol=ours --table=docs/circle_glyphs.md  # ~13 min
    python -m trainers.reproduce_circle --protocol=ours --dataset=digits --train_steps=200 \\
        --seeds=0 --table=/tmp/circle.md                                  # a quick look

--protocol=original follows the authors' code (ahmdtaha/svmax @ cc5f1b5b, mnist_embedding.py):
10 classes in both training and test (closed set), P x K = 8 x 4 batches (b = 32), the
`mnist_toy` network (Conv2D 32 x 3 valid, Flatten, Dense 128, Dense 2, L2 normalisation),
contrastive loss with margin 1 plus bounded SVMax (lambda --svmax_lambda) or nothing, plain SGD
(momentum 0) at the constant rate --learning_rate (0.01), --epochs epochs of n_train // 32 steps
each, and frames at epoch boundaries of 320 test images, drawn with the original's class colours.
MNIST cannot be downloaded here: the data are scikit-learn's digits resized to 28 x 28
(``digits_closed``: 1,437 training and 360 test images), so an epoch is 44 steps, not 1,875. The
original re-draws its 320 test images every epoch (unseeded); here they are fixed.

--protocol=ours is the earlier glyph protocol: ``embedding_dim=2``, ``loss=contrastive`` and the
retrieval trainer's defaults otherwise (P x K = 36 x 4, margin 1, lr 0.01, SGD momentum 0.9 with
the paper's constant-then-polynomial schedule), --dataset (open set) and --train_steps, frames
at --frames evenly spaced steps of --frame_images (600) test images.

Every run is `trainers.retrieval.train_retrieval` with ``regularizer`` none or svmax, the trace
at every step, so results.json holds s_mu of every training batch with its bounds
L = sqrt(b)/2 and U = sqrt(b/2) (constant: b and d are fixed). A callback keeps the test
embedding of the fixed test images at the frame steps (``frames/step_<N>.npy`` in the run
folder). Writes the table (normalised spread
(s_mu - L)/(U - L) of the last training batches and of the whole test set, R@1), ``<table>.png``
(the frames of the first seed, one row per regularizer) and ``<table>_s_mu.png`` (s_mu per step
against L and U), and ``<table>.json``.
"""

import dataclasses
import os
from typing import ClassVar

import numpy as np
from absl import flags

from trainers import quiet_start, retrieval
from trainers.harness import flags as harness_flags
from trainers.harness import grid
from trainers.harness.config import ConfigError
from trainers.harness.datasets import embedded_names
from trainers.harness.flags import non_negative_number, number_at_least, option, positive_int
from trainers.harness.plots import finish_figure, pyplot
from trainers.harness.tables import mean_std

PROGRAM = "reproduce_circle"


@dataclasses.dataclass(frozen=True)
class CircleGrid(grid.grid_config("runs/circle")):
    TABLE: ClassVar[str] = "circle.md"

    protocol: str = option(
        "original",
        "original: the authors' mnist_embedding.py (digits_closed as MNIST, mnist_toy, 8 x 4 "
        "batches, plain SGD at a constant rate, --epochs, 320 test images); ours: the glyph "
        "protocol (--dataset, small_cnn, 36 x 4, the retrieval trainer's SGD, --train_steps).",
        choices=("original", "ours"),
    )
    epochs: int | None = option(
        None,
        "--protocol=original only: epochs of n_train // 32 steps (default 200, the original's).",
        check=positive_int,
    )
    svmax_lambda: float = option(
        1.0, "SVMax weight of the svmax runs (paper, contrastive: 1).", check=non_negative_number
    )
    frames: int = option(
        6,
        "Snapshots of the test embedding (first and last included): evenly spaced steps, or "
        "with --protocol=original evenly spaced epoch boundaries.",
        check=number_at_least(2, integer=True),
    )
    frame_images: int | None = option(
        None,
        "Test images in each snapshot (default: 320 original, as its figure; 600 ours).",
        check=positive_int,
    )


# The trainer's flags the grid passes to every run.
TRAINER_FLAGS = dict(
    only=("dataset", "train_steps", "learning_rate"),
    defaults={"train_steps": 1000},
    help_overrides={
        "dataset": "--protocol=ours only: the embedded set (the original: digits_closed).",
        "train_steps": "--protocol=ours only: training steps (the original: --epochs).",
    },
)

REGULARIZERS = ("none", "svmax")
LABELS = {"none": "contrastive", "svmax": "contrastive + SVMax"}
# --protocol=original: the original's P x K, epochs, test images in a frame, and the colours of
# classes 0-9 in its scatter plots (mnist_embedding.py l.166-167).
ORIGINAL_BATCH = (8, 4)
ORIGINAL_EPOCHS = 200
ORIGINAL_FRAME_IMAGES = 320
OURS_FRAME_IMAGES = 600
ORIGINAL_COLOURS = (
    "green",
    "yellow",
    "orange",
    "purple",
    "red",
    "black",
    "hotpink",
    "cyan",
    "navy",
    "indigo",
)


def frame_steps(train_steps, frames):
    return sorted({int(round(s)) for s in np.linspace(0, train_steps, frames)})


def frame_recorder(images, labels, steps, folder):
    """A Keras callback that saves the model's embedding of `images` at the given steps (step 0
    before training), and their `labels` (``labels.npy``) beside them. (Made as a run trains,
    not at import: the grid plans its runs before Keras loads.)"""
    import keras

    class FrameRecorder(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.images, self.labels, self.steps, self.folder = images, labels, set(steps), folder

        def _save(self, step):
            path = os.path.join(self.folder, f"step_{step:06d}.npy")
            if step in self.steps and not os.path.exists(path):
                os.makedirs(self.folder, exist_ok=True)
                np.save(os.path.join(self.folder, "labels.npy"), self.labels)
                np.save(path, self.model.predict(self.images, batch_size=256, verbose=0))

        def on_train_begin(self, logs=None):
            self._save(int(self.model.optimizer.iterations.numpy()))

        def on_train_batch_end(self, batch, logs=None):
            self._save(int(self.model.optimizer.iterations.numpy()))

    return FrameRecorder()


def spread(s_mu, lower, upper):
    """(s_mu - L) / (U - L): 0 for a rank-1 (polarised) batch, 1 for the most spread one."""
    return (s_mu - lower) / (upper - lower)


ANGLE_BINS = 36  # 10-degree sectors; a uniform embedding has entropy ln 36 = 3.58 nats


def circle_stats(points, bins=ANGLE_BINS):
    """Spread and angular coverage of `[n, 2]` unit-norm embeddings: ``spread`` (s_mu of the
    n rows against the bounds of n unit rows in 2-D), ``angle_entropy`` (natural log, of the
    histogram of the points' angles over `bins` equal sectors from -pi) and ``bins_occupied``."""
    from tf_svmax import ops

    x = np.asarray(points, dtype=np.float64)
    lower, upper = ops.svmax_bounds(len(x), 2)
    s_mu = float(np.linalg.svd(x, compute_uv=False).mean())
    angles = np.arctan2(x[:, 1], x[:, 0])  # [-pi, pi]
    # pi itself (a point at (-1, +0)) would fall one past the last sector: it belongs to it.
    sector = np.minimum((angles + np.pi) / (2 * np.pi) * bins, bins - 1).astype(int)
    counts = np.bincount(sector, minlength=bins)
    p = counts[counts > 0] / len(x)
    return {
        "spread": spread(s_mu, lower, upper),
        "angle_entropy": float(-(p * np.log(p)).sum()),
        "bins_occupied": int(np.count_nonzero(counts)),
    }


# Epochs the over-time table shows (the JSON has every recorded one).
TABLE_EPOCHS = (0, 1, 2, 5, 10, 20, 50, 100, 150, 200)


def over_time(runs, steps, steps_per_epoch=None):
    """Per recorded step: every seed's `circle_stats` of its saved test embedding."""
    rows = []
    for step in steps:
        per_seed = []
        for results in runs:
            path = os.path.join(results["config"]["output_dir"], "frames", f"step_{step:06d}.npy")
            per_seed.append(circle_stats(np.load(path)) if os.path.exists(path) else None)
        row = {"step": step, "per_seed": per_seed}
        if steps_per_epoch:
            row["epoch"] = step // steps_per_epoch
        rows.append(row)
    return rows


def original_config(base, epochs, num_train):
    """`base` set to the original protocol: digits_closed, mnist_toy, 8 x 4, plain SGD at a
    constant rate, ``epochs * (num_train // 32)`` steps (the original's epoch: every full batch
    of the training set), one evaluation at the end."""
    p, k = ORIGINAL_BATCH
    steps = epochs * (num_train // (p * k))
    return dataclasses.replace(
        base,
        dataset="digits_closed",
        backbone="mnist_toy",
        batch_p=p,
        batch_k=k,
        momentum=0.0,
        lr_schedule="constant",
        train_steps=steps,
        eval_every=steps,
    )


def train_with_frames(config, frame_images, steps):
    """`retrieval.train_retrieval` of `config`, recording the embedding of `frame_images` test
    images (the same in every run) at `steps` in ``<output_dir>/frames``. Reads the data and
    the training code when called: as the run trains."""
    test_images, test_labels = retrieval.DATASETS[config.dataset].load()["test"]
    rng = np.random.default_rng(0)  # the same test images in every run
    subset = np.sort(rng.choice(len(test_images), min(frame_images, len(test_images)), False))
    folder = os.path.join(config.output_dir, "frames")
    recorder = frame_recorder(test_images[subset], test_labels[subset], steps, folder)
    return retrieval.train_retrieval(config, callbacks=[recorder])


def planned_run(base, regularizer, seed, frame_images, steps, svmax_lambda, prefix=""):
    """One run of the grid, recording the frames of the same test images as every other."""
    name = f"{prefix}{regularizer}_seed{seed}"
    config = dataclasses.replace(
        base,
        regularizer=regularizer,
        svmax_lambda=svmax_lambda if regularizer == "svmax" else None,
        seed=seed,
        output_dir=os.path.join(base.output_dir, name),
    )
    return grid.Planned(
        regularizer,
        train_with_frames,
        retrieval.resolve,
        config,
        dict(frame_images=frame_images, steps=steps),
    )


def summary(results):
    trace = results["trace"]
    last = trace[-min(len(trace), 20) :]  # the last 20 steps' batches
    batch_s = float(np.mean([t["mean_singular_value"] for t in last]))
    lower, upper = trace[-1]["svmax_lower_bound"], trace[-1]["svmax_upper_bound"]
    final = results["evaluations"][-1]
    return {
        "seed": results["config"]["seed"],
        "status": results["status"],
        "batch_size": results["config"]["batch_p"] * results["config"]["batch_k"],
        "batch_s_mu": batch_s,
        "batch_lower": lower,
        "batch_upper": upper,
        "batch_spread": spread(batch_s, lower, upper),
        "test_s_mu": final["s_mu"],
        "test_spread": spread(final["s_mu"], final["s_mu_lower"], final["s_mu_upper"]),
        "recall_at_1": final["recall_at_1"],
        "output_dir": results["config"]["output_dir"],
    }


def plot_frames(runs, steps, path, title, protocol="ours", steps_per_epoch=None):
    """One row per regularizer, one column per step. ``original``: the original's class colours,
    marker size 20 and limits +-1.1, columns titled by epoch; ``ours``: tab20, size 3, +-1.15."""
    plt = pyplot()
    original = protocol == "original"
    limit = 1.1 if original else 1.15
    fig, axes = plt.subplots(
        len(runs), len(steps), figsize=(1.9 * len(steps), 2.1 * len(runs)), squeeze=False
    )
    theta = np.linspace(0, 2 * np.pi, 200)
    for i, (regularizer, results) in enumerate(runs):
        folder = os.path.join(results["config"]["output_dir"], "frames")
        labels = np.load(os.path.join(folder, "labels.npy"))
        for j, step in enumerate(steps):
            ax = axes[i, j]
            ax.plot(np.cos(theta), np.sin(theta), color="0.85", lw=0.8)
            path_j = os.path.join(folder, f"step_{step:06d}.npy")
            if os.path.exists(path_j):
                x = np.load(path_j)
                if original:
                    colours = [ORIGINAL_COLOURS[int(c) % 10] for c in labels]
                    ax.scatter(x[:, 0], x[:, 1], c=colours, marker="o", s=20)
                else:
                    ax.scatter(x[:, 0], x[:, 1], c=labels % 20, cmap="tab20", s=3, alpha=0.6)
            ax.set(xlim=(-limit, limit), ylim=(-limit, limit), aspect="equal", xticks=[], yticks=[])
            if i == 0:
                label = f"epoch {step // steps_per_epoch}" if original else f"step {step}"
                ax.set_title(label, fontsize=8)
            if j == 0:
                ax.set_ylabel(LABELS[regularizer], fontsize=8)
    finish_figure(fig, path, title, title_size=9)


def plot_s_mu(cells, path, title):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for regularizer, runs in cells.items():
        for k, results in enumerate(runs):
            trace = results["trace"]
            ax.plot(
                [t["step"] for t in trace],
                [t["mean_singular_value"] for t in trace],
                lw=0.6,
                alpha=0.7,
                color="C0" if regularizer == "none" else "C1",
                label=LABELS[regularizer] if k == 0 else None,
            )
    trace = next(iter(cells.values()))[0]["trace"]
    ax.axhline(trace[-1]["svmax_lower_bound"], color="k", ls="--", lw=0.8, label="L (rank 1)")
    ax.axhline(trace[-1]["svmax_upper_bound"], color="k", ls=":", lw=0.8, label="U")
    ax.set(xlabel="step", ylabel="s_mu of the training batch", title=title)
    ax.legend(fontsize=8)
    finish_figure(fig, path)


def markdown(g, first, summaries, timeline, steps_per_epoch, frame_images):
    """The table: the setup, the final spread per method, the spread over training."""
    config, seeds = first["config"], g.seeds
    b = summaries["none"][0]["batch_size"]
    if g.protocol == "original":
        epochs = config["train_steps"] // steps_per_epoch
        setup = (
            "Protocol `original` (ahmdtaha/svmax @ cc5f1b5b, `mnist_embedding.py`), with "
            "scikit-learn's digits resized to 28 × 28 in place of MNIST (closed set: all 10 "
            f"classes in training and test). `{config['dataset']}`, backbone "
            f"`{config['backbone']}`, P × K = {config['batch_p']} × {config['batch_k']}, plain "
            f"SGD (momentum {config['momentum']:g}) at the constant lr "
            f"{config['learning_rate']:g}, {epochs} epochs of {steps_per_epoch} steps "
            f"({config['train_steps']} steps), frames of {frame_images} fixed test images "
            "(the original re-draws its 320 every epoch). R@1 is closed-set: the test "
            "images' classes are the training classes. "
        )
    else:
        setup = (
            f"Protocol `ours`: `{config['dataset']}`, backbone `{config['backbone']}`, "
            f"lr {config['learning_rate']:g} ({config['lr_schedule']} schedule, momentum "
            f"{config['momentum']:g}), {config['train_steps']} steps. "
        )
    lines = [
        "# 2-D circle embedding (SVMax paper Fig. 4, dissertation Fig. 3.13)",
        "",
        grid.provenance(PROGRAM, first),
        "",
        f"{setup}Embedding d = 2 (L2-normalised: the unit circle), contrastive loss (margin "
        f"{config['margin']:g}), b = {b} ≫ d, SVMax "
        f"λ {g.svmax_lambda:g}; seeds {', '.join(map(str, seeds))}. Spread = "
        "(s_μ − L)/(U − L): 0 for a batch on one line through the origin (polarised, rank 1), "
        "1 at the upper bound. Batch: the mean s_μ of the last 20 training batches "
        f"(L = √b/2 = {summaries['none'][0]['batch_lower']:.3f}, U = √(b/2) = "
        f"{summaries['none'][0]['batch_upper']:.3f}); test: the whole test split after the last "
        "step. Cells: mean ± std over seeds (ddof = 1).",
        "",
        "| method | batch spread | test spread | test R@1 % | per seed (batch spread) |",
        "|---|---:|---:|---:|---|",
    ]
    for regularizer, rows in summaries.items():
        done = [s for s in rows if s["status"] == "completed"]
        per_seed = ", ".join(f"{s['seed']}: {s['batch_spread']:.3f}" for s in rows)
        if len(done) < len(rows):
            per_seed += (
                " ("
                + ", ".join(f"seed {s['seed']} {s['status']}" for s in rows if s not in done)
                + ")"
            )
        lines.append(
            f"| {LABELS[regularizer]} | {mean_std([s['batch_spread'] for s in done], digits=3)} | "
            f"{mean_std([s['test_spread'] for s in done], digits=3)} | "
            f"{mean_std([s['recall_at_1'] for s in done], 100, 2)} | {per_seed} |"
        )
    unit = "epoch" if steps_per_epoch else "step"
    lines += [
        "",
        f"## Over training: the {frame_images} fixed test images' embedding",
        "",
        f"Spread as above with the bounds of {frame_images} unit rows; angle entropy of the "
        f"histogram of the points' angles over {ANGLE_BINS} sectors of 10° (natural log; "
        f"uniform: ln {ANGLE_BINS} = {np.log(ANGLE_BINS):.2f}, two antipodal clusters: ln 2 = "
        f"0.69); bins occupied of {ANGLE_BINS}. Mean ± std over seeds"
        + (
            f"; epochs {', '.join(map(str, TABLE_EPOCHS))} shown, every epoch in the JSON."
            if steps_per_epoch
            else "."
        ),
        "",
        f"| {unit} | method | spread | angle entropy | bins occupied | per seed (spread) |",
        "|---:|---|---:|---:|---:|---|",
    ]
    for regularizer, rows in timeline.items():
        for row in rows:
            if steps_per_epoch and row["epoch"] not in TABLE_EPOCHS and row is not rows[-1]:
                continue
            stats = [x for x in row["per_seed"] if x is not None]
            if not stats:
                continue
            spread_, entropy, occupied = (
                mean_std([x[key] for x in stats], digits=digits)
                for key, digits in (("spread", 3), ("angle_entropy", 2), ("bins_occupied", 1))
            )
            lines.append(
                f"| {row.get('epoch', row['step'])} | {LABELS[regularizer]} | "
                f"{spread_} | {entropy} | {occupied} | "
                + ", ".join(f"{x['spread']:.3f}" for x in stats)
                + " |"
            )
    return lines


def reproduce(grid_config):
    g, given = grid_config, flags.FLAGS
    base = harness_flags.config_from_flags(
        retrieval.RetrievalConfig,
        output_dir=g.output_dir,
        embedding_dim=2,
        loss="contrastive",
        trace_every=1,
        verbose=0,
    )
    protocol = g.protocol
    if protocol == "original":
        if given["dataset"].present and base.dataset != "digits_closed":
            raise ConfigError(
                f"--protocol=original trains on digits_closed (the MNIST stand-in); "
                f"received --dataset={base.dataset} (use --protocol=ours for other sets)"
            )
        if given["train_steps"].present:
            raise ConfigError(
                "--protocol=original counts --epochs, not --train_steps (use "
                "--protocol=ours for a number of steps)"
            )
        epochs = ORIGINAL_EPOCHS if g.epochs is None else g.epochs
        # An epoch is every full batch of the training images: the data decide the steps. They
        # are resized by TensorFlow, imported first (quietly); nothing below refuses this
        # protocol's runs that the checks above let through.
        quiet_start.import_tensorflow()
        num_train = len(retrieval.DATASETS["digits_closed"].load()["train"][1])
        base = original_config(base, epochs, num_train)
        steps_per_epoch = base.train_steps // epochs
        steps = [e * steps_per_epoch for e in frame_steps(epochs, g.frames)]
        # The test embedding at every epoch boundary, for the over-time statistics.
        recorded = [e * steps_per_epoch for e in range(epochs + 1)]
        frame_images = g.frame_images or ORIGINAL_FRAME_IMAGES
        prefix = "original_"
    else:
        if g.epochs is not None:
            raise ConfigError("--epochs is for --protocol=original; ours counts --train_steps")
        base = dataclasses.replace(base, eval_every=base.train_steps)
        steps_per_epoch = None
        steps = frame_steps(base.train_steps, g.frames)
        recorded = steps
        frame_images = g.frame_images or OURS_FRAME_IMAGES
        prefix = ""
    embedded = embedded_names(retrieval.DATASETS)
    if base.dataset not in embedded:
        raise ConfigError(
            f"--dataset must be an embedded set {embedded} (the frames are "
            f"read from memory); received {base.dataset!r}"
        )
    seeds = g.seeds
    planned = [
        planned_run(base, regularizer, seed, frame_images, recorded, g.svmax_lambda, prefix)
        for regularizer in REGULARIZERS
        for seed in seeds
    ]
    runs = grid.Runs(PROGRAM, planned)  # refuses every run before any trains
    runs.train()
    cells = runs.cells
    summaries = {r: [summary(x) for x in runs] for r, runs in cells.items()}
    timeline = {r: over_time(runs, recorded, steps_per_epoch) for r, runs in cells.items()}
    first = cells["none"][0]
    config = first["config"]
    b = summaries["none"][0]["batch_size"]
    lines = markdown(g, first, summaries, timeline, steps_per_epoch, frame_images)
    lines += ["", runs.wall_time()]
    figures = [
        (
            ".png",
            lambda path: plot_frames(
                [(r, cells[r][0]) for r in REGULARIZERS],
                steps,
                path,
                f"Test embeddings on the unit circle (d = 2), {config['dataset']}, seed "
                f"{seeds[0]}:\ncontrastive without (top) and with SVMax λ {g.svmax_lambda:g} "
                "(bottom)",
                protocol=protocol,
                steps_per_epoch=steps_per_epoch,
            ),
        ),
        (
            "_s_mu.png",
            lambda path: plot_s_mu(
                cells,
                path,
                f"s_μ of the training batches (b = {b}, d = 2), seeds {', '.join(map(str, seeds))}",
            ),
        ),
    ]
    record = {"runs": summaries, "over_time": timeline}
    grid.write(g, PROGRAM, "\n".join(lines) + "\n", record, figures, runs.minutes())


if __name__ == "__main__":
    grid.main(CircleGrid, reproduce, PROGRAM, trainer=retrieval.RetrievalConfig, **TRAINER_FLAGS)
