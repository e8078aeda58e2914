"""Orthogonal Low-rank Embedding (OLE) loss with the published subgradient.

OLE (seed paper `002`, Lezama et al. 2018) pulls each class into a low-rank subspace and pushes
the classes apart::

    L_o(X) = ( sum_c max(delta, ||X_c||_*) - ||X||_* ) / N            (Eq. 2, per sample)

Its descent direction is the thresholded subgradient of Eq. 5-6: ``U_1 V_1^T`` keeps only the
singular directions whose singular value is at least `threshold`; a class whose nuclear norm is
at most `delta` contributes `delta` and no gradient. This matches the public PyTorch original
(`pytorch_OLE/OLE.py`), without its weight `lambda_` (the Keras loss applies that).

Implementation: labels may be any integers, unsorted, with a different set of classes in every
batch. Rows are scattered into a zero-padded ``[C, K_max, D]`` tensor (zero rows change neither
the nonzero singular values nor the nuclear norm) and all classes are decomposed in one batched
float64 call, no Python loop over classes: the eigendecompositions of their K x K Gram matrices
when every class is well conditioned (`_gram_nuclear_norms_and_subgradients`; the paper's 36
classes of 4 rows), else an SVD (`keras.ops.svd`). On TensorFlow the classes are
found with `tf.unique`, with no host round trip, so it runs inside `tf.function` on the batch's
device; on JAX and PyTorch, which run it eagerly (see below), the class layout is computed from
the labels in NumPy. float64, because the threshold (1e-6) sits below float32's resolution of
small singular values of unnormalized features (~1e-7 * s_1), where float32 would keep noise
directions in the gradient. The batch term, the costliest part, is computed in float32 (its
eigenvectors and products) for float32 inputs on TensorFlow when the batch is well conditioned,
where no singular value is near the threshold (see `_batch_term`), and by a float64 SVD otherwise
(and on the other backends, see `_float32_shortcut`).

Backends: the number of classes in a batch is data-dependent, which XLA cannot compile
(``jit_compile=True`` on TensorFlow, any ``jax.jit`` on JAX, which includes every `fit` on JAX).
With a static ``num_classes = C`` the labels are class ids in ``[0, C)`` and the layout is
static: every class gets all N rows, those of other classes zeroed (``[C, N, D]``, the same
nonzero singular values), and classes absent from the batch are left out of the sum. That
compiles everywhere, at the price of C SVDs of N x D matrices instead of one per present class
of its own rows. Under XLA without ``num_classes`` the same static layout takes one slot per row
(each class in the slot of its first row, `first_row_ids`): N SVDs of N x D, the same value.

JAX without ``jax_enable_x64`` has no float64: there the loss is computed in float32 and says so
once (a RuntimeWarning); float32 cannot tell the 1e-6 threshold from rounding noise, so
directions below the float32 numerical-rank cutoff ``max(K, D) * eps * s_1`` are dropped from
the subgradient as well.
"""

import numpy as np
from keras import ops

from tf_svmax import _backend, checks
from tf_svmax.ops import _guards

_NON_INTEGRAL = (
    "Invalid value for argument `{}`: expected integer class labels, received non-integral floats."
)


def class_labels(labels, arg="labels"):
    """Flattens `labels` to `[N]` int64, accepting integer tensors and integral-valued floats.

    TensorFlow: a tensor, checked in the graph (an InvalidArgumentError when a traced function
    runs). JAX and PyTorch: a NumPy array (the labels are concrete there: under XLA `ole_loss`
    takes `first_row_ids` instead), checked at once (a ValueError); int64 labels stay int64 on
    JAX too.
    """
    if _backend.RUN_TIME_ASSERTIONS:
        return _graph_class_labels(labels, arg)
    labels = np.asarray(ops.convert_to_numpy(labels) if ops.is_tensor(labels) else labels)
    if labels.ndim > 2 or (labels.ndim == 2 and labels.shape[1] != 1):
        raise ValueError(
            checks.invalid(
                arg, "class labels of shape [N] or [N, 1]", f"<tensor of shape {labels.shape}>"
            )
        )
    labels = labels.reshape(-1)
    if labels.dtype.kind in "iu":
        return labels.astype(np.int64)
    if labels.dtype.kind == "f":
        # Keras losses receive y_true cast to float; accept floats that hold integers.
        if not np.array_equal(labels, np.round(labels)):
            raise ValueError(_NON_INTEGRAL.format(arg))
        return labels.astype(np.int64)
    raise TypeError(
        checks.invalid(arg, "integer class labels", f"<tensor of dtype {labels.dtype.name}>")
    )


def _graph_class_labels(labels, arg):
    """`class_labels` in a TensorFlow graph: int64, integral floats checked when it runs."""
    labels = checks.label_vector(labels, arg)
    dtype = _guards.dtype_name(labels)
    if "int" in dtype:
        return ops.cast(labels, "int64")
    if "float" in dtype:
        # Keras losses receive y_true cast to float; accept floats that hold integers.
        labels = checks.checked_when_run(
            labels,
            lambda tf: tf.debugging.assert_equal(
                labels, tf.round(labels), message=_NON_INTEGRAL.format(arg)
            ),
        )
        return ops.cast(labels, "int64")
    raise TypeError(checks.invalid(arg, "integer class labels", f"<tensor of dtype {dtype}>"))


def _same_rows(labels, x):
    """`labels`, checked to hold one label per row of `x` (`checks.same_rows`' message)."""
    if _backend.RUN_TIME_ASSERTIONS:
        return checks.same_rows(labels, x, "labels", "embeddings", unit="label")
    if len(labels) != x.shape[0]:
        raise ValueError(
            "Invalid value for argument `labels`. Expected one label per row of `embeddings` "
            f"({x.shape[0]}). Received: {len(labels)} labels."
        )
    return labels


def nuclear_norms_and_subgradients(matrices, threshold, rank_cutoff=False):
    """Nuclear norms and thresholded subgradients ``U_1 V_1^T`` (Eq. 5) of a batch of matrices.

    Args:
      matrices: `[C, K, D]` float tensor.
      threshold: Singular values below it are left out of the subgradient (not of the norm).
      rank_cutoff: Also leave out singular values at or below the numerical-rank cutoff
        ``max(K, D) * eps * s_1`` of each matrix (for float32, see `_ole`).

    Returns:
      `(norms [C], subgradients [C, K, D])` of the input's dtype (float16/bfloat16 computed in
      float32: no backend has a half-precision SVD kernel).
    """
    matrices = ops.convert_to_tensor(matrices)
    dtype = _guards.dtype_name(matrices)
    # Half precision is promoted for the SVD and the results cast back (the convention; no
    # backend has a float16/bfloat16 SVD kernel).
    matrices = ops.cast(matrices, checks.compute_dtype(dtype))
    # A one-sided SVD resolves singular values down to ~eps * s_1; a Gram matrix only to
    # ~sqrt(eps) * s_1, which for large features (s_1 > ~60 in float64) reaches the threshold.
    # full_matrices=False: the thin factors (Keras' default is the full ones).
    u, s, vh = ops.svd(matrices, full_matrices=False)
    keep = s >= threshold  # Eq. 5: drop directions with s < threshold.
    if rank_cutoff:
        # In float32 a singular value that is zero in exact arithmetic comes out as ~eps * s_1
        # (above 1e-6 once s_1 > ~10) with a noise direction; NumPy's matrix_rank cutoff drops it.
        size = max(_guards.static_or_dynamic_shape(matrices)[-2:])
        eps = float(np.finfo(_guards.dtype_name(s)).eps)
        keep = ops.logical_and(keep, s > size * eps * ops.max(s, axis=-1, keepdims=True))
    keep = ops.cast(keep, _guards.dtype_name(u))
    sub = _backend.matmul(u * ops.expand_dims(keep, -2), vh)
    return ops.cast(ops.sum(s, axis=-1), dtype), ops.cast(sub, dtype)


# The classes' Gram route (`_gram_nuclear_norms_and_subgradients`) is taken only when, in every
# class, each singular value is zero or at least this fraction of the class's largest (condition
# number <= 100 on the nonzero ones). float64 eigenvectors of ``X_c X_c^T`` are exact to
# ~eps64 * lambda_1 / gap, so ``U diag(1/s) U^T X_c`` (``(X_c X_c^T)^(-1/2) X_c``, the subgradient
# when every direction is kept) is within ~eps64 * kappa^2 ~ 2e-12 relative of the SVD's at
# kappa = 100, far inside the float64 tests' 1e-10. Worse-conditioned classes (a class collapsed
# towards a low-rank subspace, which is where the 1e-6 threshold decides) take the SVD.
_GRAM_MIN_RELATIVE_SINGULAR_VALUE = 1e-2


def _gram_nuclear_norms_and_subgradients(matrices, threshold):
    """`nuclear_norms_and_subgradients` of float64 `[C, K, D]` with ``K <= D`` from the K x K
    Gram matrices, and whether that is as exact as the SVD (`_GRAM_MIN_RELATIVE_SINGULAR_VALUE`).

    Singular values are not the square roots of the Gram's eigenvalues (those resolve only
    ~sqrt(eps64) * s_1, which reaches the 1e-6 threshold once s_1 > ~60; see
    `nuclear_norms_and_subgradients`): each is the norm of the projection ``u_i^T X_c``, the row
    ``s_i v_i^T`` of the SVD, computed from `X_c` itself as the batch term's float32 shortcut
    does. Rows of zero padding (classes smaller than the largest) are exact zero rows and
    columns of the Gram, whose eigenvectors project them to exactly 0: singular value 0, no
    subgradient, as in the SVD.

    At K = 4 rows per class, 36 classes of D = 128 (the paper's batch) the eigendecompositions of
    `[36, 4, 4]` and the products took 0.5-0.75x the time of the batched `[36, 4, 128]` SVD with
    its products (one CPU thread: TensorFlow 0.30 against 0.52 ms, JAX 0.60 against 0.80, PyTorch
    0.29 against 0.57).
    """
    gram = _backend.matmul(matrices, _t(matrices))
    _, u = ops.eigh(gram)
    p = _backend.matmul(_t(u), matrices)  # row i is s_i v_i^T
    s = _guards.norm(p, axis=-1)
    keep = s >= threshold  # Eq. 5: drop directions with s < threshold.
    s_max = ops.max(s, axis=-1, keepdims=True)
    well_conditioned = s >= _GRAM_MIN_RELATIVE_SINGULAR_VALUE * s_max
    # A zero singular value is exact (zero rows) but its direction is arbitrary: fine where the
    # threshold drops it, not where a threshold of 0 keeps it (the SVD's choice, left to it).
    dropped_zero = ops.logical_and(s == 0, ops.logical_not(keep))
    exact = ops.all(ops.logical_or(well_conditioned, dropped_zero))
    # 1 / s of the kept directions, 0 for the dropped ones (the inner where: no 1 / 0).
    inverse = ops.where(keep, 1.0 / ops.where(keep, s, ops.ones_like(s)), ops.zeros_like(s))
    sub = _backend.matmul(u * ops.expand_dims(inverse, -2), p)  # U_1 diag(1/s) S V_1^T
    return ops.sum(s, axis=-1), sub, exact


def _decided(pred):
    """`pred` as a Python bool where its value is known (eagerly), else the tensor (a trace,
    where `_guards.select` builds a conditional)."""
    values = _backend.concrete_values(pred)
    return pred if values is None else bool(values)


def _where_known(pred, true_fn, false_fn):
    """`true_fn()` if the scalar `pred` holds, else `false_fn()`: in Python where `pred` is
    known, else a conditional, which in a TensorFlow graph passes the chosen tensor on without
    the pass over it of a select (`ops.where`)."""
    return _guards.select(_decided(pred), true_fn, false_fn)


def _class_nuclear_norms_and_subgradients(matrices, threshold, rank_cutoff):
    """`nuclear_norms_and_subgradients` of the classes `[C, K, D]`: through the Gram matrices
    where K <= D and every class is well conditioned (`_gram_nuclear_norms_and_subgradients`),
    else (and always in float32, `rank_cutoff`, whose rank decisions the SVD's cutoff makes) the
    SVD."""

    def svd():
        return nuclear_norms_and_subgradients(matrices, threshold, rank_cutoff)

    if rank_cutoff or (_backend.in_xla_context() and not _backend.xla_eigh_is_fast()):
        # Also under TensorFlow's XLA, whose eigensolver is its own slow one: the SVD, as before.
        return svd()

    def gram_or_svd():
        norms, subs, exact = _gram_nuclear_norms_and_subgradients(matrices, threshold)
        return _where_known(exact, lambda: (norms, subs), svd)

    rows, cols = _guards.static_or_dynamic_shape(matrices)[-2:]
    return _guards.select(rows <= cols, gram_or_svd, svd)


def _static_class_layout(labels, num_classes, rows):
    """With a static class count: class ``labels[i]`` and position ``i`` for row i, so the padded
    shape is ``[num_classes, rows]`` whatever the labels; which classes occur in the batch; and
    whether every label is a class id in ``[0, num_classes)`` (what a trace cannot check).

    Called inside the custom-gradient function: JAX cannot lower a value traced outside it and
    closed over (differentiating a `jax.jit`-compiled loss failed so)."""
    labels = ops.convert_to_tensor(labels)
    in_range = ops.logical_and(labels >= 0, labels < num_classes)
    valid = ops.all(in_range)
    if "float" in _guards.dtype_name(labels):
        valid = ops.logical_and(valid, ops.all(ops.equal(labels, ops.round(labels))))
    # An id outside [0, num_classes) (possible only in a trace) never reaches the scatter, whose
    # TensorFlow CPU kernel raises a raw error naming no argument: slot 0 instead, the loss NaN
    # through `valid`.
    labels = ops.cast(ops.where(in_range, labels, ops.zeros_like(labels)), "int32")
    coords = ops.stack([labels, ops.arange(rows, dtype="int32")], axis=1)
    ids = ops.arange(num_classes, dtype="int32")
    present = ops.any(ops.equal(labels[None, :], ids[:, None]), axis=1)
    return coords, rows, present, valid


def _label_vector(labels, x, arg):
    """``(labels [N], values)``: `labels` (`[N]` or `[N, 1]`, integers or floats) flattened and
    checked to hold one label per row of `x`, and their values as NumPy where known (then the
    labels are that NumPy array: on JAX a tensor made inside a `jax.jit` trace and closed over
    by the custom gradient could not be lowered when the jitted loss is differentiated), else
    None (a tensor whose row count a TensorFlow graph checks when it runs)."""
    values = _backend.concrete_values(labels)
    shape = checks.static_shape(ops.convert_to_tensor(labels)) if values is None else values.shape
    if shape is None or len(shape) > 2 or (len(shape) == 2 and shape[1] != 1):
        raise ValueError(
            checks.invalid(arg, "class labels of shape [N] or [N, 1]", f"<tensor of shape {shape}>")
        )
    dtype = _guards.dtype_name(labels) if values is None else values.dtype.name
    if not ("int" in dtype or "float" in dtype):
        raise TypeError(checks.invalid(arg, "integer class labels", f"<tensor of dtype {dtype}>"))
    if values is None:
        labels = ops.reshape(labels, (-1,))
        return checks.same_rows(labels, x, arg, "embeddings", unit="label"), None
    values = values.reshape(-1)
    rows = checks.static_shape(x)[0]
    if rows is not None and len(values) != rows:
        raise ValueError(
            f"Invalid value for argument `{arg}`. Expected one label per row of `embeddings` "
            f"({rows}). Received: {len(values)} labels."
        )
    return values, values


def static_class_ids(labels, num_classes, x, arg="labels"):
    """`labels` (`[N]` or `[N, 1]`, integers or integral floats) as `[N]` class ids for a static
    `num_classes`, one per row of `x`. Where the values are known (eagerly) a label outside
    ``[0, num_classes)`` or a non-integral float is a ValueError naming `arg`, and the ids come
    back as int32 NumPy (on JAX a tensor made here, inside a `jax.jit` trace, and closed over by
    the custom gradient could not be lowered when that jitted loss is differentiated); inside a
    trace they stay a tensor, checked by `_static_class_layout` (the loss is NaN where that check
    fails)."""
    labels, values = _label_vector(labels, x, arg)
    if values is None:
        return _ids_checked_when_run(labels, num_classes, arg)
    if values.dtype.kind == "f" and not np.array_equal(values, np.round(values)):
        raise ValueError(_NON_INTEGRAL.format(arg))
    outside = values[(values < 0) | (values >= num_classes)]
    if outside.size:
        raise ValueError(
            checks.invalid(
                arg,
                f"class ids in [0, num_classes={num_classes})",
                f"<labels including {outside[0]!r}>",
            )
        )
    return _rows_checked_when_unknown(values.astype(np.int32), x, arg)


def _ids_checked_when_run(labels, num_classes, arg):
    """Traced `labels`: in a TensorFlow graph, checked to lie in ``[0, num_classes)`` when it
    runs, with the eager message (an InvalidArgumentError). XLA drops the assertion and JAX
    has none: there the loss is NaN (`_static_class_layout`)."""
    message = checks.invalid(arg, f"class ids in [0, num_classes={num_classes})", "<another id>")
    return checks.checked_when_run(
        labels,
        lambda tf: tf.debugging.assert_equal(
            tf.reduce_all((labels >= 0) & (labels < num_classes)), True, message=message
        ),
    )


def first_row_ids(labels):
    """Each row's class as the index of the first row with its label: `[N]` int32 in ``[0, N)``,
    with fixed shapes (XLA). Under XLA without `num_classes` that makes ``num_classes = N`` a
    static class layout: the slots of rows that start no class stay empty and are left out, as
    absent classes are with `num_classes`, the value and gradient of the dynamic layout at the
    price of N SVDs of `[N, D]` per call. Also `tf_svmax.losses.XMLLoss`' class halves."""
    labels = ops.convert_to_tensor(labels)
    rows = _guards.static_or_dynamic_shape(labels)[0]
    index = ops.arange(rows, dtype="int32")
    same = ops.equal(labels[:, None], labels[None, :])
    return ops.min(ops.where(same, index[None, :], ops.cast(rows, "int32")), axis=1)


def _first_row_class_ids(labels):
    """`first_row_ids` for `_static_class_layout`, called inside the custom gradient (as that
    is): non-integral float labels (refused eagerly) become -1, which makes the loss NaN."""
    labels = ops.convert_to_tensor(labels)
    ids = first_row_ids(labels)
    if "float" in _guards.dtype_name(labels):
        ids = ops.where(ops.equal(labels, ops.round(labels)), ids, -ops.ones_like(ids))
    return ids


def _traced_labels(labels, x, arg="labels"):
    """`labels` as `[N]`, one per row of `x`, for `first_row_ids` (inside a trace, where the
    values may be unknown: shape and dtype checked), said once to cost N SVDs."""
    checks.warn_once(
        "ole-xla-slots",
        "tf_svmax: ole_loss under XLA without num_classes takes one class slot per row: N SVDs "
        "of the [N, D] batch per step instead of one per class. Pass num_classes=C (labels in "
        "[0, C)) for C SVDs.",
    )
    labels, values = _label_vector(labels, x, arg)
    # Known values stay NumPy, converted inside the custom gradient (as `static_class_ids`).
    return labels if values is None else _rows_checked_when_unknown(values, x, arg)


def _rows_checked_when_unknown(values, x, arg):
    """NumPy labels `values`, or where a TensorFlow graph does not know the row count of `x`,
    a tensor of them checked against it when it runs."""
    if checks.static_shape(x)[0] is None:
        return checks.same_rows(values, x, arg, "embeddings", unit="label")
    return values


# The float32 shortcut for the batch term is taken only when every singular value is at least
# this fraction of the largest (condition number <= 100). float32 eigenvectors mix directions
# whose singular values are below ~sqrt(eps32) * s_1 and are accurate to ~eps32 * s_1 / gap
# elsewhere; measured on 144 x 128 float32 batches with geometric spectra, the gradient's largest
# entry error relative to the float64 reference is <= 7.2e-5 at condition 99 (5.5e-6 at 10).
# Anything worse conditioned takes the float64 SVD.
_FLOAT32_MIN_RELATIVE_SINGULAR_VALUE = 1e-2


def _t(x):
    return ops.swapaxes(x, -1, -2)


def _batch_term(x64, x32, threshold, rank_cutoff=False):
    """``||X||_*`` and its thresholded subgradient; float32 eigenvectors where that is exact enough.

    The 128 x 128 float64 eigendecomposition costs about twice the float32 one on a CPU and
    dominates the loss; for float32 inputs the float32 eigenvectors are used when the spectrum is
    well conditioned (see `_FLOAT32_MIN_RELATIVE_SINGULAR_VALUE`), with float64 as the fallback.
    The shortcut computes in float32 throughout: the singular values are the norms of the
    projections ``X v_i`` (``s_i u_i``) of the unit-normalized eigenvectors, the subgradient
    ``(X V / s) V^T``.
    """
    wide = _guards.dtype_name(x64)

    def exact():
        norms, subs = nuclear_norms_and_subgradients(x64[None], threshold, rank_cutoff)
        return norms[0], subs[0]

    if x32 is None:
        return exact()
    tall = _guards.is_tall(x32)
    x32_tall = _guards.orient(x32, tall)
    _, v = ops.eigh(_backend.matmul(_t(x32_tall), x32_tall))
    # TensorFlow's (Eigen's) float32 eigenvectors have norms 1 +- ~1e-5, which put the nuclear
    # norm ~1e-6 relative off (first order in the norms, second in the directions): normalized,
    # the float32 projections below give it to ~1e-7 (144 x 128 Gaussian batches: 5e-8 to 8e-8,
    # against 1.1e-6 to 2.2e-6 from unnormalized eigenvectors even with float64 projections).
    v = v / _guards.norm(v, axis=0)
    p = _backend.matmul(x32_tall, v)  # column i is s_i * u_i
    s = _guards.norm(p, axis=0)
    s_min = ops.min(s)
    safe = ops.logical_and(
        s_min >= _FLOAT32_MIN_RELATIVE_SINGULAR_VALUE * ops.max(s),
        ops.cast(s_min, wide) >= 10.0 * threshold,  # all kept by the threshold, with a margin
    )

    def shortcut():
        # The float32 products' rounding (<= ~sqrt(D) * eps32 of an entry) is far below the
        # float32 eigenvectors' direction error (above), and this path returns a float32 gradient.
        sub = _backend.matmul(p / s, _t(v))
        return ops.sum(ops.cast(s, wide)), ops.cast(_guards.orient(sub, tall), wide)

    return ops.cond(safe, shortcut, exact)


def _gather_rows(per_class, coords, k_max):
    """Row `coords[i]` = (class, position) of the `[C, K_max, D]` tensor, for every i: `[N, D]`."""
    dim = _guards.static_or_dynamic_shape(per_class)[-1]
    flat = ops.reshape(per_class, (-1, dim))
    return _backend.take(flat, coords[:, 0] * k_max + coords[:, 1], axis=0)


def _ole(labels, x, delta, threshold, float32_shortcut, num_classes=None, per_row=False):
    @ops.custom_gradient
    def forward(x):
        dtype = _guards.dtype_name(x)
        all_finite, x_scaled, scale = _guards.finite_scaled(x)
        rows, cols = _guards.static_or_dynamic_shape(x)
        if num_classes is None and not per_row:
            coords, classes, k_max = _backend.class_layout(labels)
            present = None
        else:
            # per_row (XLA without num_classes): one class slot per row.
            ids, classes = (
                (_first_row_class_ids(labels), rows) if per_row else (labels, num_classes)
            )
            coords, k_max, present, valid = _static_class_layout(ids, classes, rows)
            # Labels outside [0, num_classes) inside a compiled function (an eager call refused
            # them already): the loss and its gradient are NaN, as for non-finite embeddings.
            all_finite = ops.logical_and(all_finite, valid)
        n = ops.cast(rows, dtype)
        # Extreme magnitudes: decompose x / 2^k (exact) with the threshold scaled alike, and
        # scale the norms back; nuclear norms are 1-homogeneous and U V^T scale-free, so this
        # is the same computation without overflow (float32 Gram products above ~1e19, the
        # float32 shortcut's cast of float64 input) or underflow (below ~1e-19).
        scaled_threshold = ops.full((), threshold, dtype) / scale  # not via float32
        per_class = ops.scatter(coords, x_scaled, (classes, k_max, cols))

        # Per-class term: sum_c max(delta, ||X_c||_*).
        # float32 computation (JAX without x64) cannot tell a threshold of 1e-6 from rounding
        # noise: its rank decisions also drop what is below the numerical-rank cutoff.
        rank_cutoff = dtype == "float32"
        class_norms, class_subs = _class_nuclear_norms_and_subgradients(
            per_class, scaled_threshold, rank_cutoff
        )
        class_norms = class_norms * scale
        active = class_norms > delta
        floored = ops.where(active, class_norms, ops.full_like(class_norms, delta))
        if present is not None:
            # A class absent from the batch is no term of Eq. 2 (it would contribute delta).
            floored = ops.where(present, floored, ops.zeros_like(floored))
            active = ops.logical_and(active, present)
        class_term = ops.sum(floored)

        # Batch term: ||X||_*.
        x32_scaled = ops.cast(x_scaled, "float32") if float32_shortcut else None
        batch_norm, batch_sub = _batch_term(x_scaled, x32_scaled, scaled_threshold, rank_cutoff)
        batch_norm = batch_norm * scale
        value = (class_term - batch_norm) / n  # Eq. 2
        # What the gradient needs of the two masks, as floats: a boolean kept for the backward
        # pass inside the empty-batch `tf.cond` makes TensorFlow log "Type inference failed".
        active_f = ops.cast(active, dtype)
        # 1, or NaN for non-finite embeddings (or labels out of range): the value and the
        # gradient are multiplied by it, as in `tf_svmax.ops.spectral` (no conditional, which
        # JAX would compile anew at every call of the traced gradient function).
        finite = _guards.nan_unless_factor(all_finite, dtype)

        def grad(*args, upstream=None):
            # Keras' PyTorch backend passes the cotangent as `upstream=`, the others positionally.
            if upstream is None:
                (upstream,) = args
            # Eq. 6: per-class U_1c V_1c^T on the class's rows (zero when ||X_c||_* <= delta),
            # minus the batch's U_1 V_1^T.
            class_subs_active = class_subs * active_f[:, None, None]
            class_rows = _gather_rows(class_subs_active, coords, k_max)
            return (class_rows - batch_sub) * ((upstream * finite) / n)

        return value * finite, grad

    return forward(x)


def _float32_shortcut(input_dtype, compute):
    """Whether the batch term may use float32 eigenvectors (see `_batch_term`): for narrower than
    float64 inputs computed in float64, on TensorFlow only. It is TensorFlow's measured speed-up
    (Eigen's float64 eigensolver costs twice its float32 one); on PyTorch the float64 SVD was both
    faster (5.5 ms against 6.9 ms for the loss and its gradient at 144 x 128, one CPU thread) and
    exact, where LAPACK's float32 eigenvectors missed the core's 1e-5 (1.0e-5 to 1.5e-5 of the
    gradient's largest entry)."""
    narrower = input_dtype != "float64" and compute == "float64"
    return narrower and _backend.FAST_FLOAT32_EIGH


def _compute_dtype():
    """float64 where the backend has it; float32 on JAX without x64, said once."""
    if _guards.float64_available():
        return "float64"
    checks.warn_once(
        "ole-float32",
        "tf_svmax: ole_loss computes in float64, which JAX has only with jax_enable_x64; "
        "computing in float32, where singular values below ~1e-7 * s_1 are rounding noise "
        "(jax.config.update('jax_enable_x64', True) gives the float64 loss).",
    )
    return "float32"


def ole_loss(labels, embeddings, *, delta=1.0, threshold=1e-6, num_classes=None):
    """OLE loss of one mini-batch (a scalar; multiply by lambda yourself).

    ``(sum_c max(delta, ||X_c||_*) - ||X||_*) / N`` with the published subgradient (OLE paper
    Eq. 2, 5, 6) as its gradient.

    Args:
      labels: `[N]` (or `[N, 1]`) integer class labels; any values, any order.
      embeddings: `[N, D]` floating features (the OLE paper does not normalize them).
      delta: Floor on each class's nuclear norm (paper: 1.0). Float >= 0.
      threshold: Singular values below it are dropped from the subgradient (original: 1e-6).
      num_classes: None (default: labels may be any integers), or the static number of classes
        C, the labels then being class ids in ``[0, C)``: the static layout XLA compiles
        (`jit_compile=True`, `jax.jit`, `fit` on JAX) with C SVDs of `[N, D]` (see the module
        docstring; without it XLA computes N of them, one per row). A label outside ``[0, C)``
        is a ValueError eagerly and makes the loss and its gradient NaN inside a compiled
        function.

    Returns:
      A scalar of the dtype of `embeddings` (computed in float64; in float32 on JAX without
      `jax_enable_x64`); 0 for a batch with no rows.

    Raises:
      ValueError: bad rank, mismatched batch sizes, a negative `delta`/`threshold`.

    Example:
      >>> x = keras.random.normal([8, 16])
      >>> ole_loss([0, 0, 1, 1, 2, 2, 3, 3], x)
    """
    delta = checks.check_non_negative_number(delta, "delta")
    threshold = checks.check_non_negative_number(threshold, "threshold")
    if num_classes is not None:
        num_classes = checks.check_positive_int(num_classes, "num_classes")
    per_row = False
    x, dtype = checks.float_matrix(embeddings, "embeddings", min_rows=0)
    if num_classes is not None:
        labels = static_class_ids(labels, num_classes, x)
    elif _backend.in_xla_context():
        # XLA cannot compile the data-dependent class set (unique, bincount): one static slot
        # per row instead, each class in the slot of its first row.
        labels, per_row = _traced_labels(labels, x), True
    else:
        labels = _same_rows(class_labels(labels), x)
    compute = _compute_dtype()
    # A batch with no rows has no classes and nothing to penalize: 0 (Eq. 2 would be 0/0).
    # Cast before the row-count `tf.cond`, so both of its branches compute in one dtype: a
    # float64 branch beside a float32 one made TensorFlow log "Type inference failed".
    shortcut = _float32_shortcut(_guards.dtype_name(x), compute)
    x_compute = ops.cast(x, compute)
    value = checks.zero_unless_rows(
        x_compute,
        lambda: _ole(labels, x_compute, delta, threshold, shortcut, num_classes, per_row),
    )
    return ops.cast(value, dtype)
