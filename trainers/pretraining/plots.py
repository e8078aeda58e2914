"""The pretraining run's figure."""

import os

import numpy as np

from trainers.harness.plots import finish_figure, pyplot

# The held-out accuracies an evaluation records.
METRIC_KEYS = ("top1", "top5")


def plot_run(results, directory):
    """``pretraining.png``: the training loss and the held-out top-1 / top-5 over steps,
    titled with the backbone, the class count and the seed."""
    trace, evaluations = results["trace"], results["evaluations"]
    if not trace:
        return
    c = results["config"]
    plt = pyplot()
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4))
    ax_loss.plot([t["step"] for t in trace], [t.get("loss", np.nan) for t in trace])
    ax_loss.set(xlabel="step", ylabel="cross-entropy (window mean)", title="Training loss")
    for key in METRIC_KEYS:
        ax_acc.plot(
            [e["step"] for e in evaluations], [e[key] for e in evaluations], marker="o", label=key
        )
    ax_acc.set(xlabel="step", ylabel="held-out accuracy", title="Held-out top-1 / top-5")
    ax_acc.legend(fontsize=8)
    classes = results.get("classes", "?")
    finish_figure(
        fig,
        os.path.join(directory, "pretraining.png"),
        f"Pretraining {c['backbone']} on the glyph pretraining source ({classes} classes), "
        f"batch {c['batch_size']}, lr {c['learning_rate']:g}, {c['train_steps']} steps, "
        f"seed {c['seed']}",
        title_size=10,
    )
