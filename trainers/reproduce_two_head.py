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

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import dataclasses  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
from absl import flags, logging  # noqa: E402

from tf_svmax import records  # noqa: E402
from trainers import two_head  # noqa: E402
from trainers.harness import flags as harness_flags  # noqa: E402
from trainers.harness.plots import pyplot, save_figure  # noqa: E402
from trainers.harness.tables import mean_std  # noqa: E402

FLAGS = flags.FLAGS
harness_flags.define_flags(
    two_head.TwoHeadConfig,
    only=(
        "dataset",
        "data_dir",
        "image_dir",
        "backbone",
        "weights",
        "train_steps",
        "output_dir",
        "imbalance_ratio",
    ),
    defaults={"output_dir": "runs/two_head_table", "imbalance_ratio": 10.0},
    help_overrides={
        "output_dir": "Parent folder of the runs (one folder per run).",
        "imbalance_ratio": "Head-to-tail ratio of the long_tailed setting's class sizes.",
    },
)
flags.adopt_module_key_flags(harness_flags)  # --help lists them as this program's flags
flags.DEFINE_list("modes", list(two_head.MODES), "Modes (rows), from two_head.MODES.")
SETTINGS = ("balanced", "long_tailed", "scarce")
flags.DEFINE_list("settings", list(SETTINGS), f"Data settings, from {list(SETTINGS)}.")
flags.DEFINE_integer(
    "scarce_images_per_class", 5, "Training images per class in the scarce setting.", lower_bound=1
)
flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds; every cell is the mean ± std over them.")
flags.DEFINE_string("table", None, "Markdown output (default: <output_dir>/two_head.md).")

LABELS = {
    "softmax": "Softmax (single head)",
    "center": "Two-head (center)",
    "semi_hard": "Two-head (semi-hard)",
    "hard": "Two-head (hard)",
    "ole": "Softmax + OLÉ (single head)",
}


def setting_overrides(setting, imbalance_ratio, scarce_images):
    return {
        "balanced": {},
        "long_tailed": {"imbalance_ratio": imbalance_ratio},
        "scarce": {"train_images_per_class": scarce_images},
    }[setting]


def run_all(base, settings, modes, seeds, imbalance_ratio, scarce_images):
    """Trains the grid; returns ``{(setting, mode): [results per seed]}``."""
    out = {}
    total, done = len(settings) * len(modes) * len(seeds), 0
    for setting in settings:
        for mode in modes:
            for seed in seeds:
                done += 1
                name = f"{setting}_{mode}_seed{seed}"
                config = dataclasses.replace(
                    base,
                    mode=mode,
                    seed=seed,
                    output_dir=os.path.join(base.output_dir, name),
                    **setting_overrides(setting, imbalance_ratio, scarce_images),
                )
                print(f"[reproduce_two_head] {done}/{total} {name}", flush=True)
                keras.backend.clear_session()
                results = two_head.train_two_head(config)
                print(
                    f"[reproduce_two_head]   {results['status']} in "
                    f"{results['wall_seconds']:.0f} s: {two_head.summary(results)}",
                    flush=True,
                )
                out.setdefault((setting, mode), []).append(results)
    return out


def step_seconds(results):
    """Median seconds per training step over the trace windows after the first (the first
    includes graph tracing)."""
    seconds = [t["step_seconds"] for t in results["trace"][1:] if "step_seconds" in t]
    return float(np.median(seconds)) if seconds else float("nan")


def final(results):
    return results["evaluations"][-1] if results["status"] == "completed" else None


COLUMNS = (
    ("Top-1 acc. %", "accuracy", 100, 2),
    ("Macro acc. %", "macro_accuracy", 100, 2),
    ("R@1 %", "recall_at_1", 100, 2),
    ("NMI", "nmi", 1, 3),
    ("Errors whose NN has the predicted label %", "error_neighbour_agreement", 100, 1),
)


def markdown(results, settings, modes):
    head = "| Setting | Method | " + " | ".join(c[0] for c in COLUMNS)
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
            cells = []
            for _, key, scale, digits in COLUMNS:
                values = [f[key] for f in finals if f.get(key) is not None]
                cells.append(mean_std(values, scale, digits) if values else "–")
            if softmax is not None and mode != "softmax" and all(final(r) for r in softmax):
                for key in ("accuracy", "macro_accuracy"):
                    delta = mean_std(
                        [final(r)[key] - final(s)[key] for r, s in zip(runs, softmax, strict=True)],
                        100,
                    )
                    cells.append(delta if delta.startswith("-") else f"+{delta}")
                ratio = [
                    step_seconds(r) / step_seconds(s) for r, s in zip(runs, softmax, strict=True)
                ]
                cells.append(mean_std(ratio, digits=3))
            else:
                cells += ["", "", ""]
            lines.append(f"| {setting} | {LABELS[mode]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def header(results, seeds, argv):
    runs = [r for cell in results.values() for r in cell]
    first = runs[0]
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
            "Generated by `python -m trainers.reproduce_two_head " + " ".join(argv[1:]) + "`",
            f"on {first['device']} with TensorFlow {first['versions']['tensorflow']}, Keras "
            f"{first['versions']['keras']}, tf_svmax {first['versions']['tf_svmax']}.",
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
            means, stds = [], []
            for setting in settings:
                values = [
                    100 * f[key] for f in map(final, results[(setting, mode)]) if f is not None
                ]
                means.append(np.mean(values) if values else np.nan)
                stds.append(np.std(values, ddof=1) if len(values) > 1 else 0.0)
            x = np.arange(len(settings)) + (i - (len(modes) - 1) / 2) * width
            ax.bar(x, means, width, yerr=stds, capsize=2, label=LABELS[mode])
        ax.set_xticks(np.arange(len(settings)), settings)
        ax.set(title=name, ylabel="% (mean ± std over seeds)")
    axes[0].legend(fontsize=7, loc="lower left")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def main(argv):
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # no INFO line per checkpoint save
    try:
        seeds = [int(v) for v in FLAGS.seeds]
    except ValueError as error:
        print(f"reproduce_two_head: refused: --seeds: {error}", file=sys.stderr)
        return 2
    modes, settings = FLAGS.modes, FLAGS.settings
    refused = [m for m in modes if m not in two_head.MODES]
    refused += [s for s in settings if s not in SETTINGS]
    if refused or not (modes and settings and seeds):
        print(
            f"reproduce_two_head: refused: --modes from {list(two_head.MODES)}, --settings from "
            f"{list(SETTINGS)}, non-empty --seeds; received {refused or 'an empty list'}.",
            file=sys.stderr,
        )
        return 2
    base = harness_flags.config_from_flags(
        two_head.TwoHeadConfig, evaluate_untrained=False, verbose=0, imbalance_ratio=1.0
    )
    base = dataclasses.replace(base, eval_every=two_head.resolve(base).train_steps)
    try:  # refuse impossible flags before any training
        for setting in settings:
            for mode in modes:
                overrides = setting_overrides(
                    setting, FLAGS.imbalance_ratio, FLAGS.scarce_images_per_class
                )
                two_head.resolve(dataclasses.replace(base, mode=mode, **overrides))
    except two_head.ConfigError as error:
        print(f"reproduce_two_head: refused: {error}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    results = run_all(
        base, settings, modes, seeds, FLAGS.imbalance_ratio, FLAGS.scarce_images_per_class
    )
    del argv  # absl keeps only positional arguments; the header shows the whole command
    table = header(results, seeds, sys.argv) + "\n" + markdown(results, settings, modes) + "\n"
    minutes = (time.perf_counter() - started) / 60
    path = FLAGS.table or os.path.join(FLAGS.output_dir, "two_head.md")
    run_minutes = sum(r["wall_seconds"] for cell in results.values() for r in cell) / 60
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(
            f"{table}\nWall time of this invocation: {minutes:.1f} min; the runs' own wall times "
            f"add up to {run_minutes:.1f} min.\n"
        )
    first = next(iter(results.values()))[0]["config"]
    stem = os.path.splitext(path)[0]
    plot(
        results,
        settings,
        modes,
        f"{stem}.png",
        f"Softmax vs two-head vs OLÉ on {first['dataset']} ({first['backbone']}, "
        f"{first['train_steps']} steps, seeds {', '.join(map(str, seeds))}): held-out images "
        "of the training classes",
    )
    records.write_json(
        f"{stem}.json",
        {
            f"{setting}/{mode}": [
                {
                    "seed": r["config"]["seed"],
                    "status": r["status"],
                    "final": {
                        k: v for k, v in (final(r) or {}).items() if k != "per_class_accuracy"
                    },
                    "step_seconds": step_seconds(r),
                }
                for r in cell
            ]
            for (setting, mode), cell in results.items()
        },
    )
    print(table)
    print(f"[reproduce_two_head] wrote {path}, {stem}.png, {stem}.json ({minutes:.1f} min)")
    return 0


if __name__ == "__main__":
    harness_flags.run(main)
