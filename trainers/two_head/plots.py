"""What a two-head run shows: its description and its figures."""

import os

import numpy as np

from trainers.harness.plots import finish_figure, pyplot


def plot_run(results, directory, title):
    """``training.png``: the training losses, and the accuracy of the training batches beside
    the test accuracy, macro accuracy and smallest-K recall over steps; titled `title`."""
    plt = pyplot()
    trace, evaluations = results["trace"], results["evaluations"]
    if not trace:
        return
    steps = [t["step"] for t in trace]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4))
    for key in sorted(k for k in trace[-1] if k.endswith("loss")):
        ax_loss.plot(steps, [t.get(key, np.nan) for t in trace], label=key)
    ax_loss.set(xlabel="step", ylabel="training loss (window mean)", title="Training losses")
    ax_loss.legend(fontsize=8)
    accuracy_key = next((k for k in trace[-1] if k.endswith("accuracy")), None)
    if accuracy_key:
        ax_acc.plot(steps, [t.get(accuracy_key, np.nan) for t in trace], label="training batches")
    if evaluations:
        ax_acc.plot(
            [e["step"] for e in evaluations],
            [e["accuracy"] for e in evaluations],
            marker="o",
            label="test (top-1)",
        )
        ax_acc.plot(
            [e["step"] for e in evaluations],
            [e["macro_accuracy"] for e in evaluations],
            marker="s",
            ls="--",
            label="test (macro)",
        )
        k = min(int(key.split("_")[-1]) for key in evaluations[-1] if key.startswith("recall_at_"))
        ax_acc.plot(
            [e["step"] for e in evaluations],
            [e[f"recall_at_{k}"] for e in evaluations],
            marker="^",
            ls=":",
            label=f"test R@{k} (embedding)",
        )
        if evaluations[0]["step"] == 0:
            ax_acc.annotate(
                "untrained",
                (0, evaluations[0]["accuracy"]),
                textcoords="offset points",
                xytext=(4, 6),
                fontsize=8,
            )
    ax_acc.set(xlabel="step", ylabel="accuracy", title="Accuracy")
    ax_acc.legend(fontsize=8)
    finish_figure(fig, os.path.join(directory, "training.png"), title)


def run_title(config, num_classes):
    """What a figure shows, so that it stands alone: mode, terms, data and seed."""
    return (
        f"Two-head trainer: {describe(config)}, {config.dataset} ({num_classes} classes), "
        f"seed {config.seed}"
    )


def describe(config):
    """The mode with the weight of its term, and SVMax's if added."""
    extra = f" + SVMax (λ {config.svmax_lambda})" if config.svmax_lambda > 0 else ""
    term = "" if config.mode == "softmax" else f" (λ {config.regularizer_lambda})"
    return f"{config.mode}{term}{extra}"
