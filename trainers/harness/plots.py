"""What every trainer's figures share: a headless pyplot, an atomic PNG write and a row of
images."""

import os


def pyplot():
    """`matplotlib.pyplot` on the non-interactive Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path):
    """Writes `fig` to `path` (100 dpi) through a temporary file, so a reader (or a run killed
    mid-write) never sees half a PNG."""
    tmp = f"{path}.tmp.png"
    fig.savefig(tmp, dpi=100)
    os.replace(tmp, path)


def show_images(axes, images):
    """Each of `images` (``[H, W]`` in [0, 1]) in grey on the axis beside it, without ticks:
    one row of an image grid."""
    for ax, image in zip(axes, images, strict=True):
        ax.imshow(image, cmap="gray", vmin=0, vmax=1)
        ax.set_xticks([])
        ax.set_yticks([])
