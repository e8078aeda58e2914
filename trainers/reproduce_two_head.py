"""Dissertation Ch. 5 / OLÉ paper protocol on any dataset: softmax vs two-head (center,
semi-hard, hard) vs softmax + OLÉ, on balanced, long-tailed and scarce training data, over
seeds, reported as mean ± std.

    python -m trainers.reproduce_two_head --table=docs/two_head_glyphs.md   # 45 runs, ~1 h
    python -m trainers.reproduce_two_head --seeds=0 --settings=balanced --table=/tmp/quick.md

Every run is `trainers.two_head.train_two_head` (its defaults: the dissertation's λ per mode,
P x K = 8 x 4, lr 0.01), in its own folder ``<setting>_<mode>_seed<seed>`` under --output_dir
(re-running resumes unfinished runs and reuses finished ones). Settings: ``balanced`` (every
training image), ``long_tailed`` (--imbalance_ratio: the class at rank r of C keeps
ratio^(-r/(C-1)) of its train and test images; macro accuracy is the dissertation's Table 5.3
claim), ``scarce`` (--scarce_images_per_class training images per class; the OLÉ paper's Fig. 5
claim). The table reports top-1 and macro accuracy, Recall@1 and NMI of the embedding (the
embedding head, or the L2-normalised pooled features of the single-head modes), the share of
misclassified test images whose nearest training image has the predicted label (Sec. 5.4.3),
and the seconds per training step relative to softmax (Fig. 5.12). Beside it a figure
(``<table>.png``) of accuracy, macro accuracy and R@1 per setting and mode.
"""

import dataclasses
import os
from typing import ClassVar

import numpy as np

from trainers import two_head
from trainers.harness import flags as harness_flags
from trainers.harness import grid
from trainers.harness.flags import option, positive_int
from trainers.harness.grid import error_bars, final, signed_mean_std, step_seconds
from trainers.harness.plots import finish_figure, pyplot
from trainers.harness.tables import Column, mean_std

PROGRAM = "reproduce_two_head"
SETTINGS = ("balanced", "long_tailed", "scarce")


@dataclasses.dataclass(frozen=True)
class TwoHeadGrid(grid.grid_config("runs/two_head_table")):
    TABLE: ClassVar[str] = "two_head.md"

    modes: tuple[str, ...] = option(
        two_head.MODES, "Modes (rows), from two_head.MODES.", choices=two_head.MODES
    )
    settings: tuple[str, ...] = option(
        SETTINGS, f"Data settings, from {list(SETTINGS)}.", choices=SETTINGS
    )
    scarce_images_per_class: int = option(
        5, "Training images per class in the scarce setting.", check=positive_int
    )


# The trainer's flags the grid passes to every run.
TRAINER_FLAGS = dict(
    only=(
        "dataset",
        "data_dir",
        "image_dir",
        "backbone",
        "weights",
        "train_steps",
        "imbalance_ratio",
    ),
    defaults={"imbalance_ratio": 10.0},
    help_overrides={
        "imbalance_ratio": "Head-to-tail ratio of the long_tailed setting's class sizes.",
    },
)

LABELS = {
    "softmax": "Softmax (single head)",
    "center": "Two-head (center)",
    "semi_hard": "Two-head (semi-hard)",
    "hard": "Two-head (hard)",
    "ole": "Softmax + OLÉ (single head)",
}


COLUMNS = (
    Column("Top-1 acc. %", "accuracy", 100),
    Column("Macro acc. %", "macro_accuracy", 100),
    Column("R@1 %", "recall_at_1", 100),
    Column("NMI", "nmi", digits=3),
    Column("Errors whose NN has the predicted label %", "error_neighbour_agreement", 100, 1),
)


def markdown(results, settings, modes):
    head = "| Setting | Method | " + " | ".join(column.head for column in COLUMNS)
    head += " | Δ top-1 vs softmax | Δ macro vs softmax | s/step ÷ softmax |"
    lines = [head, "|---|---|" + "---:|" * (len(COLUMNS) + 3)]
    for setting in settings:
        softmax = results.get((setting, "softmax"))
        for mode in modes:
            runs = results[(setting, mode)]
            finals = [final(r) for r in runs]
            if any(f is None for f in finals):
                statuses = ", ".join(sorted({r["status"] for r in runs}))
                lines.append(f"| {setting} | {LABELS[mode]} | {statuses} |" + " |" * 7)
                continue
            cells = [column.cell(finals) for column in COLUMNS]
            if softmax is not None and mode != "softmax" and all(final(r) for r in softmax):
                for key in ("accuracy", "macro_accuracy"):
                    cells.append(
                        signed_mean_std(
                            [
                                final(r)[key] - final(s)[key]
                                for r, s in zip(runs, softmax, strict=True)
                            ],
                            100,
                        )
                    )
                ratio = [
                    step_seconds(r) / step_seconds(s) for r, s in zip(runs, softmax, strict=True)
                ]
                cells.append(mean_std(ratio, digits=3))
            else:
                cells += ["", "", ""]
            lines.append(f"| {setting} | {LABELS[mode]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def header(results, seeds):
    first = next(iter(results.values()))[0]
    config = first["config"]
    data_lines = []
    for setting in dict.fromkeys(s for s, _ in results):
        d = next(cell for (s, _), cell in results.items() if s == setting)[0]["data"]
        sizes = d["train_images_per_class"]
        data_lines.append(
            f"- `{setting}`: {d['num_classes']} classes, {d['train_images']} training images "
            f"({sizes['min']}–{sizes['max']} per class), {d['test_images']} test images."
        )
    return "\n".join(
        [
            f"# Two-head / OLÉ classification protocol on `{config['dataset']}`",
            "",
            grid.provenance(PROGRAM, first),
            "",
            f"Every run: backbone `{config['backbone']}`, P × K = {config['batch_p']} × "
            f"{config['batch_k']}, {config['train_steps']} steps, SGD momentum 0.9, lr "
            f"{config['learning_rate']:g} decayed linearly to 1e-4, embedding head d = "
            f"{config['embedding_dim']} on the flattened last map; λ: center 0.003 (α 0.5), "
            "semi-hard 1 (margin 0.2, squared L2), hard 1 (softplus margin, squared L2), OLÉ "
            "0.25 (Δ = 1) on the pooled features; seeds "
            f"{', '.join(map(str, seeds))}; evaluated once, after the last step, on held-out "
            "images of the training classes. Cells are mean ± std over the seeds (sample std, "
            "ddof = 1); Δ columns are per-seed differences to the softmax run of the same seed "
            "and setting. R@1 and NMI use the embedding head of the two-head modes and the "
            "L2-normalised pooled features of the single-head ones. s/step is the median "
            "seconds per step over the trace windows after the first (runs one at a time on "
            "this machine, so other load on it shows up here).",
            "",
            *data_lines,
            "",
        ]
    )


def plot(results, settings, modes, path, title):
    plt = pyplot()
    metrics = (("accuracy", "Top-1 accuracy"), ("macro_accuracy", "Macro accuracy"))
    metrics += (("recall_at_1", "Recall@1 of the embedding"),)
    fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 4.2), sharey=True)
    width = 0.8 / len(modes)
    for ax, (key, name) in zip(axes, metrics, strict=True):
        for i, mode in enumerate(modes):
            means, stds = error_bars(
                [
                    [100 * f[key] for f in map(final, results[(setting, mode)]) if f is not None]
                    for setting in settings
                ]
            )
            x = np.arange(len(settings)) + (i - (len(modes) - 1) / 2) * width
            ax.bar(x, means, width, yerr=stds, capsize=2, label=LABELS[mode])
        ax.set_xticks(np.arange(len(settings)), settings)
        ax.set(title=name, ylabel="% (mean ± std over seeds)")
    axes[0].legend(fontsize=7, loc="lower left")
    finish_figure(fig, path, title, title_size=10)


def reproduce(config):
    trainer = harness_flags.config_from_flags(
        two_head.TwoHeadConfig, evaluate_untrained=False, verbose=0, output_dir=config.output_dir
    )
    base = dataclasses.replace(trainer, imbalance_ratio=1.0)
    base = dataclasses.replace(base, eval_every=two_head.resolve(base).train_steps)
    overrides = {
        "balanced": {},
        "long_tailed": {"imbalance_ratio": trainer.imbalance_ratio},
        "scarce": {"train_images_per_class": config.scarce_images_per_class},
    }
    planned = [
        grid.Planned(
            (setting, mode),
            lambda c: two_head.train_two_head(c),  # the training code, read as the run trains
            two_head.resolve,
            dataclasses.replace(
                base,
                mode=mode,
                seed=seed,
                output_dir=os.path.join(config.output_dir, f"{setting}_{mode}_seed{seed}"),
                **overrides[setting],
            ),
        )
        for setting in config.settings
        for mode in config.modes
        for seed in config.seeds
    ]
    runs = grid.Runs(PROGRAM, planned)  # refuses every run before any trains
    runs.train()
    results = runs.cells
    table = header(results, config.seeds) + "\n"
    table += markdown(results, config.settings, config.modes) + "\n"
    first = runs.all[0]["config"]
    title = (
        f"Softmax vs two-head vs OLÉ on {first['dataset']} ({first['backbone']}, "
        f"{first['train_steps']} steps, seeds {', '.join(map(str, config.seeds))}): held-out "
        "images of the training classes"
    )
    record = {
        f"{setting}/{mode}": [
            {
                "seed": r["config"]["seed"],
                "status": r["status"],
                "final": {k: v for k, v in (final(r) or {}).items() if k != "per_class_accuracy"},
                "step_seconds": step_seconds(r),
            }
            for r in cell
        ]
        for (setting, mode), cell in results.items()
    }
    grid.write(
        config,
        PROGRAM,
        f"{table}\n{runs.wall_time()}\n",
        record,
        [(".png", lambda path: plot(results, config.settings, config.modes, path, title))],
        runs.minutes(),
    )


if __name__ == "__main__":
    grid.main(TwoHeadGrid, reproduce, PROGRAM, trainer=two_head.TwoHeadConfig, **TRAINER_FLAGS)
