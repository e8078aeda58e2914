"""What the reproduction programs' tables share."""

import numpy as np


def mean_std(values, scale=1.0, digits=2):
    """``"m ± s"`` (sample std over seeds, ddof = 1; ``"m"`` alone for one value)."""
    values = scale * np.asarray(values, np.float64)
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{values.mean():.{digits}f} ± {values.std(ddof=1):.{digits}f}"
