"""SVMax paper Table 1 on any dataset: {vanilla, spread-out, SVMax} x learning rates x losses
x seeds, reported as mean ± std over the seeds.

    python -m trainers.reproduce_table1 --table=docs/table1_glyphs.md    # 117 runs, ~1.7 h
    python -m trainers.reproduce_table1 --learning_rates=0.01 \\
        --methods=vanilla,svmax --table=/tmp/quick.md                    # 27 runs, ~20 min
    python -m trainers.reproduce_table1 --dataset=cub200 --data_dir=/data/CUB_200_2011 \\
        --backbone=inception_v3 --weights=imagenet --seeds=0 --table=docs/table1_cub200.md

Every run is `trainers.retrieval.train_retrieval` with the paper's per-loss settings, in its own
folder ``<loss>_<regularizer>_lr<lr>_seed<seed>`` under --output_dir (re-running resumes
unfinished runs and reuses finished ones, so a subset run first and the whole grid later share
their runs). The markdown table has Table 1's layout: NMI, R@1, R@8 and Delta R@1 (the per-seed
difference to the vanilla loss at the same learning rate) per learning rate; the triplet loss
gets SVMax rows with lambda = 1 and 0.1. A first row shows the untrained network (evaluated once
per seed: every run of a seed starts from the same seeded weights), a second table the final
test embeddings' s_mu against its [L, U] bounds (a collapsed embedding sits near L). Two figures
beside the table: the final R@1 per loss and method (``<table>.png``) and the training batches'
s_mu over training between the batch's L and U (``<table>_s_mu.png``, dissertation Fig. 3.5);
with --eval_every below --train_steps a third, test R@1 over training (``<table>_recall.png``:
which rate converges in fewer steps). ``<table>.json`` holds every run's evaluations. The file
starts with the command, the machine, the settings the runs used and, with --weights=<file>,
the file's SHA-256 and the pretraining record beside it (``results.json`` of
``trainers.pretrain_glyphs``).

The paper's regime, a pretrained backbone fine-tuned (Sec. 4.1):

    python -m trainers.pretrain_glyphs --backbone=small_cnn_bn --learning_rate=0.1 \
        --train_steps=1200 --eval_every=200 --output_dir=runs/pretrain_small_cnn_bn
    python -m trainers.reproduce_table1 --backbone=small_cnn_bn \
        --weights=runs/pretrain_small_cnn_bn/backbone.weights.h5 --train_steps=100 \
        --eval_every=50 --output_dir=runs/table1_pretrained --table=docs/table1_pretrained.md
"""

import dataclasses
import hashlib
import json
import os
from typing import ClassVar

import numpy as np

from trainers import retrieval
from trainers.harness import flags as harness_flags
from trainers.harness import grid
from trainers.harness.flags import option, positive_number
from trainers.harness.grid import error_bars, signed_mean_std
from trainers.harness.plots import finish_figure, pyplot
from trainers.harness.tables import mean_std, starting_weights

PROGRAM = "reproduce_table1"
# Steps per grid run where they differ from train_retrieval's dataset default.
GRID_STEPS = {"glyphs": 600}
# method flag -> (row label, regularizer, SVMax lambda (None: the paper's for the loss)).
METHODS = {
    "vanilla": (("Vanilla", "none", None),),
    "spread_out": (("Spread-out", "spread_out", None),),
    "svmax": (("SVMax", "svmax", None),),
}
# Table 1's losses: the trainer's that the paper's table has (`retrieval.RankingLoss.in_table1`).
TABLE_LOSSES = tuple(loss.name for loss in retrieval.RANKING_LOSSES if loss.in_table1)
# The losses with one SVMax row per lambda of the paper (`RankingLoss.table1_svmax_lambdas`).
SVMAX_LAMBDA_ROWS = {
    loss.name: tuple((f"SVMax λ = {lam:g}", "svmax", lam) for lam in loss.table1_svmax_lambdas)
    for loss in retrieval.RANKING_LOSSES
    if loss.in_table1 and loss.table1_svmax_lambdas
}


def svmax_row(loss):
    """The SVMax row a figure shows for `loss`: the paper's lambda where Table 1 has several."""
    if loss in SVMAX_LAMBDA_ROWS:
        return f"SVMax λ = {retrieval.RANKING[loss].svmax_lambda:g}"
    return "SVMax"


@dataclasses.dataclass(frozen=True)
class Table1Grid(grid.grid_config("runs/table1")):
    TABLE: ClassVar[str] = "table1.md"

    losses: tuple[str, ...] = option(
        ("contrastive", "triplet_hard", "npair", "angular"),
        "Ranking losses (Table 1: contrastive, triplet, N-pair, angular).",
        choices=TABLE_LOSSES,
    )
    methods: tuple[str, ...] = option(
        tuple(METHODS),
        "Rows per loss: vanilla (no regularizer), spread_out, svmax (the triplet loss gets "
        "SVMax with lambda 1 and 0.1).",
        choices=tuple(METHODS),
    )
    learning_rates: tuple[float, ...] = option(
        (0.01, 0.001, 0.0001), "Table 1's learning rates.", check=positive_number
    )


# The trainer's flags the grid passes to every run.
TRAINER_FLAGS = dict(
    only=("dataset", "data_dir", "backbone", "weights", "train_steps", "eval_every"),
    help_overrides={
        "train_steps": "Steps per run (default: 600 on glyphs, which keeps the 117-run grid of "
        "3 seeds under 3 hours on 2 CPU cores; otherwise the dataset's train_retrieval default).",
        "eval_every": "Steps between test evaluations (default: train_steps, one evaluation "
        "at the end; the table shows the last).",
    },
)


def rows_for(loss, methods):
    rows = []
    for method in methods:
        if method == "svmax" and loss in SVMAX_LAMBDA_ROWS:
            rows += SVMAX_LAMBDA_ROWS[loss]
        else:
            rows += METHODS[method]
    return rows


def run_name(loss, regularizer, lam, lr, seed):
    return f"{loss}_{regularizer}{'' if lam is None else f'_l{lam:g}'}_lr{lr:g}_seed{seed}"


def plan(config, base):
    """The grid's runs, seed by seed: every loss, method row and learning rate of a seed."""
    planned = []
    for seed in config.seeds:
        for loss in config.losses:
            for label, regularizer, lam in rows_for(loss, config.methods):
                for lr in config.learning_rates:
                    name = run_name(loss, regularizer, lam, lr, seed)
                    run_config = dataclasses.replace(
                        base,
                        seed=seed,
                        evaluate_untrained=False,
                        loss=loss,
                        regularizer=regularizer,
                        svmax_lambda=lam,
                        learning_rate=lr,
                        output_dir=os.path.join(base.output_dir, name),
                    )
                    planned.append(
                        grid.Planned(
                            (loss, label, lr),
                            # the training code, read as the run trains
                            lambda c: retrieval.train_retrieval(c),
                            retrieval.resolve,
                            run_config,
                        )
                    )
    return planned


def run_all(config, base):
    """Refuses the grid's impossible runs, then trains it. Returns ``{"untrained": {seed:
    evaluation}, "runs": [results], (loss, row label, lr): [(status, final evaluation or None,
    trace) per seed]}`` and the `grid.Runs`."""
    runs = grid.Runs(PROGRAM, plan(config, base))  # refuses every run, imports TensorFlow
    import keras  # the training code's (after every run was accepted)

    out = {"untrained": {}}
    for seed in config.seeds:
        # Every run of a seed builds the same seeded network, so one step-0 evaluation per seed
        # serves its runs (on CUB or SOP an evaluation costs minutes).
        seeded = dataclasses.replace(
            base, seed=seed, evaluate_untrained=False, loss=config.losses[0]
        )
        keras.backend.clear_session()
        untrained = retrieval.evaluate_untrained(seeded)
        out["untrained"][seed] = untrained
        print(
            f"[{PROGRAM}] seed {seed}: untrained network R@1 {untrained['recall_at_1']:.4f}",
            flush=True,
        )
    runs.train()
    for key, cell in runs.cells.items():
        for results in cell:
            evaluations = results["evaluations"]
            last = evaluations[-1] if evaluations and evaluations[-1]["step"] else None
            out.setdefault(key, []).append((results["status"], last, results["trace"]))
    out["runs"] = runs.all
    return out, runs


def _finals(cell):
    """The cell's final evaluations, or None when any seed's run did not complete."""
    if any(status != "completed" or ev is None for status, ev, _ in cell):
        return None
    return [ev for _, ev, _ in cell]


def _failed(cell):
    return ", ".join(sorted({status for status, _, _ in cell if status != "completed"}))


def markdown(results, losses, methods, learning_rates):
    """Table 1's layout with mean ± std over seeds: NMI, R@1, R@8 and Δ R@1 (the per-seed
    difference to the vanilla run of the same seed and lr, averaged)."""
    head = (
        "| Method | "
        + " | ".join(f"NMI | R@1 | R@8 | Δ R@1 (lr={lr:g})" for lr in learning_rates)
        + " |"
    )
    lines = [head, "|---|" + "---:|" * (4 * len(learning_rates))]
    untrained = list(results["untrained"].values())
    if untrained:
        cells = [
            mean_std([e["nmi"] for e in untrained], digits=3),
            mean_std([e["recall_at_1"] for e in untrained], 100),
            mean_std([e["recall_at_8"] for e in untrained], 100),
            "",
        ]
        lines.append(
            "| Untrained network (step 0) | " + " | ".join(cells * len(learning_rates)) + " |"
        )
    for loss in losses:
        lines.append(f"| **{loss}** |" + " |" * (4 * len(learning_rates)))
        for label, _, _ in rows_for(loss, methods):
            cells = []
            for lr in learning_rates:
                finals = _finals(results[(loss, label, lr)])
                if finals is None:
                    cells += [_failed(results[(loss, label, lr)]), "", "", ""]
                    continue
                vanilla = results.get((loss, "Vanilla", lr))
                vanilla = None if vanilla is None else _finals(vanilla)
                delta = ""
                if label != "Vanilla" and vanilla is not None:
                    delta = signed_mean_std(
                        [
                            e["recall_at_1"] - v["recall_at_1"]
                            for e, v in zip(finals, vanilla, strict=True)
                        ],
                        100,
                    )
                cells += [
                    mean_std([e["nmi"] for e in finals], digits=3),
                    mean_std([e["recall_at_1"] for e in finals], 100),
                    mean_std([e["recall_at_8"] for e in finals], 100),
                    delta,
                ]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def s_mu_markdown(results, losses, methods, learning_rates):
    """s_mu of the final test embedding (mean ± std over seeds) with its [L, U] (collapse
    shows as s_mu near L)."""
    lines = [
        "| Loss | Method | " + " | ".join(f"s_μ (lr={lr:g})" for lr in learning_rates) + " |",
        "|---|---|" + "---:|" * len(learning_rates),
    ]
    bounds = None
    for loss in losses:
        for label, _, _ in rows_for(loss, methods):
            cells = []
            for lr in learning_rates:
                finals = _finals(results[(loss, label, lr)])
                if finals is None:
                    cells.append(_failed(results[(loss, label, lr)]))
                    continue
                cells.append(mean_std([e["s_mu"] for e in finals], digits=3))
                bounds = (finals[0]["s_mu_lower"], finals[0]["s_mu_upper"])
            lines.append(f"| {loss} | {label} | " + " | ".join(cells) + " |")
    untrained = list(results["untrained"].values())
    if untrained:
        s_mu = mean_std([e["s_mu"] for e in untrained], digits=3)
        lines.append("| | Untrained network | " + " | ".join([s_mu] * len(learning_rates)) + " |")
    if bounds:
        lines.append(
            f"\nBounds for the test set's shape: L = {bounds[0]:.4f}, U = {bounds[1]:.4f}."
        )
    return "\n".join(lines) + "\n"


def plot(results, losses, methods, learning_rates, path, title):
    """Grouped bars of the final test R@1 per loss and method (mean, with ± std over seeds as
    error bars), one panel per learning rate, the untrained network as a dashed line."""
    plt = pyplot()
    labels = [METHODS[m][0][0] for m in methods]
    width = 0.8 / len(labels)
    fig, axes = plt.subplots(
        1, len(learning_rates), figsize=(4.5 * len(learning_rates), 4.4), sharey=True, squeeze=False
    )
    lowest = 100.0
    for ax, lr in zip(axes[0], learning_rates, strict=True):
        for m, label in enumerate(labels):
            r1 = []
            for loss in losses:
                # Triplet: the SVMax row with the paper's lambda (0.1).
                row = svmax_row(loss) if label == "SVMax" else label
                finals = _finals(results[(loss, row, lr)])
                r1.append([100 * e["recall_at_1"] for e in finals] if finals else [])
            means, stds = error_bars(r1)
            lowest = min([lowest] + [v for v in means if np.isfinite(v)])
            xs = np.arange(len(losses)) + (m - (len(labels) - 1) / 2) * width
            ax.bar(xs, means, width=width, yerr=stds, capsize=2, label=label)
        untrained = [100 * e["recall_at_1"] for e in results["untrained"].values()]
        if untrained:
            ax.axhline(np.mean(untrained), color="k", ls="--", lw=1, label="untrained network")
        names = [
            f"{loss}\n({svmax_row(loss)})" if loss in SVMAX_LAMBDA_ROWS else loss for loss in losses
        ]
        ax.set_xticks(np.arange(len(losses)), names, rotation=15, fontsize=8)
        ax.set_title(f"lr = {lr:g}")
        ax.set_ylabel("test Recall@1 (%)")
    if untrained:
        lowest = min(lowest, np.mean(untrained))
    axes[0][0].set_ylim(max(0.0, lowest - 5), 100)
    handles, names = axes[0][0].get_legend_handles_labels()
    fig.legend(
        handles, names, loc="upper center", ncol=len(names), fontsize=9, bbox_to_anchor=(0.5, 0.94)
    )
    # The rect leaves room for the title and the legend above the panels.
    finish_figure(fig, path, title, title_size=10, rect=(0, 0, 1, 0.86))


def _panels(plt, losses, learning_rates):
    """A figure with one panel per (lr row, loss column), shared axes."""
    return plt.subplots(
        len(learning_rates),
        len(losses),
        figsize=(3.6 * len(losses), 2.8 * len(learning_rates)),
        sharex=True,
        sharey=True,
        squeeze=False,
    )


def plot_s_mu(results, losses, methods, learning_rates, bounds, path, title):
    """s_mu of the training batches over training (mean over seeds of the windowed trace), one
    panel per (lr, loss), every method, with the training batch's L and U (dissertation
    Fig. 3.5)."""
    plt = pyplot()
    fig, axes = _panels(plt, losses, learning_rates)
    for row, lr in enumerate(learning_rates):
        for col, loss in enumerate(losses):
            ax = axes[row][col]
            for label, _, _ in rows_for(loss, methods):
                traces = [t for _, _, t in results[(loss, label, lr)] if t]
                if not traces:
                    continue
                length = min(len(t) for t in traces)
                steps = [p["step"] for p in traces[0][:length]]
                values = np.mean(
                    [[p.get("mean_singular_value", np.nan) for p in t[:length]] for t in traces],
                    axis=0,
                )
                ax.plot(steps, values, label=label)
            ax.axhline(bounds[0], color="gray", ls="--", lw=1, label=f"L = {bounds[0]:.3f}")
            ax.axhline(bounds[1], color="gray", ls=":", lw=1, label=f"U = {bounds[1]:.3f}")
            ax.set_title(f"{loss}, lr = {lr:g}", fontsize=9)
            if row == len(learning_rates) - 1:
                ax.set_xlabel("step")
            if col == 0:
                ax.set_ylabel("training-batch s_μ")
            if row == 0 and col == 0 or loss in SVMAX_LAMBDA_ROWS and row == 0:
                ax.legend(fontsize=7)
    finish_figure(fig, path, title, title_size=10, rect=(0, 0, 1, 0.95))


def header(runs, seeds):
    """Command, machine, versions and the per-loss settings the runs resolved to."""
    first = runs[0]
    config = first["config"]
    settings = sorted(
        {
            (r["config"]["loss"], r["config"]["batch_p"], r["config"]["batch_k"])
            + (r["config"]["svmax_lambda"], r["config"]["margin"])
            for r in runs
        }
    )
    lines = [
        f"# SVMax Table 1 protocol on `{config['dataset']}`",
        "",
        grid.provenance(PROGRAM, first),
        "",
        f"Every run: backbone `{config['backbone']}`, d = {config['embedding_dim']}, "
        f"{config['train_steps']} steps (lr fixed for half, then linear to 1e-7), SGD momentum "
        f"0.9, seeds {', '.join(str(seed) for seed in seeds)}, evaluated on the test classes "
        f"every {config['eval_every']} steps; the table shows the last evaluation as mean ± std "
        "over the seeds (sample std, ddof = 1; Δ R@1 is the per-seed difference to the vanilla "
        "run with the same seed and lr). Per loss (P × K, SVMax λ, margin): "
        + "; ".join(
            f"{loss} {p} × {k}, λ {lam:g}{'' if m is None else f', margin {m:g}'}"
            for loss, p, k, lam, m in settings
        )
        + "."
        + "".join(
            f" `{loss}` is the triplet loss with {mining} mining."
            for loss, mining in (("triplet_hard", "batch-hard"), ("triplet_semihard", "semi-hard"))
            if any(r["config"]["loss"] == loss for r in runs)
        ),
        "",
    ]
    if config.get("weights") not in (None, "none"):
        lines += [weights_provenance(config["weights"]), ""]
    return "\n".join(lines)


def weights_provenance(path):
    """One paragraph: the backbone weights file (name, SHA-256) and, when the pretraining
    record sits beside it, what made it (classes, steps, held-out top-1)."""
    if path == "imagenet":
        return "Backbone weights: Keras' ImageNet weights."
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    text = f"Backbone weights: `{os.path.basename(path)}` (SHA-256 {digest}…)"
    record = os.path.join(os.path.dirname(os.path.abspath(path)), "results.json")
    if os.path.isfile(record):
        with open(record) as f:
            pre = json.load(f)
        last = (pre.get("evaluations") or [{}])[-1]
        if "top1" in last:
            c = pre["config"]
            text += (
                f", pretrained by `trainers.pretrain_glyphs` on {pre.get('classes', '?')} "
                f"pretraining classes for {last['step']} steps (batch {c['batch_size']}, lr "
                f"{c['learning_rate']:g}, seed {c['seed']}): held-out top-1 "
                f"{100 * last['top1']:.2f} %, top-5 {100 * last['top5']:.2f} %"
            )
    return text + "."


def records(results, losses, methods, learning_rates):
    """The grid as JSON values: per cell (loss, method row, lr) and seed, the run's status,
    wall seconds and evaluations (step, NMI, R@1, R@8, s_mu); the untrained network per
    seed."""
    keys = ("step", "nmi", "recall_at_1", "recall_at_8", "s_mu")
    cells = []
    for loss in losses:
        for label, _, _ in rows_for(loss, methods):
            for lr in learning_rates:
                runs = [r for r in results["runs"] if _cell_of(r, loss, label, lr)]
                for run in sorted(runs, key=lambda r: r["config"]["seed"]):
                    cells.append(
                        {
                            "loss": loss,
                            "method": label,
                            "learning_rate": lr,
                            "seed": run["config"]["seed"],
                            "status": run["status"],
                            "wall_seconds": run["wall_seconds"],
                            "evaluations": [
                                {k: e[k] for k in keys if k in e} for e in run["evaluations"]
                            ],
                        }
                    )
    untrained = {
        str(seed): {k: e[k] for k in keys if k in e} for seed, e in results["untrained"].items()
    }
    return {"untrained": untrained, "runs": cells}


def plot_recall(results, losses, methods, learning_rates, path, title):
    """Test R@1 over training (mean over seeds, the untrained network at step 0), one panel
    per (lr, loss), every method."""
    plt = pyplot()
    fig, axes = _panels(plt, losses, learning_rates)
    start = [100 * e["recall_at_1"] for e in results["untrained"].values()]
    for row, lr in enumerate(learning_rates):
        for col, loss in enumerate(losses):
            ax = axes[row][col]
            for label, _, _ in rows_for(loss, methods):
                runs = [r for r in results["runs"] if _cell_of(r, loss, label, lr)]
                if not runs:
                    continue
                steps = [0] + [e["step"] for e in runs[0]["evaluations"] if e["step"]]
                curves = [
                    [np.mean(start)]
                    + [100 * e["recall_at_1"] for e in r["evaluations"] if e["step"]]
                    for r in runs
                ]
                length = min(len(c) for c in curves)
                ax.plot(
                    steps[:length],
                    np.mean([c[:length] for c in curves], axis=0),
                    marker="o",
                    ms=3,
                    label=label,
                )
            ax.set_title(f"{loss}, lr = {lr:g}", fontsize=9)
            if row == len(learning_rates) - 1:
                ax.set_xlabel("step")
            if col == 0:
                ax.set_ylabel("test R@1 (%)")
            if row == 0:
                ax.legend(fontsize=7)
    finish_figure(fig, path, title, title_size=10, rect=(0, 0, 1, 0.95))


def _cell_of(run, loss, label, lr):
    """Whether `run` belongs to the table cell (loss, method row `label`, lr)."""
    c = run["config"]
    if c["loss"] != loss or c["learning_rate"] != lr:
        return False
    for row_label, regularizer, lam in rows_for(loss, METHODS):
        if row_label == label:
            return c["regularizer"] == regularizer and (lam is None or c["svmax_lambda"] == lam)
    return False


def reproduce(config):
    base = harness_flags.config_from_flags(retrieval.RetrievalConfig, output_dir=config.output_dir)
    train_steps = base.train_steps or GRID_STEPS.get(base.dataset)
    base = dataclasses.replace(
        base, train_steps=train_steps, eval_every=base.eval_every or train_steps, verbose=0
    )
    results, runs = run_all(config, base)
    losses, methods, learning_rates = config.losses, config.methods, config.learning_rates
    table = header(results["runs"], config.seeds) + "\n"
    table += markdown(results, losses, methods, learning_rates)
    table += "\nTest-set mean singular value of the final embeddings (mean ± std over seeds):\n\n"
    table += s_mu_markdown(results, losses, methods, learning_rates)
    first = results["runs"][0]
    what = (
        f"{first['config']['dataset']}, {first['config']['backbone']}"
        f"{starting_weights(first['config'].get('weights'))}, "
        f"{first['config']['train_steps']} steps, seeds {', '.join(map(str, config.seeds))}"
    )
    batch = first["train_batch_bounds"]
    figures = [
        (
            ".png",
            lambda path: plot(
                results,
                losses,
                methods,
                learning_rates,
                path,
                f"SVMax Table 1 protocol: final test Recall@1, mean ± std over seeds ({what})",
            ),
        ),
        (
            "_s_mu.png",
            lambda path: plot_s_mu(
                results,
                losses,
                methods,
                learning_rates,
                (batch["lower"], batch["upper"]),
                path,
                f"s_μ of the training batches (b = {batch['batch_size']}, d = "
                f"{first['config']['embedding_dim']}) between its bounds, mean over seeds "
                f"({what})",
            ),
        ),
    ]
    if first["config"]["eval_every"] < first["config"]["train_steps"]:
        figures.append(
            (
                "_recall.png",
                lambda path: plot_recall(
                    results,
                    losses,
                    methods,
                    learning_rates,
                    path,
                    f"Test Recall@1 over training, mean over seeds ({what})",
                ),
            )
        )
    wall_time = runs.wall_time(" (training + evaluations, summed over resumptions)")
    grid.write(
        config,
        PROGRAM,
        f"{table}\n{wall_time}\n",
        records(results, losses, methods, learning_rates),
        figures,
        runs.minutes(),
    )


if __name__ == "__main__":
    grid.main(Table1Grid, reproduce, PROGRAM, trainer=retrieval.RetrievalConfig, **TRAINER_FLAGS)
