"""SVMax paper Table 1 on any dataset: {vanilla, spread-out, SVMax} x learning rates x losses.

    python -m trainers.reproduce_table1 --dataset=digits --table=docs/table1_digits.md
    python -m trainers.reproduce_table1 --dataset=cub200 --data_dir=/data/CUB_200_2011 \\
        --backbone=inception_v3 --weights=imagenet --table=docs/table1_cub200.md

Every run is `trainers.retrieval.train_retrieval` with the paper's per-loss settings, in its own
folder under --output_dir (re-running resumes or skips finished runs). The markdown table has
Table 1's layout: NMI, R@1, R@8 and Delta R@1 (against the vanilla loss at the same learning
rate) per learning rate; the triplet loss gets SVMax rows with lambda = 1 and 0.1. A first row
shows the untrained network (evaluated once: every run starts from the same seeded weights), a
second table the final test embeddings' s_mu against its [L, U] bounds (a collapsed embedding
sits near L). The file starts with the command, the machine and the settings the runs used.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import dataclasses  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags, logging  # noqa: E402

from trainers import retrieval  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_enum("dataset", "digits", list(retrieval.DATASETS), "Dataset (see train_retrieval).")
flags.DEFINE_string("data_dir", None, "Dataset folder (unless digits).")
flags.DEFINE_enum("backbone", "small_cnn", list(retrieval.models.BACKBONES), "Backbone.")
flags.DEFINE_string("weights", None, "Backbone weights (see train_retrieval).")
flags.DEFINE_list(
    "losses",
    ["contrastive", "triplet_hard", "npair", "angular"],
    "Ranking losses (Table 1: contrastive, triplet, N-pair, angular).",
)
flags.DEFINE_list("learning_rates", ["0.01", "0.001", "0.0001"], "Table 1's learning rates.")
flags.DEFINE_integer("train_steps", None, "Steps per run (default: the dataset's).")
flags.DEFINE_integer("seed", 0, "Seed of every run.")
flags.DEFINE_string("output_dir", "runs/table1", "Parent folder of the runs.")
flags.DEFINE_string("table", None, "Markdown output (default: <output_dir>/table1.md).")

METHODS = (("Vanilla", "none", None), ("Spread-out", "spread_out", None), ("SVMax", "svmax", None))
TRIPLET_SVMAX = (("SVMax λ = 1", "svmax", 1.0), ("SVMax λ = 0.1", "svmax", 0.1))


def rows_for(loss):
    if loss.startswith("triplet"):
        return METHODS[:2] + TRIPLET_SVMAX
    return METHODS


def run_all(base, losses, learning_rates):
    """{(loss, method label, lr): (status, final evaluation dict)}; ``"untrained"`` holds the
    evaluation of the initial weights, ``"runs"`` every run's results."""
    # Every run builds the same seeded network, so one step-0 evaluation serves the grid
    # (on CUB or SOP an evaluation costs minutes; 39 copies of it would be waste).
    base = dataclasses.replace(base, loss=losses[0], evaluate_untrained=False)
    untrained = retrieval.evaluate_untrained(base)
    print(f"[reproduce_table1] untrained network: R@1 {untrained['recall_at_1']:.4f}", flush=True)
    out = {"untrained": [untrained], "runs": []}
    total = sum(len(rows_for(loss)) for loss in losses) * len(learning_rates)
    for loss in losses:
        for label, regularizer, lam in rows_for(loss):
            for lr in learning_rates:
                name = f"{loss}_{regularizer}{'' if lam is None else f'_l{lam:g}'}_lr{lr:g}"
                config = dataclasses.replace(
                    base,
                    loss=loss,
                    regularizer=regularizer,
                    svmax_lambda=lam,
                    learning_rate=lr,
                    output_dir=os.path.join(base.output_dir, name),
                )
                print(f"[reproduce_table1] {len(out['runs']) + 1}/{total} {name}", flush=True)
                keras.backend.clear_session()
                results = retrieval.train_retrieval(config)
                out["runs"].append(results)
                print(
                    f"[reproduce_table1]   {results['status']} in {results['wall_seconds']:.0f} s: "
                    f"{retrieval.summary(results)}",
                    flush=True,
                )
                evaluations = results["evaluations"]
                last = evaluations[-1] if evaluations and evaluations[-1]["step"] else None
                out[(loss, label, lr)] = (results["status"], last)
    return out


def markdown(results, losses, learning_rates):
    head = (
        "| Method | "
        + " | ".join(f"NMI | R@1 | R@8 | Δ R@1 (lr={lr:g})" for lr in learning_rates)
        + " |"
    )
    lines = [head, "|---|" + "---:|" * (4 * len(learning_rates))]
    if results["untrained"]:
        ev = results["untrained"][0]
        cells = [f"{ev['nmi']:.3f}", f"{100 * ev['recall_at_1']:.2f}"]
        cells += [f"{100 * ev['recall_at_8']:.2f}", ""]
        lines.append(
            "| Untrained network (step 0) | " + " | ".join(cells * len(learning_rates)) + " |"
        )
    for loss in losses:
        lines.append(f"| **{loss}** |" + " |" * (4 * len(learning_rates)))
        for label, _, _ in rows_for(loss):
            cells = []
            for lr in learning_rates:
                status, ev = results[(loss, label, lr)]
                vanilla_status, vanilla = results[(loss, "Vanilla", lr)]
                if vanilla_status != "completed":
                    vanilla = None  # no Δ against a diverged run's last evaluation
                if ev is None or status != "completed":
                    cells += [status, "", "", ""]
                    continue
                r1, r8 = 100 * ev["recall_at_1"], 100 * ev["recall_at_8"]
                delta = (
                    ""
                    if label == "Vanilla" or vanilla is None
                    else (f"{r1 - 100 * vanilla['recall_at_1']:+.2f}")
                )
                cells += [f"{ev['nmi']:.3f}", f"{r1:.2f}", f"{r8:.2f}", delta]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def s_mu_markdown(results, losses, learning_rates):
    """s_mu of the final test embedding with its [L, U] (collapse shows as s_mu near L)."""
    lines = [
        "| Loss | Method | " + " | ".join(f"s_μ (lr={lr:g})" for lr in learning_rates) + " |",
        "|---|---|" + "---:|" * len(learning_rates),
    ]
    bounds = None
    for loss in losses:
        for label, _, _ in rows_for(loss):
            cells = []
            for lr in learning_rates:
                status, ev = results[(loss, label, lr)]
                if ev is None or status != "completed":
                    cells.append(status)
                    continue
                cells.append(f"{ev['s_mu']:.3f}")
                bounds = (ev["s_mu_lower"], ev["s_mu_upper"])
            lines.append(f"| {loss} | {label} | " + " | ".join(cells) + " |")
    if results["untrained"]:
        s_mu = results["untrained"][0]["s_mu"]
        lines.append(
            "| | Untrained network | " + " | ".join([f"{s_mu:.3f}"] * len(learning_rates)) + " |"
        )
    if bounds:
        lines.append(
            f"\nBounds for the test set's shape: L = {bounds[0]:.4f}, U = {bounds[1]:.4f}."
        )
    return "\n".join(lines) + "\n"


def plot(results, losses, learning_rates, path):
    """Grouped bars of the final test R@1 per loss and method, one panel per learning rate, with
    the untrained network as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [label for label, _, _ in METHODS[:2]] + ["SVMax"]
    fig, axes = plt.subplots(
        1, len(learning_rates), figsize=(4.5 * len(learning_rates), 4), sharey=True, squeeze=False
    )
    for ax, lr in zip(axes[0], learning_rates, strict=True):
        for m, label in enumerate(labels):
            heights = []
            for loss in losses:
                # Triplet: the SVMax row with the paper's lambda (0.1).
                row = "SVMax λ = 0.1" if label == "SVMax" and loss.startswith("triplet") else label
                status, ev = results[(loss, row, lr)]
                ok = ev is not None and status == "completed"
                heights.append(100 * ev["recall_at_1"] if ok else np.nan)
            xs = np.arange(len(losses)) + (m - 1) * 0.27
            ax.bar(xs, heights, width=0.27, label=label)
        if results["untrained"]:
            start = 100 * results["untrained"][0]["recall_at_1"]
            ax.axhline(start, color="k", ls="--", lw=1, label="untrained network")
        ax.set_xticks(np.arange(len(losses)), losses, rotation=15)
        ax.set_title(f"lr = {lr:g}")
        ax.set_ylabel("test Recall@1 (%)")
    finals = [results[k][1] for k in results if isinstance(k, tuple)]
    low = min([100 * ev["recall_at_1"] for ev in finals if ev is not None] or [0.0])
    axes[0][0].set_ylim(max(0.0, low - 5), 100)  # the differences are a few points
    handles, names = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, names, loc="upper center", ncol=len(names), fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.92))  # room for the legend above the panels
    tmp = f"{path}.tmp.png"
    fig.savefig(tmp, dpi=100)
    os.replace(tmp, path)
    plt.close(fig)


def header(runs, argv):
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
        "Generated by `python -m trainers.reproduce_table1 " + " ".join(argv[1:]) + "`",
        f"on {first['device']} with TensorFlow {first['versions']['tensorflow']}, Keras "
        f"{first['versions']['keras']}, tf_svmax {first['versions']['tf_svmax']}.",
        "",
        f"Every run: backbone `{config['backbone']}`, d = {config['embedding_dim']}, "
        f"{config['train_steps']} steps (lr fixed for half, then linear to 1e-7), SGD momentum "
        f"0.9, seed {config['seed']}, evaluated on the test classes every {config['eval_every']} "
        "steps; the table shows the last evaluation. Per loss (P × K, SVMax λ, margin): "
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
    return "\n".join(lines)


def main(argv):
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)  # no INFO line per checkpoint save
    learning_rates = [float(v) for v in FLAGS.learning_rates]
    base = retrieval.RetrievalConfig(
        output_dir=FLAGS.output_dir,
        dataset=FLAGS.dataset,
        data_dir=FLAGS.data_dir,
        backbone=FLAGS.backbone,
        weights=FLAGS.weights,
        train_steps=FLAGS.train_steps,
        seed=FLAGS.seed,
        verbose=0,
    )
    started = time.perf_counter()
    results = run_all(base, FLAGS.losses, learning_rates)
    del argv  # absl keeps only positional arguments; the header shows the whole command
    table = header(results["runs"], sys.argv) + "\n"
    table += markdown(results, FLAGS.losses, learning_rates)
    table += "\nTest-set mean singular value of the final embeddings:\n\n"
    table += s_mu_markdown(results, FLAGS.losses, learning_rates)
    minutes = (time.perf_counter() - started) / 60
    path = FLAGS.table or os.path.join(FLAGS.output_dir, "table1.md")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        run_minutes = sum(r["wall_seconds"] for r in results["runs"]) / 60
        f.write(
            f"{table}\nWall time of this invocation: {minutes:.1f} min; the runs' own wall times "
            f"(training + evaluations, summed over resumptions) add up to {run_minutes:.1f} min.\n"
        )
    figure = os.path.splitext(path)[0] + ".png"
    plot(results, FLAGS.losses, learning_rates, figure)
    print(table)
    print(f"[reproduce_table1] wrote {path} and {figure} ({minutes:.1f} min)")


if __name__ == "__main__":
    app.run(main)
