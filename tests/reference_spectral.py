"""Independent float64 NumPy references for the spectral ops and the SVMax bounds."""

import numpy as np


def singular_values(x):
    return np.linalg.svd(np.asarray(x, dtype=np.float64), compute_uv=False)


def nuclear_norm_and_gradient(x):
    """``||x||_*`` and its gradient ``U V^T`` (valid where singular values are nonzero)."""
    u, s, vt = np.linalg.svd(np.asarray(x, dtype=np.float64), full_matrices=False)
    return s.sum(), u @ vt


def original_bounds(batch_size, dim):
    """The bounds exactly as the originals write them (ahmdtaha/svmax, b >= d)."""
    nuclear_upper = np.sqrt((batch_size * dim) / np.maximum(batch_size, dim)) * np.sqrt(batch_size)
    return np.sqrt(batch_size) / dim, nuclear_upper / dim


def small_batch_bounds(batch_size, dim):
    """The dissertation's bounds for b < d: [sqrt(b)/b, sqrt(b*d/max(b,d)) * sqrt(b)/b]."""
    b = float(batch_size)
    return np.sqrt(b) / b, np.sqrt(b * dim / max(b, dim)) * np.sqrt(b) / b


def svmax_reference(x, bounds, bounded=True):
    """SVMax penalty (Eq. 4 or Eq. 1) and its gradient from a float64 SVD."""
    x = np.asarray(x, dtype=np.float64)
    k = min(x.shape)
    nuclear, polar = nuclear_norm_and_gradient(x)
    s_mu, d_s_mu = nuclear / k, polar / k
    if not bounded:
        return -s_mu, -d_s_mu
    lower, upper = bounds
    value = np.exp((upper - s_mu) / (upper - lower))
    return value, value * (-1.0 / (upper - lower)) * d_s_mu


def unit_rows(rng, b, d, dtype=np.float32):
    x = rng.standard_normal((b, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(dtype)
