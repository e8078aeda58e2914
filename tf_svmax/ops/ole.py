"""Orthogonal Low-rank Embedding (OLE) loss with the published subgradient.

OLE (seed paper `002`, Lezama et al. 2018) pulls each class into a low-rank subspace and pushes
the classes apart::

    L_o(X) = ( sum_c max(delta, ||X_c||_*) - ||X||_* ) / N            (Eq. 2, per sample)

Its descent direction is the thresholded subgradient of Eq. 5-6: ``U_1 V_1^T`` keeps only the
singular directions whose singular value is at least `threshold`; a class whose nuclear norm is
at most `delta` contributes `delta` and no gradient. This matches the public PyTorch original
(`pytorch_OLE/OLE.py`), without its weight `lambda_` (the Keras loss applies that).

Implementation: classes are found with `tf.unique`, so labels may be any integers, unsorted,
with a different set of classes in every batch. Rows are scattered into a zero-padded
``[C, K_max, D]`` tensor (zero rows change neither the nonzero singular values nor the
nuclear norm) and all classes are decomposed in one batched float64 SVD call: no Python loop
over classes and no host round trip, so it runs inside `tf.function` on the batch's device.
float64, because the threshold (1e-6) sits below float32's resolution of small singular values
of unnormalized features (~1e-7 * s_1), where float32 would keep noise directions in the
gradient. The batch term, the costliest part, uses float32 eigenvectors for float32 inputs when
the batch is well conditioned (see `_batch_term`) and a float64 SVD otherwise.
"""

import tensorflow as tf

from tf_svmax.ops import _checks, _guards


def class_labels(labels, arg="labels"):
    """Flattens `labels` to `[N]` int64, accepting integer tensors and integral-valued floats."""
    labels = _checks.label_vector(labels, arg)
    if labels.dtype.is_integer:
        return tf.cast(labels, tf.int64)
    if labels.dtype.is_floating:
        # Keras losses receive y_true cast to float; accept floats that hold integers.
        with tf.control_dependencies(
            [
                tf.debugging.assert_equal(
                    labels,
                    tf.round(labels),
                    message=f"Invalid value for argument `{arg}`: expected integer class labels, "
                    "received non-integral floats.",
                )
            ]
        ):
            return tf.cast(labels, tf.int64)
    raise TypeError(
        _checks.invalid(arg, "integer class labels", f"<tensor of dtype {labels.dtype.name}>")
    )


def nuclear_norms_and_subgradients(matrices, threshold):
    """Nuclear norms and thresholded subgradients ``U_1 V_1^T`` (Eq. 5) of a batch of matrices.

    Args:
      matrices: `[C, K, D]` float tensor.
      threshold: Singular values below it are left out of the subgradient (not of the norm).

    Returns:
      `(norms [C], subgradients [C, K, D])` of the input's dtype (float16/bfloat16 computed in
      float32: TensorFlow has no half-precision SVD kernel).
    """
    matrices = tf.convert_to_tensor(matrices)
    dtype = matrices.dtype
    # Half precision is promoted for the SVD and the results cast back (the convention).
    matrices = tf.cast(matrices, _checks.compute_dtype(dtype))
    # A one-sided SVD resolves singular values down to ~eps * s_1; a Gram matrix only to
    # ~sqrt(eps) * s_1, which for large features (s_1 > ~60 in float64) reaches the threshold.
    s, u, v = tf.linalg.svd(matrices, full_matrices=False)
    keep = tf.cast(s >= threshold, u.dtype)  # Eq. 5: drop directions with s < threshold.
    sub = tf.matmul(u * keep[..., tf.newaxis, :], v, transpose_b=True)
    return tf.cast(tf.reduce_sum(s, axis=-1), dtype), tf.cast(sub, dtype)


def _class_layout(labels):
    """Class index per row, the row's position inside its class, and the padded shape."""
    _, class_index = tf.unique(labels, out_idx=tf.int32)
    num_classes = tf.reduce_max(class_index) + 1
    counts = tf.math.bincount(class_index, minlength=num_classes, dtype=tf.int32)
    # Stable sort by class; a row's position is its rank among the rows of its class.
    order = tf.argsort(class_index, stable=True)
    starts = tf.cumsum(counts, exclusive=True)
    position_sorted = tf.range(tf.size(labels)) - tf.gather(starts, tf.gather(class_index, order))
    position = tf.gather(position_sorted, tf.math.invert_permutation(order))
    coords = tf.stack([class_index, position], axis=1)
    return coords, num_classes, tf.reduce_max(counts)


# The float32 shortcut for the batch term is taken only when every singular value is at least
# this fraction of the largest (condition number <= 100). float32 eigenvectors mix directions
# whose singular values are below ~sqrt(eps32) * s_1 and are accurate to ~eps32 * s_1 / gap
# elsewhere; measured on 144 x 128 float32 batches with geometric spectra, the gradient's largest
# entry error relative to the float64 reference is <= 7.2e-5 at condition 99 (5.5e-6 at 10).
# Anything worse conditioned takes the float64 SVD.
_FLOAT32_MIN_RELATIVE_SINGULAR_VALUE = 1e-2


def _batch_term(x64, x32, threshold):
    """``||X||_*`` and its thresholded subgradient; float32 eigenvectors where that is exact enough.

    The 128 x 128 float64 eigendecomposition costs about twice the float32 one on a CPU and
    dominates the loss; for float32 inputs the float32 eigenvectors are used when the spectrum is
    well conditioned (see `_FLOAT32_MIN_RELATIVE_SINGULAR_VALUE`), with float64 as the fallback.
    """

    def exact():
        norms, subs = nuclear_norms_and_subgradients(x64[tf.newaxis], threshold)
        return norms[0], subs[0]

    if x32 is None:
        return exact()
    tall = _guards.is_tall(x32)
    x32_tall = _guards.orient(x32, tall)
    _, v32 = tf.linalg.eigh(tf.matmul(x32_tall, x32_tall, transpose_a=True))
    v = tf.cast(v32, tf.float64)
    p = tf.matmul(_guards.orient(x64, tall), v)  # column i is s_i * u_i
    s = tf.norm(p, axis=0)
    s_max = tf.reduce_max(s)
    safe = tf.logical_and(
        tf.reduce_min(s) >= _FLOAT32_MIN_RELATIVE_SINGULAR_VALUE * s_max,
        tf.reduce_min(s) >= 10.0 * threshold,  # all kept by the threshold, with a margin
    )

    def shortcut():
        sub = tf.matmul(p / s, v, transpose_b=True)
        return tf.reduce_sum(s), _guards.orient(sub, tall)

    return tf.cond(safe, shortcut, exact)


def _ole(labels, x, delta, threshold, float32_shortcut):
    @tf.custom_gradient
    def forward(x):
        all_finite, x_safe = _guards.finite_guard(x)
        n = tf.cast(tf.shape(x)[0], x.dtype)
        # Extreme magnitudes: decompose x / 2^k (exact) with the threshold scaled alike, and
        # scale the norms back; nuclear norms are 1-homogeneous and U V^T scale-free, so this
        # is the same computation without overflow (float32 Gram products above ~1e19, the
        # float32 shortcut's cast of float64 input) or underflow (below ~1e-19).
        scale = _guards.power_of_two_scale(x_safe)
        x_scaled = x_safe / scale
        scaled_threshold = tf.constant(threshold, x.dtype) / scale  # not via float32
        coords, num_classes, k_max = _class_layout(labels)
        per_class = tf.scatter_nd(coords, x_scaled, tf.stack([num_classes, k_max, tf.shape(x)[1]]))

        # Per-class term: sum_c max(delta, ||X_c||_*).
        class_norms, class_subs = nuclear_norms_and_subgradients(per_class, scaled_threshold)
        class_norms = class_norms * scale
        active = class_norms > delta
        class_term = tf.reduce_sum(tf.where(active, class_norms, tf.constant(delta, x.dtype)))

        # Batch term: ||X||_*.
        x32_scaled = tf.cast(x_scaled, tf.float32) if float32_shortcut else None
        batch_norm, batch_sub = _batch_term(x_scaled, x32_scaled, scaled_threshold)
        batch_norm = batch_norm * scale
        value = (class_term - batch_norm) / n  # Eq. 2

        def grad(upstream):
            # Eq. 6: per-class U_1c V_1c^T on the class's rows (zero when ||X_c||_* <= delta),
            # minus the batch's U_1 V_1^T.
            class_subs_active = class_subs * tf.cast(active, x.dtype)[:, tf.newaxis, tf.newaxis]
            rows = tf.gather_nd(class_subs_active, coords)
            g = (rows - batch_sub) * (upstream / n)
            return _guards.nan_unless(all_finite, g)

        return _guards.nan_unless(all_finite, value), grad

    return forward(x)


def ole_loss(labels, embeddings, *, delta=1.0, threshold=1e-6):
    """OLE loss of one mini-batch (a scalar; multiply by lambda yourself).

    ``(sum_c max(delta, ||X_c||_*) - ||X||_*) / N`` with the published subgradient (OLE paper
    Eq. 2, 5, 6) as its gradient.

    Args:
      labels: `[N]` (or `[N, 1]`) integer class labels; any values, any order.
      embeddings: `[N, D]` floating features (the OLE paper does not normalize them).
      delta: Floor on each class's nuclear norm (paper: 1.0). Float >= 0.
      threshold: Singular values below it are dropped from the subgradient (original: 1e-6).

    Returns:
      A scalar of the dtype of `embeddings` (computed in float64); 0 for a batch with no rows.

    Raises:
      ValueError: bad rank, mismatched batch sizes, a negative `delta`/`threshold`, or tracing
        under XLA (`jit_compile=True`), which cannot compile a data-dependent class set.

    Example:
      >>> x = tf.random.normal([8, 16])
      >>> ole_loss([0, 0, 1, 1, 2, 2, 3, 3], x)
    """
    delta = _checks.check_non_negative_number(delta, "delta")
    threshold = _checks.check_non_negative_number(threshold, "threshold")
    x, dtype = _checks.float_matrix(embeddings, "embeddings", min_rows=0)
    labels = _checks.same_rows(class_labels(labels), x, "labels", "embeddings", unit="label")
    if _checks.in_xla_context():
        # The set of classes in a batch has a data-dependent size (tf.unique, bincount), which
        # XLA cannot compile; fail at trace time with the fix rather than deep inside XLA.
        raise ValueError(
            "ole_loss cannot run under XLA (jit_compile=True): the number of classes in a batch "
            "is data-dependent. Compile the model with jit_compile=False (Keras enables XLA by "
            "default on GPUs: model.compile(..., jit_compile=False))."
        )
    # A batch with no rows has no classes and nothing to penalize: 0 (Eq. 2 would be 0/0).
    value = _checks.zero_unless_rows(
        x,
        lambda: tf.cast(
            _ole(
                labels,
                tf.cast(x, tf.float64),
                delta,
                threshold,
                float32_shortcut=x.dtype != tf.float64,
            ),
            x.dtype,
        ),
    )
    return tf.cast(value, dtype)
