"""The GAN run's figures, and the density panel `reproduce_gan_mog` draws as well."""

import os

import numpy as np

from tf_svmax import data
from trainers.gan_mog.evaluate import sample_path
from trainers.harness.plots import finish_figure, pyplot

# Square the heat maps cover (the ring has radius 2; the original plots [-5, 5]).
PLOT_EXTENT = 3.0


def draw_density(ax, points, bins=120):
    """A log-scaled 2-D histogram of `points` on the square of side 2 * PLOT_EXTENT (non-finite
    points left out), without ticks."""
    points = points[np.isfinite(points).all(axis=1)]
    edges = np.linspace(-PLOT_EXTENT, PLOT_EXTENT, bins + 1)
    hist, _, _ = np.histogram2d(points[:, 0], points[:, 1], bins=[edges, edges])
    extent = [-PLOT_EXTENT, PLOT_EXTENT, -PLOT_EXTENT, PLOT_EXTENT]
    ax.imshow(np.log1p(hist.T), origin="lower", cmap="Greens", extent=extent)
    ax.set_xticks([])
    ax.set_yticks([])


def plot_run(results, directory, title):
    """``samples.png``: a 2-D histogram of the generated points at every evaluation (the last
    panel the target mixture); ``training.png``: losses and modes covered over steps."""
    plt = pyplot()
    config = results["config"]
    centres = np.asarray(results["mixture"]["centres"])
    steps = [e["step"] for e in results["evaluations"]]
    panels = [
        (f"step {s}", sample_path(config["output_dir"], s), e)
        for s, e in zip(steps, results["evaluations"], strict=False)
    ]
    panels = [p for p in panels if os.path.exists(p[1])]
    if panels:
        fig, axes = plt.subplots(1, len(panels) + 1, figsize=(2.0 * (len(panels) + 1), 2.4))
        for ax, (label, path, record) in zip(axes, panels, strict=False):
            draw_density(ax, np.load(path))
            covered = record.get("modes_covered")
            label += "" if covered is None else f"\n{covered}/{len(centres)} modes"
            ax.set_title(label, fontsize=8)
        truth, _ = data.sample_gaussian_ring(
            len(np.load(panels[-1][1])),
            seed=1,
            weights=results["mixture"].get("weights"),
            num_modes=len(centres),
            radius=config["mixture_radius"],
            std=config["mixture_std"],
        )
        draw_density(axes[-1], truth)
        axes[-1].set_title("target mixture", fontsize=8)
        finish_figure(fig, os.path.join(directory, "samples.png"), title, title_size=9)
    trace = results["trace"]
    if not trace:
        return
    fig, (ax_loss, ax_modes) = plt.subplots(1, 2, figsize=(10, 3.6))
    for key in ("d_loss", "g_loss"):
        ax_loss.plot([t["step"] for t in trace], [t[key] for t in trace], label=key)
    ax_loss.set(xlabel="step", ylabel="loss (window mean)", title="Discriminator and generator")
    ax_loss.legend(fontsize=8)
    ax_modes.plot(
        steps, [e.get("modes_covered", np.nan) for e in results["evaluations"]], marker="o"
    )
    ax_modes.set(
        xlabel="step",
        ylabel=f"modes covered (of {len(centres)})",
        title="Mode coverage (VEEGAN: 3σ, ≥ 1 %)",
        ylim=(-0.3, len(centres) + 0.3),
    )
    finish_figure(fig, os.path.join(directory, "training.png"), title, title_size=9)
