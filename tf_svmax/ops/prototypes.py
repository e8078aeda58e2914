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


def prototype_histograms(features, prototypes, *, epsilon=10.0):
    """Soft histograms of every image's features on the prototypes (XML Eq. 2.4).

    Args:
      features: `[B, n, d]` convolutional features (n locations per image).
      prototypes: `[m, d]` prototype features.
      epsilon: Inverse temperature of the assignment (paper: 10).

    Returns:
      `[B, m]`: each row is non-negative and sums to 1.
    """
    epsilon = _checks.check_non_negative_number(epsilon, "epsilon")
    x = tf.convert_to_tensor(features)
    dtype = _checks.compute_dtype(x.dtype)
    x = tf.cast(x, dtype)
    v = tf.cast(tf.convert_to_tensor(prototypes), dtype)
    if x.shape.rank != 3 or v.shape.rank != 2 or x.shape[-1] != v.shape[-1]:
        raise ValueError(
            _checks.invalid(
                "features", "[B, n, d] features and [m, d] prototypes", f"{x.shape}, {v.shape}"
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
    ridge = _checks.check_non_negative_number(ridge, "ridge")
    if ridge == 0:
        raise ValueError(_checks.invalid("ridge", "a float > 0 (the system is singular)", 0.0))
    z = tf.convert_to_tensor(histograms)
    dtype = _checks.compute_dtype(z.dtype)
    z = tf.cast(z, dtype)
    y = tf.cast(tf.convert_to_tensor(embeddings), dtype)
    mask = tf.reshape(tf.convert_to_tensor(fit_mask), [-1])
    if mask.dtype != tf.bool:
        raise ValueError(_checks.invalid("fit_mask", "a [B] bool tensor", mask.dtype.name))
    if z.shape.rank != 2 or y.shape.rank != 2:
        raise ValueError(
            _checks.invalid(
                "histograms", "[B, m] histograms and [B, e] embeddings", f"{z.shape}, {y.shape}"
            )
        )
    prototypes = fit_prototypes(z, y, tf.cast(mask, dtype), ridge=ridge)
    return tf.matmul(z, prototypes)
