"""Independent float64 NumPy/SciPy implementation of the original OLE objective and subgradient.

Follows the semantics of the public PyTorch original (jlezama/OrthogonalLowrankEmbedding,
`pytorch_OLE/OLE.py`) and the OLE paper (Eq. 2, 5, 6): a Python loop over classes, one LAPACK
`gesvd` per class, singular values below `threshold` dropped from ``U V^T``, classes with
nuclear norm <= delta contributing delta and no gradient; objective and gradient divided by N.
The original's per-class loop is the peer `ole_cost` and `spectral_speed` time ours against,
and the independent reference of the OLE tests (`tests/ops/test_ole.py`); it shares no code
with the library.
"""

import numpy as np
import scipy.linalg


def _nuclear_and_subgradient(a, threshold):
    u, s, vt = scipy.linalg.svd(a, full_matrices=False, lapack_driver="gesvd")
    keep = s >= threshold
    return s.sum(), (u[:, keep] * 1.0) @ vt[keep, :]


def ole_reference(labels, x, delta=1.0, threshold=1e-6):
    """Returns `(objective, gradient)` of the OLE loss for `x: [N, D]` and `labels: [N]`."""
    x = np.asarray(x, dtype=np.float64)
    labels = np.asarray(labels).reshape(-1)
    n = x.shape[0]
    objective = 0.0
    gradient = np.zeros_like(x)
    for c in np.unique(labels):
        rows = labels == c
        nuclear, sub = _nuclear_and_subgradient(x[rows], threshold)
        if nuclear > delta:
            objective += nuclear
            gradient[rows] += sub
        else:
            objective += delta
    nuclear, sub = _nuclear_and_subgradient(x, threshold)
    objective -= nuclear
    gradient -= sub
    return objective / n, gradient / n
