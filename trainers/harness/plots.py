"""What every trainer's figures share: a headless pyplot and an atomic PNG write."""

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
