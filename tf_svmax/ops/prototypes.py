"""The linear algebra of cross-batch metric learning (XML, seed `004`, Sec. 2).

GAP as a convex combination of m learnable prototypes: the histogram of an image's n
convolutional features on the prototypes (Eq. 2.4, the entropy-smoothed assignment)::

    z_i = (1/n) sum_j softmax_i(eps * nu_i^T x_j)                                    (eps = 10)

and prototypes fitted in closed form to one part of a batch by ridge regression from the
histograms Z to the embeddings Y (Eq. 2.8), then used to predict the embeddings of the other
part from its histograms (Y_hat_2 = V_1 Z_2, Sec. 2.3)::

    V = (Z Z^T + ridge I)^{-1} Z Y^T  =  Z (Z^T Z + ridge I)^{-1} Y^T          (m x m or b x b)

Here rows are samples: `histograms` is `[B, m]` (Z^T) and `embeddings` `[B, e]` (Y^T).
"""

import keras
from keras import ops

from tf_svmax import _backend, checks


def _floating(x, arg):
    """`x` as a tensor, a TypeError naming `arg` unless floating (as the spectral ops)."""
    x = checks.to_tensor(x, arg)
    dtype = keras.backend.standardize_dtype(x.dtype)
    if not keras.backend.is_float_dtype(dtype):
        raise TypeError(
            checks.invalid(arg, "a floating-point tensor", f"<tensor of dtype {dtype}>")
        )
    return x


def _shape_text(shape):
    """A static shape as the messages show it: ``(4, 3)``, or ``<unknown>`` (unknown rank)."""
    return "<unknown>" if shape is None else str(shape)


def prototype_histograms(features, prototypes, *, epsilon=10.0):
    """Soft histograms of every image's features on the prototypes (XML Eq. 2.4).

    Args:
      features: `[B, n, d]` floating-point convolutional features (n >= 1 locations per image).
      prototypes: `[m, d]` prototype features (m >= 1).
      epsilon: Inverse temperature of the assignment (paper: 10).

    Returns:
      `[B, m]`: each row is non-negative and sums to 1.
    """
    epsilon = checks.check_non_negative_number(epsilon, "epsilon")
    x = _floating(features, "features")
    dtype = checks.compute_dtype(x.dtype)
    x = ops.cast(x, dtype)
    v = ops.cast(_floating(prototypes, "prototypes"), dtype)
    x_shape, v_shape = checks.static_shape(x), checks.static_shape(v)
    if x_shape is None or len(x_shape) != 3 or x_shape[1] == 0:  # the mean of nothing is NaN
        raise ValueError(
            checks.invalid(
                "features", "a [B, n, d] tensor with n >= 1", f"<shape {_shape_text(x_shape)}>"
            )
        )
    d = x_shape[-1]
    if (
        v_shape is None
        or len(v_shape) != 2
        or v_shape[0] == 0
        or d is not None
        and v_shape[-1] not in (None, d)
    ):
        raise ValueError(
            checks.invalid(
                "prototypes",
                f"a [m, d] tensor with m >= 1 and d = {d} (as `features` {x_shape})",
                f"<shape {_shape_text(v_shape)}>",
            )
        )
    # Scores eps * nu_i^T x_j of every location and prototype (Eq. 2.4), as one [B n, d] x
    # [d, m] product: on TensorFlow the same rounding as the original's tf.einsum, values and
    # gradients (Keras' einsum materializes the transpose, which rounds otherwise).
    batch, locations, dim = ops.shape(x)
    flat_scores = _backend.matmul(ops.reshape(x, [-1, dim]), v, transpose_b=True)
    scores = epsilon * ops.reshape(flat_scores, [batch, locations, ops.shape(v)[0]])
    return _mean_over_locations(ops.softmax(scores, axis=-1))


def _mean_over_locations(assignments):
    """The mean over axis 1 of `[B, n, m]`: `keras.ops.mean` on TensorFlow (`tf.reduce_mean`,
    the original's rounding; Grappler rewrites a division by a constant n into a product, which
    rounds differently), the sum over n elsewhere: Keras' PyTorch `mean` computes float64 in
    float32 (its type promotion)."""
    return _backend.mean_in_dtype(assignments, axis=1)


def fit_prototypes(histograms, embeddings, weights, *, ridge=0.05):
    """`[m, e]` ridge solution ``argmin_V sum_i w_i |z_i V - y_i|^2 + ridge |V|^2`` for 0/1
    weights `w` (the rows fitted), solved in the smaller of the m x m and b x b forms."""
    histograms, embeddings, weights = (
        ops.convert_to_tensor(t) for t in (histograms, embeddings, weights)
    )
    z = histograms * ops.expand_dims(weights, 1)
    y = embeddings * ops.expand_dims(weights, 1)
    b, m = checks.static_shape(z)
    if b is not None and m is not None and b < m:
        # b x b form: Z^T (Z Z^T + ridge I)^{-1} Y (the push-through identity).
        gram = _backend.matmul(z, z, transpose_b=True) + ridge * ops.eye(b, dtype=z.dtype)
        return _backend.matmul(z, _solve(gram, y), transpose_a=True)
    # m x m form (Eq. 2.8): (Z^T Z + ridge I)^{-1} Z^T Y.
    gram = _backend.matmul(z, z, transpose_a=True) + ridge * ops.eye(ops.shape(z)[1], dtype=z.dtype)
    return _solve(gram, _backend.matmul(z, y, transpose_a=True))


def _solve(gram, rhs):
    """``gram^{-1} rhs``, NaN where `gram` holds NaN or inf (NaN in, NaN out): TensorFlow's
    `MatrixSolve` raises "Input matrix is not invertible" on one (in a graph's backward pass),
    naming no argument. Such a gram is replaced by the identity before the solve (its gradient
    then 0, not NaN) and the result by NaN after."""
    finite = ops.all(ops.isfinite(gram))
    safe = ops.where(finite, gram, ops.eye(ops.shape(gram)[0], dtype=gram.dtype))
    solution = ops.solve(safe, rhs)
    return ops.where(finite, solution, ops.full_like(solution, float("nan")))


def cross_batch_embeddings(histograms, embeddings, fit_mask, *, ridge=0.05):
    """Embeddings of the rows where `fit_mask` is false, predicted by prototypes fitted on the
    rows where it is true (XML Sec. 2.3: ``Y_hat_2 = V_1 Z_2``).

    Args:
      histograms: `[B, m]` prototype histograms (`prototype_histograms`).
      embeddings: `[B, e]` embeddings (the GAP vectors in the paper).
      fit_mask: `[B]` bool, the rows the prototypes are fitted to.
      ridge: The ridge term (paper: 0.05).

    Returns:
      `[B, e]`: predictions ``z_i V`` for every row; those of the `fit_mask` rows are the fit's
      own (in-sample) values, the others are the cross-batch predictions.
    """
    ridge = checks.check_positive_number(ridge, "ridge")  # 0: Z^T Z may be singular
    z, _ = checks.float_matrix(histograms, "histograms", min_rows=0)
    y = ops.cast(_floating(embeddings, "embeddings"), z.dtype)
    y_shape = checks.static_shape(y)
    if y_shape is None or len(y_shape) != 2:
        raise ValueError(
            checks.invalid("embeddings", "a [B, e] tensor", f"<shape {_shape_text(y_shape)}>")
        )
    y = checks.same_rows(y, z, "embeddings", "histograms")
    mask = checks.to_tensor(fit_mask, "fit_mask")
    mask_dtype, mask_shape = keras.backend.standardize_dtype(mask.dtype), checks.static_shape(mask)
    if (
        mask_dtype != "bool"
        or mask_shape is None
        or len(mask_shape) not in (1, 2)
        or mask_shape[1:] not in ((), (1,))
    ):
        raise ValueError(
            checks.invalid(
                "fit_mask",
                "a [B] (or [B, 1]) bool tensor",
                f"<{mask_dtype} {_shape_text(mask_shape)}>",
            )
        )
    mask = checks.same_rows(ops.reshape(mask, [-1]), z, "fit_mask", "histograms")
    prototypes = fit_prototypes(z, y, ops.cast(mask, z.dtype), ridge=ridge)
    return _backend.matmul(z, prototypes)
