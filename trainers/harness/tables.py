"""What the reproduction programs' tables share."""

import dataclasses
import os

import numpy as np


def mean_std(values, scale=1.0, digits=2):
    """``"m ± s"`` (sample std over seeds, ddof = 1; ``"m"`` alone for one value)."""
    values = scale * np.asarray(values, np.float64)
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{values.mean():.{digits}f} ± {values.std(ddof=1):.{digits}f}"


@dataclasses.dataclass(frozen=True)
class Column:
    """A column of a reproduction table: its heading, the evaluation key it shows and how
    (`mean_std`'s `scale` and `digits`)."""

    head: str
    key: str
    scale: float = 1.0
    digits: int = 2

    def cell(self, evaluations):
        """The column's cell over `evaluations` (one per seed): `mean_std` of their values,
        leaving out a None (undefined at that evaluation); "–" where none has one."""
        values = [e[self.key] for e in evaluations if e.get(self.key) is not None]
        return mean_std(values, self.scale, self.digits) if values else "–"


def starting_weights(weights):
    """What the figures' titles say the backbone started from ("" for random weights): a
    fine-tuned grid's figures must not read as trained from scratch."""
    if weights in (None, "none"):
        return ""
    if weights == "imagenet":
        return " fine-tuned from ImageNet weights"
    folder = os.path.basename(os.path.dirname(os.path.abspath(weights)))
    return f" fine-tuned from {folder}/{os.path.basename(weights)}"
