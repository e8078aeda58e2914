"""What a retrieval run shows: its figures, titled to stand alone."""

import os

import numpy as np

from trainers.harness.plots import finish_figure, pyplot
from trainers.retrieval.options import REGULARIZERS


def run_title(config):
    """What a figure shows, so that it stands alone: dataset, loss, regularizer and λ."""
    c = config
    regularizer = REGULARIZERS[c["regularizer"]].title(c)
    if c.get("xml_lambda"):  # records from before XML lack the key
        regularizer += f" + XML λ = {c['xml_lambda']:g} (m = {c['xml_prototypes']})"
    return (
        f"Retrieval: {c['dataset']}, {c['backbone']}, {c['loss']} + {regularizer}, lr "
        f"{c['learning_rate']:g}, P × K = {c['batch_p']} × {c['batch_k']}, seed {c['seed']}"
    )


def plot_run(results, bounds, directory):
    """``training.png`` (loss; s_mu of the training batches and of the test set, with the
    training batch's [L, U]) and ``recall.png`` (Recall@K over steps, step 0 marked as the
    untrained network, and at the last step); both titled with `run_title`."""
    plt = pyplot()
    title = run_title(results["config"])
    trace, evaluations = results["trace"], results["evaluations"]
    if not trace:
        return
    steps = [t["step"] for t in trace]
    widths = sorted({t.get("steps", 1) for t in trace})
    window = f"mean of {widths[0]} steps" if len(widths) == 1 else "mean of each window"
    fig, (ax_loss, ax_s) = plt.subplots(1, 2, figsize=(11, 4))
    ax_loss.plot(steps, [t.get("loss", np.nan) for t in trace], label="loss")
    ax_loss.set(xlabel="step", ylabel=f"training loss ({window})", title="Loss")
    ax_lr = ax_loss.twinx()
    ax_lr.plot(steps, [t.get("learning_rate", np.nan) for t in trace], color="gray", ls="--")
    ax_lr.set_ylabel("learning rate (dashed)")
    ax_s.plot(
        steps,
        [
            t.get("mean_singular_value", t.get("embedding_mean_singular_value", np.nan))
            for t in trace
        ],
        label=f"s_mu, training batches ({window})",
    )
    ax_s.axhline(bounds[0], color="gray", ls="--", label=f"L = {bounds[0]:.3f}")
    ax_s.axhline(bounds[1], color="gray", ls=":", label=f"U = {bounds[1]:.3f}")
    ax_s.set(xlabel="step", ylabel="mean singular value", title="s_mu of the training batches")
    ax_s.legend(fontsize=8)
    finish_figure(fig, os.path.join(directory, "training.png"), title, title_size=10)
    if not evaluations:
        return
    ks = sorted(int(k.split("_")[-1]) for k in evaluations[-1] if k.startswith("recall_at_"))
    fig, (ax_t, ax_k) = plt.subplots(1, 2, figsize=(11, 4))
    for k in ks:
        ax_t.plot(
            [e["step"] for e in evaluations],
            [e[f"recall_at_{k}"] for e in evaluations],
            marker="o",
            label=f"R@{k}",
        )
    if evaluations[0]["step"] == 0:
        ax_t.annotate(
            "untrained",
            (0, evaluations[0][f"recall_at_{ks[0]}"]),
            textcoords="offset points",
            xytext=(4, -12),
            fontsize=8,
        )
    ax_t.set(xlabel="step", ylabel="recall", title="Test Recall@K over training")
    ax_t.legend(fontsize=8)
    ax_k.plot(ks, [evaluations[-1][f"recall_at_{k}"] for k in ks], marker="o")
    ax_k.set_xscale("log", base=2)
    ax_k.set(xlabel="K", ylabel="Recall@K", title=f"Test recall at step {evaluations[-1]['step']}")
    finish_figure(fig, os.path.join(directory, "recall.png"), title, title_size=10)
