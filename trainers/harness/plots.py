"""What every trainer's figures share: a headless pyplot, an atomic PNG write (and the end of a
figure: its title, layout, write and close) and a row of images."""

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


def finish_figure(fig, path, title=None, *, title_size=None, **layout):
    """Ends `fig` as every figure here ends: `title` above it (at `title_size`; None:
    matplotlib's figure-title size), laid out (``fig.tight_layout(**layout)``, e.g. a `rect`
    that leaves room for the title), written to `path` (`save_figure`) and closed, so that a
    program drawing many figures holds none of them."""
    if title is not None:
        fig.suptitle(title, **({} if title_size is None else {"fontsize": title_size}))
    fig.tight_layout(**layout)
    save_figure(fig, path)
    pyplot().close(fig)


def show_images(axes, images):
    """Each of `images` (``[H, W]`` in [0, 1]) in grey on the axis beside it, without ticks:
    one row of an image grid."""
    for ax, image in zip(axes, images, strict=True):
        ax.imshow(image, cmap="gray", vmin=0, vmax=1)
        ax.set_xticks([])
        ax.set_yticks([])
