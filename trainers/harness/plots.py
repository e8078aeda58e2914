"""What every trainer's figures share: a headless pyplot, an atomic PNG write (and the end of a
figure: its title, layout, write and close) and grids of images."""

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


def image_grid(rows, path, title, *, figsize, top, **ylabel):
    """Writes a grid of grey images to `path` (`finish_figure`): a row per ``(name, images)``
    of `rows` (as many images in each), its name at its left (`ylabel`: ``set_ylabel``'s
    keywords), `title` above (size 9); the images fill the figure below `top` (a fraction of
    its height), tightly packed."""
    fig, axes = pyplot().subplots(len(rows), len(rows[0][1]), figsize=figsize, squeeze=False)
    for axes_row, (name, images) in zip(axes, rows, strict=True):
        show_images(axes_row, images)
        axes_row[0].set_ylabel(name, rotation=0, **ylabel)
    finish_figure(fig, path, title, title_size=9, rect=(0, 0, 1, top), h_pad=0.1, w_pad=0.1)
