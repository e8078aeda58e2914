"""Mode coverage of generated 2-D points, as VEEGAN (Srivastava et al. 2017, Sec. 5.1) counts it
on the Gaussian-ring benchmark.

A generated point is *high quality* when it lies within `sigmas` standard deviations of its
nearest mode centre; a mode is *covered* when at least `min_share` of all generated points are
high-quality points of that mode. The KL divergence compares the high-quality points' histogram
over modes with the target mixture's weights (uniform unless given; then 0: every mode equally
represented, ln(num_modes): one mode).
"""

import numpy as np

from tf_svmax import checks


def mode_coverage(points, centres, std, *, sigmas=3.0, min_share=0.01, weights=None):
    """Modes covered, high-quality fraction and mode KL of generated `points`.

    Args:
      points: `[n, d]` generated points (n >= 1, finite numbers).
      centres: `[m, d]` mode centres of the target mixture (m >= 1, finite numbers).
      std: The mixture's per-coordinate standard deviation.
      sigmas: A point within ``sigmas * std`` (Euclidean) of its nearest centre is high quality
        (VEEGAN: 3).
      min_share: A mode is covered when its high-quality points are at least this share of all
        `n` points (1 %: 25 of 2,500).
      weights: The target mixture's `[m]` mode weights (normalised here), or None for equal
        weights. Only the KL uses them: a mode of weight below `min_share` can be covered only
        by over-representing it.

    Returns:
      A dict: ``modes_covered`` (int), ``num_modes``, ``high_quality_fraction`` (of all n),
      ``mode_kl`` (``KL(p || weights)`` of the high-quality points' mode histogram p, natural
      log; NaN when no point is high quality, inf when a mode of weight 0 holds points),
      ``mode_counts`` (high-quality points per mode).
    """
    x = checks.finite_matrix(points, "points")
    # A NaN centre is nearest to no point (an extra mode never covered, KL NaN); an inf one is
    # a mode no point can reach (7 of 8 covered): neither is a mode of a mixture, refused.
    c = checks.finite_matrix(centres, "centres")
    if c.shape[1] != x.shape[1]:
        raise ValueError(checks.invalid("centres", f"a non-empty [m, {x.shape[1]}] array", c.shape))
    std = checks.check_non_negative_number(std, "std")
    sigmas = checks.check_non_negative_number(sigmas, "sigmas")
    min_share = checks.check_fraction(min_share, "min_share")
    if std == 0:
        raise ValueError(checks.invalid("std", "a float > 0", std))
    target = checks.mode_weights(weights, len(c))
    if target is None:
        target = np.full(len(c), 1.0 / len(c))
    distance = np.sqrt(((x[:, None, :] - c[None]) ** 2).sum(-1))
    nearest = distance.argmin(axis=1)
    good = distance[np.arange(len(x)), nearest] <= sigmas * std
    counts = np.bincount(nearest[good], minlength=len(c))
    total = int(counts.sum())
    if total:
        p = counts / total
        held = p > 0
        with np.errstate(divide="ignore"):  # a held mode of weight 0: KL is +inf, as it is
            kl = float(np.sum(p[held] * np.log(p[held] / target[held])))
    else:
        kl = float("nan")
    return {
        "modes_covered": int(np.count_nonzero(counts >= min_share * len(x))),
        "num_modes": len(c),
        "high_quality_fraction": total / len(x),
        "mode_kl": kl,
        "mode_counts": counts.tolist(),
    }
