"""The contrastive run's figure."""

import os

from trainers.harness.plots import finish_figure, pyplot


def plot_run(results, directory, title):
    """``training.png``: the loss and the batch's mean ||Q||_* per trace window, and the
    held-out probe / k-NN accuracies and test nuclear norm per evaluation."""
    plt = pyplot()
    trace, evaluations = results["trace"], results["evaluations"]
    if not trace:
        return
    steps = [t["step"] for t in trace]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    axes[0].plot(steps, [t["loss"] for t in trace])
    axes[0].set(xlabel="step", ylabel="loss (window mean)", title="Contrastive loss")
    axes[1].plot(steps, [t["nuclear_norm"] for t in trace], label="training Q (M rows)")
    axes[1].set(xlabel="step", ylabel="mean ||Q||_*", title="Nuclear norm of Q per instance")
    start = results.get("prior_start_step")
    if start is not None and start < steps[-1]:
        for ax in axes[:2]:
            ax.axvline(start, color="grey", ls=":", label="prior on")
    axes[1].legend(fontsize=8)
    if evaluations:
        at = [e["step"] for e in evaluations]
        axes[2].plot(
            at, [e["linear_probe_accuracy"] for e in evaluations], marker="o", label="linear probe"
        )
        axes[2].plot(at, [e["knn_accuracy"] for e in evaluations], marker="s", label="k-NN")
        axes[2].plot(
            at, [e["open_set_recall_at_1"] for e in evaluations], marker="^", label="open-set R@1"
        )
        twin = axes[2].twinx()
        twin.plot(
            at,
            [e["test_nuclear_norm"] for e in evaluations],
            color="k",
            ls="--",
            label="test ||Q̂||_*",
        )
        twin.set_ylabel(f"mean test ||Q̂||_* ({results['config']['test_views']} views)")
        twin.legend(fontsize=8, loc="lower right")
    axes[2].set(xlabel="step", ylabel="held-out accuracy", title="Evaluation")
    axes[2].legend(fontsize=8, loc="upper left")
    finish_figure(fig, os.path.join(directory, "training.png"), title)
