"""The GAN's evaluation: mode coverage and s_mu of generated points from fixed noise, which
are kept as ``samples/step_<N>.npy``."""

import math
import os

import numpy as np

from tf_svmax import metrics
from trainers.gan_mog.config import mixture_weights


def evaluation_noise(config):
    """The fixed noise every evaluation feeds the generator (one seed per run)."""
    rng = np.random.default_rng([config.seed, 2**31])
    return rng.standard_normal((config.num_samples, config.noise_dim)).astype(np.float32)


def sample_path(output_dir, step):
    return os.path.join(output_dir, "samples", f"step_{step:06d}.npy")


def evaluate(config, gan, noise, centres, step):
    """Mode coverage and s_mu of the generator's points from `noise` (``{"metrics": modes
    covered, high-quality fraction, mode KL, s_mu, "info": finite, the mode count and the
    per-mode counts}``; only ``finite`` when a point is not); keeps the points."""
    points = gan.generator.predict(noise, batch_size=2048, verbose=0)
    path = sample_path(config.output_dir, step)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    np.save(path, points)
    finite = bool(np.isfinite(points).all())
    if not finite:
        return {"metrics": {}, "info": {"finite": finite}}
    coverage = metrics.mode_coverage(
        points, centres, config.mixture_std, weights=mixture_weights(config)
    )
    if not math.isfinite(coverage["mode_kl"]):
        # NaN: no high-quality point (the histogram is undefined); inf (points on a mode of
        # weight 0) cannot occur with the drawn weights, which are positive. JSON has neither.
        coverage["mode_kl"] = None
    # On the first batch_size points, so that it compares with the training batches' s_mu and
    # the recorded bounds (s_mu grows with sqrt(rows)).
    batch = points[: config.batch_size].astype(np.float64)
    return {
        "metrics": {
            "modes_covered": coverage["modes_covered"],
            "high_quality_fraction": coverage["high_quality_fraction"],
            "mode_kl": coverage["mode_kl"],
            "s_mu": float(np.linalg.svd(batch, compute_uv=False).mean()),
        },
        "info": {
            "finite": finite,
            "num_modes": coverage["num_modes"],
            "mode_counts": coverage["mode_counts"],
        },
    }


def final_numbers(results):
    """The last evaluation's mode counts, at the top of the record."""
    final = results["evaluations"][-1] if results["evaluations"] else {}
    return {key: final.get(key) for key in ("modes_covered", "high_quality_fraction", "mode_kl")}
