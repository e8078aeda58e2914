"""Small-scale evidence for LORAC (seed 003) and XML (seed 004) on the embedded glyph set, over
seeds, reported as mean ± std.

    python -m trainers.reproduce_lorac_xml --table=docs/lorac_xml_glyphs.md   # 15 runs, ~50 min
    python -m trainers.reproduce_lorac_xml --seeds=0 --table=/tmp/quick.md

* LORAC vs MoCo-M vs MoCo: `trainers.contrastive.train_contrastive` with its defaults (M = 4,
  Laplace prior beta = 2 from half the steps on, tau 0.2, N 64, K 2048), one run per method and
  seed in ``<output_dir>/contrastive/<method>_s<seed>``: linear-probe and k-NN accuracy on
  held-out images of the pre-training classes, the mean nuclear norm of the embeddings of 32
  augmented views per held-out image (seed 003 Fig. 4c; its histogram per method in the figure),
  open-set Recall@1 / MAP@R of the features.
* Contrastive loss vs contrastive + XML: `trainers.retrieval.train_retrieval` (no regularizer,
  --xml_train_steps steps, the glyphs' open-set split) with ``xml_lambda`` 0 and --xml_lambda,
  in ``<output_dir>/xml/lambda<λ>_s<seed>``: test Recall@1, MAP@R and NMI.

Re-running resumes unfinished runs and reuses finished ones. Beside the table: ``<table>.png``
and ``<table>.json`` (every run's final evaluation and median seconds per step).
"""

import dataclasses
import os
from typing import ClassVar

import numpy as np

from trainers import contrastive, retrieval
from trainers.harness import grid
from trainers.harness.flags import option, positive_int, rate
from trainers.harness.grid import error_bars, final, signed_mean_std, step_seconds
from trainers.harness.plots import finish_figure, pyplot
from trainers.harness.tables import Column, mean_std

PROGRAM = "reproduce_lorac_xml"


@dataclasses.dataclass(frozen=True)
class LoracXmlGrid(grid.GridConfig):
    TABLE: ClassVar[str] = "lorac_xml.md"

    methods: tuple[str, ...] = option(
        contrastive.METHODS, "Contrastive methods (rows).", choices=contrastive.METHODS
    )
    xml_lambda: float = option(
        0.01, "XML's λ of the second retrieval row (paper: 0.01).", check=rate
    )
    xml_train_steps: int = option(1500, "Retrieval steps of the XML rows.", check=positive_int)
    contrastive_train_steps: int | None = option(
        None, "Pre-training steps (default: the trainer's, 1000 on the glyphs).", check=positive_int
    )
    test_views: int | None = option(
        None,
        "Augmented views per held-out image of the test nuclear norm (default: the trainer's, "
        "the paper's 32).",
        check=positive_int,
    )


LABELS = {"lorac": "LORAC (β = 2)", "moco_m": "MoCo-M (β = ∞)", "moco": "MoCo (M = 2)"}
CONTRASTIVE_COLUMNS = (
    Column("Linear probe %", "linear_probe_accuracy", 100),
    Column("k-NN %", "knn_accuracy", 100),
    Column("Test ‖Q̂‖* ({views} views)", "test_nuclear_norm"),
    Column("Open-set R@1 %", "open_set_recall_at_1", 100),
    Column("Open-set MAP@R %", "open_set_map_at_r", 100),
)
XML_COLUMNS = (
    Column("R@1 %", "recall_at_1", 100),
    Column("MAP@R %", "map_at_r", 100),
    Column("NMI", "nmi", digits=3),
)


def contrastive_config(config, method, seed):
    views = {} if config.test_views is None else {"test_views": config.test_views}
    return contrastive.ContrastiveConfig(
        output_dir=os.path.join(config.output_dir, "contrastive", f"{method}_s{seed}"),
        method=method,
        seed=seed,
        train_steps=config.contrastive_train_steps,
        verbose=0,
        **views,
    )


def xml_config(config, xml_lambda, seed):
    return retrieval.RetrievalConfig(
        output_dir=os.path.join(config.output_dir, "xml", f"lambda{xml_lambda:g}_s{seed}"),
        regularizer="none",
        xml_lambda=xml_lambda,
        train_steps=config.xml_train_steps,
        seed=seed,
        verbose=0,
    )


def rows(cells, labels, columns, baseline=None, first_evaluation=False):
    """Markdown rows: one per cell (label -> runs), mean ± std of each column, then the
    per-seed (paired) difference of the first column to the `baseline` cell's runs."""
    out = []
    for key, runs in cells.items():
        picks = [r["evaluations"][0] if first_evaluation else final(r) for r in runs]
        if any(p is None for p in picks):
            statuses = ", ".join(sorted({r["status"] for r in runs}))
            out.append(f"| {labels[key]} | {statuses} |" + " |" * (len(columns) + 1))
            continue
        values = [column.cell(picks) for column in columns]
        seconds = "–" if first_evaluation else mean_std([step_seconds(r) for r in runs], 1e3, 0)
        delta = "–"
        base = cells.get(baseline, [])
        # No baseline cell (e.g. --methods without moco_m): no difference to show.
        if key != baseline and base and not first_evaluation and all(final(r) for r in base):
            first = columns[0]
            diffs = [
                final(r)[first.key] - final(b)[first.key] for r, b in zip(runs, base, strict=True)
            ]
            delta = signed_mean_std(diffs, first.scale, first.digits)
        out.append(f"| {labels[key]} | " + " | ".join(values) + f" | {seconds} | {delta} |")
    return out


def markdown(contrastive_runs, xml_runs, seeds, xml_lambda):
    first = next(iter(contrastive_runs.values()))[0]
    c, d = first["config"], first["data"]
    x = next(iter(xml_runs.values()))[0]["config"]
    head = "| Method | " + " | ".join(
        column.head.format(views=c["test_views"]) for column in CONTRASTIVE_COLUMNS
    )
    head += " | ms/step | Δ probe vs MoCo-M (paired) |"
    lines = [
        f"# LORAC and XML on the embedded glyph set (seeds {', '.join(map(str, seeds))})",
        "",
        f"{grid.provenance(PROGRAM, first)} Cells are mean ± std over the seeds (sample std, "
        "ddof = 1), evaluated after the last step.",
        "",
        "## Contrastive pre-training: LORAC vs MoCo-M vs MoCo (seed 003)",
        "",
        f"{d['pretrain_images']} unlabelled images of {d['classes']} glyph classes pre-train "
        f"({c['train_steps']} steps, N = {c['batch_size']}, K = {c['queue_size']} negatives, M = "
        f"{c['views']} views for LORAC and MoCo-M, τ = {c['temperature']:g}, key momentum "
        f"{c['key_momentum']:g}, SGD lr {c['learning_rate']:g} cosine, weight decay "
        f"{c['weight_decay']:g}; LORAC's Laplace prior β = {c['beta']:g} from step "
        f"{first['prior_start_step']} on). The linear probe (logistic regression on the "
        f"standardised pooled features) and k-NN (k = {c['knn_k']}, cosine) are trained on "
        f"their labels and tested on {d['heldout_images']} held-out images of the same classes. "
        f"‖Q̂‖* is the nuclear norm of the {c['test_views']} L2-normalised embeddings of "
        f"{c['test_views']} augmented views of a held-out image, in [√{c['test_views']}, "
        f"{c['test_views']}] (seed 003 Fig. 4c: lower with LORAC). Open-set: Recall@1 and MAP@R "
        f"of the features on {d['open_set_images']} images of {d['open_set_classes']} other "
        "classes. ms/step: median over the trace windows after the first. Δ: the per-seed "
        "difference to the MoCo-M run of the same seed, mean ± std.",
        "",
        head,
        "|---|" + "---:|" * (len(CONTRASTIVE_COLUMNS) + 2),
        *rows(
            {"untrained": next(iter(contrastive_runs.values()))},
            {"untrained": "Untrained encoder (step 0)"},
            CONTRASTIVE_COLUMNS,
            first_evaluation=True,
        ),
        *rows(contrastive_runs, LABELS, CONTRASTIVE_COLUMNS, baseline="moco_m"),
        "",
        "## Retrieval: contrastive loss vs contrastive + XML (seed 004)",
        "",
        f"The retrieval trainer on the glyphs' open-set split ({x['backbone']}, contrastive loss "
        f"margin {x['margin']:g}, P × K = {x['batch_p']} × {x['batch_k']}, {x['train_steps']} "
        f"steps, lr {x['learning_rate']:g}, no regularizer); XML adds λ = {xml_lambda:g} of the "
        "cross-batch term with m = 64 prototype histograms of the last convolutional map "
        "(ε = 10, ridge 0.05). Test classes are disjoint from the training classes.",
        "",
        "| Loss | "
        + " | ".join(column.head for column in XML_COLUMNS)
        + " | ms/step | Δ R@1 (paired) |",
        "|---|" + "---:|" * (len(XML_COLUMNS) + 2),
        *rows(
            xml_runs,
            {0.0: "Contrastive", xml_lambda: f"Contrastive + XML (λ = {xml_lambda:g})"},
            XML_COLUMNS,
            baseline=0.0,
        ),
        "",
    ]
    return "\n".join(lines)


def plot(contrastive_runs, split_images, path, title):
    """Histograms of ‖Q̂‖* per method (each method's first seed; seed 003 Fig. 4c) and the
    probe / k-NN accuracies (mean ± std)."""
    import keras  # imported with the training code (after the flags were checked)

    plt = pyplot()
    fig, (ax_hist, ax_bar) = plt.subplots(1, 2, figsize=(12, 4.2))
    for method, runs in contrastive_runs.items():
        run = runs[0]
        if final(run) is None:
            continue
        encoder = keras.saving.load_model(
            os.path.join(run["config"]["output_dir"], "encoder.keras")
        )
        norms = contrastive.augmented_nuclear_norms(
            encoder, split_images, views=run["config"]["test_views"], batch_size=512
        )
        ax_hist.hist(
            norms, bins=40, alpha=0.5, label=f"{LABELS[method]} (seed {run['config']['seed']})"
        )
    ax_hist.set(
        xlabel=f"‖Q̂‖* of {next(iter(contrastive_runs.values()))[0]['config']['test_views']} "
        "augmented views of a held-out image",
        ylabel="images",
        title="Test nuclear norm per image (seed 003 Fig. 4c)",
    )
    ax_hist.legend(fontsize=8)
    methods = list(contrastive_runs)
    width = 0.4
    for i, (key, name) in enumerate(
        (("linear_probe_accuracy", "linear probe"), ("knn_accuracy", "k-NN"))
    ):
        values = [[100 * final(r)[key] for r in contrastive_runs[m] if final(r)] for m in methods]
        means, stds = error_bars(values)
        x = np.arange(len(methods)) + (i - 0.5) * width
        ax_bar.bar(x, means, width, yerr=stds, capsize=3, label=name)
    ax_bar.set_xticks(np.arange(len(methods)), [LABELS[m] for m in methods])
    ax_bar.set(
        ylabel="held-out accuracy % (mean ± std over seeds)", title="Frozen-feature accuracy"
    )
    ax_bar.legend(fontsize=8)
    finish_figure(fig, path, title, title_size=10)


def record(results):
    """One run in the JSON: its status, final evaluation's numbers and timing."""
    last = final(results) or {}
    return {
        "seed": results["config"]["seed"],
        "status": results["status"],
        "final": {k: v for k, v in last.items() if not isinstance(v, (list, dict))},
        "step_seconds": step_seconds(results),
        "wall_seconds": results["wall_seconds"],
    }


def reproduce(config):
    lambdas = (0.0, config.xml_lambda)
    # Per table part: its cells' values, their configs, the trainer (read as the run trains)
    # and its resolve.
    parts = (
        (
            "contrastive",
            config.methods,
            contrastive_config,
            lambda c: contrastive.train_contrastive(c),
            contrastive.resolve,
        ),
        ("xml", lambdas, xml_config, lambda c: retrieval.train_retrieval(c), retrieval.resolve),
    )
    planned = [
        grid.Planned((part, value), train, resolve, make_config(config, value, seed))
        for seed in config.seeds
        for part, values, make_config, train, resolve in parts
        for value in values
    ]
    runs = grid.Runs(PROGRAM, planned)  # refuses every run before any trains
    runs.train()
    contrastive_runs = {m: runs.cells[("contrastive", m)] for m in config.methods}
    xml_runs = {lam: runs.cells[("xml", lam)] for lam in lambdas}
    table = markdown(contrastive_runs, xml_runs, config.seeds, config.xml_lambda)
    first = contrastive_config(config, config.methods[0], config.seeds[0])
    heldout = contrastive.load_split(contrastive.resolve(first))["heldout"][0]
    title = (
        f"Contrastive pre-training on the glyphs: LORAC vs MoCo-M vs MoCo, seeds "
        f"{', '.join(map(str, config.seeds))} (held-out images of the pre-training classes)"
    )
    grid.write(
        config,
        PROGRAM,
        f"{table}\n{runs.wall_time()}\n",
        {
            "contrastive": {m: [record(r) for r in cell] for m, cell in contrastive_runs.items()},
            "xml": {f"lambda={lam:g}": [record(r) for r in cell] for lam, cell in xml_runs.items()},
        },
        [(".png", lambda path: plot(contrastive_runs, heldout, path, title))],
        runs.minutes(),
    )


if __name__ == "__main__":
    grid.main(LoracXmlGrid, reproduce, PROGRAM)
