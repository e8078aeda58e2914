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

import tensorflow as tf

from tf_svmax.ops import _checks


def _floating(x, arg):
    """`x` as a tensor, a TypeError naming `arg` unless floating (as the spectral ops)."""
    x = tf.convert_to_tensor(x)
    if not x.dtype.is_floating:
        raise TypeError(
            _checks.invalid(arg, "a floating-point tensor", f"<tensor of dtype {x.dtype.name}>")
        )
    return x


def prototype_histograms(features, prototypes, *, epsilon=10.0):
    """Soft histograms of every image's features on the prototypes (XML Eq. 2.4).

    Args:
      features: `[B, n, d]` floating-point convolutional features (n >= 1 locations per image).
      prototypes: `[m, d]` prototype features (m >= 1).
      epsilon: Inverse temperature of the assignment (paper: 10).

    Returns:
      `[B, m]`: each row is non-negative and sums to 1.
    """
    epsilon = _checks.check_non_negative_number(epsilon, "epsilon")
    x = _floating(features, "features")
    dtype = _checks.compute_dtype(x.dtype)
    x = tf.cast(x, dtype)
    v = tf.cast(_floating(prototypes, "prototypes"), dtype)
    if x.shape.rank != 3 or x.shape[1] == 0:  # no location: the mean of nothing is NaN
        raise ValueError(
            _checks.invalid("features", "a [B, n, d] tensor with n >= 1", f"<shape {x.shape}>")
        )
    d = x.shape[-1]
    if v.shape.rank != 2 or v.shape[0] == 0 or d is not None and v.shape[-1] not in (None, d):
        raise ValueError(
            _checks.invalid(
                "prototypes",
                f"a [m, d] tensor with m >= 1 and d = {d} (as `features` {x.shape})",
                f"<shape {v.shape}>",
            )
        )
    scores = epsilon * tf.einsum("bnd,md->bnm", x, v)
    return tf.reduce_mean(tf.nn.softmax(scores, axis=-1), axis=1)


def fit_prototypes(histograms, embeddings, weights, *, ridge=0.05):
    """`[m, e]` ridge solution ``argmin_V sum_i w_i |z_i V - y_i|^2 + ridge |V|^2`` for 0/1
    weights `w` (the rows fitted), solved in the smaller of the m x m and b x b forms."""
    z = histograms * weights[:, tf.newaxis]
    y = embeddings * weights[:, tf.newaxis]
    b, m = z.shape[0], z.shape[1]
    if b is not None and m is not None and b < m:
        # b x b form: Z^T (Z Z^T + ridge I)^{-1} Y (the push-through identity).
        gram = tf.matmul(z, z, transpose_b=True) + ridge * tf.eye(b, dtype=z.dtype)
        return tf.matmul(z, tf.linalg.solve(gram, y), transpose_a=True)
    gram = tf.matmul(z, z, transpose_a=True) + ridge * tf.eye(tf.shape(z)[1], dtype=z.dtype)
    return tf.linalg.solve(gram, tf.matmul(z, y, transpose_a=True))


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
    ridge = _checks.check_positive_number(ridge, "ridge")  # 0: Z^T Z may be singular
    z, _ = _checks.float_matrix(histograms, "histograms", min_rows=0)
    y = tf.cast(_floating(embeddings, "embeddings"), z.dtype)
    if y.shape.rank != 2:
        raise ValueError(_checks.invalid("embeddings", "a [B, e] tensor", f"<shape {y.shape}>"))
    y = _checks.same_rows(y, z, "embeddings", "histograms")
    mask = tf.convert_to_tensor(fit_mask)
    if mask.dtype != tf.bool or mask.shape.rank not in (1, 2) or mask.shape[1:] not in ([], [1]):
        raise ValueError(
            _checks.invalid(
                "fit_mask", "a [B] (or [B, 1]) bool tensor", f"<{mask.dtype.name} {mask.shape}>"
            )
        )
    mask = _checks.same_rows(tf.reshape(mask, [-1]), z, "fit_mask", "histograms")
    prototypes = fit_prototypes(z, y, tf.cast(mask, z.dtype), ridge=ridge)
    return tf.matmul(z, prototypes)
