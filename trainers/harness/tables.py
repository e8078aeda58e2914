"""What the reproduction programs' tables share."""

import os

import numpy as np


def mean_std(values, scale=1.0, digits=2):
    """``"m ± s"`` (sample std over seeds, ddof = 1; ``"m"`` alone for one value)."""
    values = scale * np.asarray(values, np.float64)
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{values.mean():.{digits}f} ± {values.std(ddof=1):.{digits}f}"


def starting_weights(weights):
    """What the figures' titles say the backbone started from ("" for random weights): a
    fine-tuned grid's figures must not read as trained from scratch."""
    if weights in (None, "none"):
        return ""
    if weights == "imagenet":
        return " fine-tuned from ImageNet weights"
    folder = os.path.basename(os.path.dirname(os.path.abspath(weights)))
    return f" fine-tuned from {folder}/{os.path.basename(weights)}"
