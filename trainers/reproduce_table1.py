"""SVMax paper Table 1 on any dataset: {vanilla, spread-out, SVMax} x learning rates x losses.

    python -m trainers.reproduce_table1 --dataset=digits --table=docs/table1_digits.md
    python -m trainers.reproduce_table1 --dataset=cub200 --data_dir=/data/CUB_200_2011 \\
        --backbone=inception_v3 --weights=imagenet --table=docs/table1_cub200.md

Every run is `trainers.retrieval.train_retrieval` with the paper's per-loss settings, in its own
folder under --output_dir (re-running resumes or skips finished runs). The markdown table has
Table 1's layout: NMI, R@1, R@8 and Delta R@1 (against the vanilla loss at the same learning
rate) per learning rate; the triplet loss gets SVMax rows with lambda = 1 and 0.1.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import dataclasses  # noqa: E402
import time  # noqa: E402

import keras  # noqa: E402
from absl import app, flags  # noqa: E402

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
    """{(loss, method label, lr): (status, final evaluation dict)}; the key ``"untrained"``
    holds the step-0 evaluations (every run starts from the same seeded weights)."""
    out = {"untrained": []}
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
                print(f"[reproduce_table1] {name}", flush=True)
                keras.backend.clear_session()
                results = retrieval.train_retrieval(config)
                evaluations = results["evaluations"]
                last = evaluations[-1] if evaluations and evaluations[-1]["step"] else None
                out[(loss, label, lr)] = (results["status"], last)
                out["untrained"] += [e for e in evaluations if e["step"] == 0]
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
                _, vanilla = results[(loss, "Vanilla", lr)]
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


def main(argv):
    del argv
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
    table = markdown(results, FLAGS.losses, learning_rates)
    table += "\nTest-set mean singular value of the final embeddings:\n\n"
    table += s_mu_markdown(results, FLAGS.losses, learning_rates)
    starts = {round(e["recall_at_1"], 9) for e in results["untrained"]}
    if len(starts) > 1:
        table += (
            f"\nNote: the runs' step-0 R@1 differ ({sorted(starts)}); the row shows the first.\n"
        )
    minutes = (time.perf_counter() - started) / 60
    path = FLAGS.table or os.path.join(FLAGS.output_dir, "table1.md")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(f"{table}\nWall time of this invocation: {minutes:.1f} min.\n")
    print(table)
    print(f"[reproduce_table1] wrote {path} ({minutes:.1f} min)")


if __name__ == "__main__":
    app.run(main)
