"""Pairwise distance matrices with tensorflow-addons' semantics (values and gradients).

`pairwise_distance` expands ``||a - b||^2 = ||a||^2 + ||b||^2 - 2 a.b`` (one matrix product),
clamps the rounding negatives to zero, and gives exactly zero, with zero gradient, where the
squared distance is not positive (the diagonal, duplicates). The square root is taken of
``d^2 + 1e-16`` at those entries only, so its derivative never sees 0.
"""

import tensorflow as tf

from tf_svmax.ops import _checks

# Added under the square root where the squared distance is <= 0; the result is then masked to
# zero, so this only keeps the derivative of sqrt finite (sqrt'(0) = inf, and inf * 0 = NaN).
_SQRT_GUARD = 1e-16


def pairwise_distance(feature, squared=False):
    """Euclidean distance matrix ``out[i, j] = ||feature[i] - feature[j]||_2``.

    Args:
      feature: `[n, d]` float tensor.
      squared: Return squared distances.

    Returns:
      `[n, n]` tensor of the dtype of `feature` (float16/bfloat16 computed in float32), with an
      exactly zero diagonal.

    Example:
      >>> pairwise_distance([[0.0, 0.0], [3.0, 4.0]])  # [[0, 5], [5, 0]]
    """
    x, dtype = _checks.float_matrix(feature, "feature")  # half precision computed in float32
    # Row norms as a column plus column norms as a row, minus twice the Gram matrix. The same
    # sequence of operations as tensorflow-addons, so that the rounding, and hence the gradient
    # for near-duplicate rows (where the expansion cancels), matches it to the last bits.
    x_t = tf.transpose(x)
    d2 = tf.add(
        tf.reduce_sum(tf.square(x), axis=1, keepdims=True),
        tf.reduce_sum(tf.square(x_t), axis=0, keepdims=True),
    ) - 2.0 * tf.matmul(x, x_t)
    # Rounding can make the expansion slightly negative; a distance is never negative.
    d2 = tf.maximum(d2, 0.0)
    zero = d2 <= 0.0
    if squared:
        distances = d2
    else:
        distances = tf.sqrt(d2 + tf.cast(zero, x.dtype) * _SQRT_GUARD)
    distances = distances * tf.cast(tf.logical_not(zero), x.dtype)
    # The diagonal is exactly zero (the expansion leaves rounding noise there).
    off_diagonal = 1.0 - tf.eye(tf.shape(x)[0], dtype=x.dtype)
    return tf.cast(distances * off_diagonal, dtype)


def angular_distance(feature):
    """Angular (cosine) distance matrix ``out[i, j] = 1 - cos(feature[i], feature[j])``, >= 0.

    Args:
      feature: `[n, d]` float tensor (rows need not be normalized).

    Returns:
      `[n, n]` tensor of the dtype of `feature`.
    """
    x, dtype = _checks.float_matrix(feature, "feature")  # half precision computed in float32
    unit = tf.math.l2_normalize(x, axis=1)
    # Rounding can push 1 - cos slightly below zero for (near-)identical rows.
    distances = tf.maximum(1.0 - tf.matmul(unit, unit, transpose_b=True), 0.0)
    return tf.cast(distances, dtype)


def distance_matrix(embeddings, distance_metric):
    """Dispatches TFA's `distance_metric`: "L2", "squared-L2", "angular" or a callable."""
    if callable(distance_metric):
        return distance_metric(embeddings)
    if distance_metric == "L2":
        return pairwise_distance(embeddings, squared=False)
    if distance_metric == "squared-L2":
        return pairwise_distance(embeddings, squared=True)
    if distance_metric == "angular":
        return angular_distance(embeddings)
    raise ValueError(
        _checks.invalid(
            "distance_metric", "'L2', 'squared-L2', 'angular' or a callable", distance_metric
        )
    )


# Added inside the square root of the "euclidean" metric, as in the SVMax/retrieval originals
# (ahmdtaha/tf_retrieval_baseline `cdist`): keeps sqrt differentiable at zero distance, so the
# diagonal is 1e-6 rather than 0.
EUCLIDEAN_EPSILON = 1e-12
CDIST_METRICS = ("euclidean", "sqeuclidean", "cityblock", "cosine")


def cdist(a, b, metric="euclidean"):
    """All-pairs distances between the rows of `a` (`[n, d]`) and `b` (`[m, d]`).

    Computed from explicit differences (no Gram-expansion cancellation), like the originals:
    ``"euclidean"`` ``sqrt(sum (a - b)^2 + 1e-12)``, ``"sqeuclidean"`` ``sum (a - b)^2``,
    ``"cityblock"`` ``sum |a - b|``, ``"cosine"`` ``1 - a.b`` (rows assumed L2-normalized, as in
    the originals; nothing is normalized here).

    Returns:
      `[n, m]` tensor.
    """
    if metric not in CDIST_METRICS:
        raise ValueError(_checks.invalid("metric", f"one of {CDIST_METRICS}", metric))
    if metric == "cosine":
        return 1.0 - tf.matmul(a, b, transpose_b=True)
    diffs = a[:, tf.newaxis, :] - b[tf.newaxis, :, :]
    if metric == "cityblock":
        return tf.reduce_sum(tf.abs(diffs), axis=-1)
    squared = tf.reduce_sum(tf.square(diffs), axis=-1)
    if metric == "sqeuclidean":
        return squared
    return tf.sqrt(squared + EUCLIDEAN_EPSILON)
