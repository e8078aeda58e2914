"""Singular values of a mini-batch embedding matrix, the SVMax bounds and the SVMax penalty.

SVMax (seed paper `000`, Sec. 3; dissertation `001`, Ch. 3) maximizes the mean singular value
``s_mu = (1/k) * sum_i s_i`` of the embedding matrix ``E`` (``b x d``, ``k = min(b, d)``).

Spectral paths (argument `method`):

* ``"gram"`` (the default outside XLA, and under JAX's XLA on a CPU): eigendecomposition of the
  smaller Gram matrix (``E^T E`` or ``E E^T``), then each singular value is recomputed from
  ``E`` itself as ``s_i = ||E v_i||``. Recomputing from ``E`` keeps the absolute error near
  ``eps * s_1`` instead of the ``sqrt(eps) * s_1`` that ``sqrt(eigenvalue)`` would give. On a
  CPU it is about twice as fast as TensorFlow's SVD kernel.
* ``"svd"``: one thin ``keras.ops.svd`` with singular vectors. TensorFlow's own gradient of
  ``svd(compute_uv=False)`` runs a second SVD (and JAX's and PyTorch's gradients through the
  singular vectors have the ``1 / (s_i^2 - s_j^2)`` terms below); ours reuses the factors.
* ``"newton_schulz"`` (nuclear norm and mean singular value only; the default under XLA but
  JAX's on a CPU): the polar factor ``U V^T`` by Newton-Schulz iterations (two quintic steps
  that grow the small singular values fast, then the cubic iteration to convergence), built
  from matrix products only, which XLA compiles well. ``||E||_* = <U V^T, E>``. Where one side
  of the batch is at least twice the other, the first steps run on the small Gram matrix
  (`polar_newton_schulz`).

All paths use the same gradient, ``sum_i g_i u_i v_i^T`` (for the nuclear norm ``U V^T``),
computed from factors saved in the forward pass. Unlike the gradient through ``U`` and ``V``, it
has no ``1 / (s_i^2 - s_j^2)`` terms, so repeated singular values (tensorflow#17476) and
rank-deficient batches give finite gradients. Directions whose singular value is numerically zero
(at most ``max(b, d) * eps * s_1``) get zero gradient, so ``U V^T`` is a genuine subgradient of
the nuclear norm (the ``W = 0`` choice of the OLE paper, Eq. 5).

Accuracy of the ``"gram"`` path: each ``s_i`` is typically within a few ``eps * s_1`` of the
exact value; for ill-conditioned float32 input (``s_1 / s_min`` in the thousands) errors of a few
hundred ``eps * s_1`` were measured. Pass float64 input, or ``method="svd"``, where the small
singular values themselves matter; the mean and its gradient are far less sensitive.

Backends: everything is `keras.ops`, so it runs on TensorFlow, JAX and PyTorch; on TensorFlow
``ops.eigh``/``ops.svd`` are ``tf.linalg.eigh``/``tf.linalg.svd`` and the numerics are the
original ones. "Under XLA" means ``jit_compile=True`` on TensorFlow and any ``jax.jit`` trace on
JAX (Keras compiles JAX train steps by default); there ``"auto"`` is Newton-Schulz on a GPU and
the Gram path on a CPU, where JAX's compiled `eigh` is fast (`_xla_eigh_is_fast`); PyTorch
never runs these ops under XLA. JAX without ``jax_enable_x64`` has no float64: float64 input
arrives as float32 and is computed (and returned) as float32.

Non-finite inputs: if any entry of the input is NaN or +-inf, every output and every gradient
entry is NaN (the decompositions themselves are never fed non-finite values: Eigen's
eigensolver reads one triangle and returns finite garbage for NaN input).
"""

import math
import numbers

import keras
import numpy as np
from keras import ops

from tf_svmax import _backend, checks
from tf_svmax.ops._guards import (
    at_least,
    dtype_name,
    finite_scaled,
    is_tall,
    nan_unless_factor,
    norm,
    orient,
    select,
    static_or_dynamic_shape,
)

METHODS = ("auto", "gram", "svd", "newton_schulz")

# Newton-Schulz stops when the polar iterate moves less than this many machine epsilons (times
# sqrt(k)), or after this many iterations. Singular values below ~1e-4 * ||E||_F at that point are
# the only ones not yet converged, and each contributes at most itself to the nuclear norm.
_NS_TOL_EPS = 32.0
_NS_MAX_ITERATIONS = 60
# The quintic of Muon's orthogonalization (K. Jordan et al., 2024, "Muon: An optimizer for
# hidden layers"): p(x) = a x + b x^3 + c x^5 has p'(0) = 3.4 and maps (0, 1] into (0, 1.21), so
# two steps multiply the small singular values by ~12 and leave every one where the cubic
# iteration converges. Measured on the benchmark's unit rows (d = 128): the iterations' cost in
# M x N x N products fell from 34 to 21 at b = 144 and from 24 to 13 at b = 1,024. A third step
# also grows the numerical noise of a rank-deficient batch past the stopping tolerance (the
# 144 x 128 rank-20 batch of tests/ops/test_spectral.py then ran all 60 iterations).
_NS_QUINTIC = (3.4445, -4.7750, 2.0315)
# The Gram-space start (`_newton_schulz_start_in_gram_space`) takes the two quintic steps and then
# this many cubic ones on N x N matrices. Each step multiplies how far the rounding error of the
# float32 Gram matrix carries into the polar factor (for directions not yet converged, about
# eps times the square of the start's gain, 3.4445^2 * 1.5^k): measured on a 1,024 x 128 batch
# of condition 1,000 (NumPy float32 products), the largest error of U V^T relative to its largest
# entry was 1.5e-5 after 4 cubic steps (the tall start: 3.1e-5), 8e-5 after 5 and 1.4e-3 after 6.
# Four suffice for the well-conditioned batches: on Gaussian and unit-row 1,024 x 128 (and
# 256 x 128) batches the tall loop's first step then already moves less than its tolerance.
_NS_GRAM_CUBIC_STEPS = 4
# The Gram-space start costs ~17 N x N x N products against the ~10 M x N x N products of the
# tall steps it saves (unit rows, 1,024 x 128: 13 M x N x N products without it, 4 with it), so
# it pays from M ~ 1.7 N on. Measured under TensorFlow's XLA (`svmax` forward + backward, unit
# rows, d = 128, 2-core AMD EPYC, one thread, load ~2.5, medians of 9 rounds): 144 x 128 2.29
# ms with it against 2.20 without, 192 x 128 1.80 against 1.91, 256 x 128 2.27 against 2.77.
# Taken from M >= 2 N, which leaves the break-even (~1.5 N) a margin.
_NS_GRAM_MIN_ASPECT = 2


def _tiny(dtype):
    return float(np.finfo(dtype).tiny)


def _eps(dtype):
    return float(np.finfo(dtype).eps)


def _t(x):
    """The transpose of the last two axes."""
    return ops.swapaxes(x, -1, -2)


def _min_dim(x):
    rows, cols = static_or_dynamic_shape(x)[-2:]
    if isinstance(rows, int) and isinstance(cols, int):
        return float(min(rows, cols))
    return ops.cast(ops.where(rows < cols, rows, cols), dtype_name(x))


def _numerical_rank_mask(s, x_tall):
    """1.0 where `s_i` is above the numerical-rank cutoff ``max(M, N) * eps * s_1``, else 0.0.

    A singular value that is zero in exact arithmetic comes out of any float decomposition as
    ~eps * s_1, with a singular vector pair that is noise (on the Gram path, a unit vector inside
    the span of the genuine directions). Keeping it would make ``U V^T`` a non-subgradient
    (spectral norm > 1); the cutoff is NumPy's `matrix_rank` default.
    """
    dtype = dtype_name(x_tall)
    rows, cols = static_or_dynamic_shape(x_tall)[-2:]
    static = isinstance(rows, int) and isinstance(cols, int)
    size = float(max(rows, cols)) if static else ops.cast(ops.where(rows > cols, rows, cols), dtype)
    cutoff = size * _eps(dtype)
    cutoff = cutoff * ops.max(s, axis=-1, keepdims=True)
    return ops.cast(s > cutoff, dtype)


def gram_factors(x_tall):
    """Thin SVD factors of `x_tall` (`[..., M, N]`, `M >= N`) from the `N x N` Gram matrix.

    Returns `(s, u, v)` with `s: [..., N]`, `u: [..., M, N]`, `v: [..., N, N]` in the order of
    decreasing eigenvalue (not re-sorted by the recomputed `s`). Columns of `u` for singular
    values below the numerical-rank cutoff are zero (see `_numerical_rank_mask`).
    """
    gram = _backend.matmul(x_tall, x_tall, transpose_a=True)
    _, v = ops.eigh(gram)  # ascending eigenvalues
    v = ops.flip(v, axis=-1)
    p = _backend.matmul(x_tall, v)  # column i is s_i * u_i
    # s_i = ||E v_i||, recomputed from E: error ~eps * s_1 rather than sqrt(eps) * s_1.
    s = norm(p, axis=-2)
    keep = _numerical_rank_mask(s, x_tall)
    # u_i = p_i / s_i where kept; a dropped column is divided by s_i + 1 >= 1 instead (a zero
    # column gives 0, not 0/0 = NaN) and zeroed. (s_i + 0 = s_i exactly.)
    u = p / (s + (1.0 - keep))[..., None, :] * keep[..., None, :]
    rows, cols = static_or_dynamic_shape(x_tall)[-2:]
    if not isinstance(rows, int):
        # A matrix of unknown shape may be wide under XLA (`is_tall`: not transposed). Its last
        # N - M directions are the null space's, whose ||E v_i|| is noise above the rank cutoff
        # (the Gram squares the condition number): zeroed. (A no-op for a tall matrix.)
        genuine = ops.cast(ops.arange(cols) < rows, dtype_name(x_tall))
        s, u = s * genuine, u * genuine
    return s, u, v


def svd_factors(x_tall):
    """Thin SVD factors `(s, u, v)` of `x_tall` from one `ops.svd` call."""
    # full_matrices=False: the thin factors are all we use (Keras' default is the full ones).
    u, s, vh = ops.svd(x_tall, full_matrices=False)
    # Numerically zero singular values get zero gradient, as on the Gram path.
    u = u * _numerical_rank_mask(s, x_tall)[..., None, :]
    return s, u, _t(vh)


_FACTORS = {"gram": gram_factors, "svd": svd_factors}


def _xla_eigh_is_fast():
    """Whether the Gram path is the faster one under XLA here: on JAX's CPU backend.

    TensorFlow's XLA compiles `eigh` to its own slow eigensolver, so ``"auto"`` takes
    Newton-Schulz under `jit_compile=True`; JAX's CPU `eigh` is a LAPACK call inside the compiled
    program. Measured under `jax.jit`, forward + backward of `mean_singular_value`, float32, on a
    2-core AMD EPYC (AVX-512; JAX 0.10.2), three alternating compilations each: 144 x 128 Gram
    0.78 ms, Newton-Schulz 1.04 ms; 4,096 x 128 Gram 3.1 ms, Newton-Schulz 10.0 ms (medians).
    On a loaded machine LAPACK's threads occasionally stall a 128 x 128 `eigh` to ~115 ms (not
    with ``OMP_NUM_THREADS=1``). JAX on a GPU is not measured here: Newton-Schulz stays.

    Re-measured for issue 60 with `benchmarks/backend_speed.py --threads=1` (same machine, TF
    2.21, JAX 0.10.2, PyTorch 2.13; load 2.7-3.2; `svmax` forward + backward, 7 interleaved
    rounds; after the faster Newton-Schulz start): what ``"auto"`` picks is the fastest path or
    within the rounds' spread of it on every backend at b = 16, 144 and 1,024 (d = 128). JAX
    ``jax.jit``: Gram 0.07 / 1.08 / 2.07 ms, Newton-Schulz 0.11 / 1.33 / 7.12 ms; TensorFlow
    XLA: Newton-Schulz 0.26 / 1.57 / 6.20 ms, Gram (XLA's eigensolver) 0.30 / 18.8 / 18.2 ms;
    without XLA the Gram path (TensorFlow 0.31 / 1.27 / 2.31 ms, PyTorch 0.48 / 1.42 / 2.68 ms
    after its dispatch was cut) beats Newton-Schulz and the SVD except PyTorch's SVD at b = 16
    (0.46 ms, within the rounds' spread), where both are mostly eager dispatch
    (`docs/benchmarks.md`). With the Gram-space start of Newton-Schulz (`polar_newton_schulz`)
    JAX's ``jax.jit`` Newton-Schulz at 1,024 x 128 took 2.95 ms against the Gram path's ~2.3 ms
    (three runs, load 1.9-3.0): the Gram path stays the faster one on a CPU.

    Measured on both instruction sets for issue 60 (`backend_speed.py --threads=1`, native and
    ``--isa=avx2`` alternating, four runs each, load 2.1-4.4, before the Gram-space start): with
    every library capped at AVX2 on the same AVX-512 CPU (oneDNN, OpenBLAS, ATen and XLA's code
    generation; TensorFlow's Eigen is compiled for AVX, and PyTorch's MKL reported no change), the
    fastest path per backend, mode and b was the same as natively, and ``"auto"`` took it or one
    within the rounds' spread (`benchmarks/results/backend_speed_avx2cap/`). No AVX2-only CPU was
    measured."""
    return _backend.xla_eigh_is_fast()


def _resolve_method(method, want_vector):
    checks.check_choice(method, "method", METHODS)
    xla = _backend.in_xla_context()
    if method == "auto":
        if not xla or _xla_eigh_is_fast():
            return "gram"
        if want_vector:
            checks.warn_once(
                "xla-vector",
                "tf_svmax: singular_values() under XLA (jit_compile=True, or jax.jit) uses XLA's "
                "compiled eigensolver, ~10x slower than without XLA on a CPU. nuclear_norm(), "
                "mean_singular_value() and svmax() have a fast XLA path (Newton-Schulz).",
            )
            return "gram"
        return "newton_schulz"
    if method == "newton_schulz" and want_vector:
        raise ValueError(
            checks.invalid(
                "method",
                "'auto', 'gram' or 'svd' for individual singular values "
                "('newton_schulz' yields only their sum)",
                method,
            )
        )
    if method == "svd" and xla:
        checks.warn_once(
            "xla-svd",
            "tf_svmax: method='svd' under XLA (jit_compile=True, or jax.jit) compiles the SVD to "
            "XLA's Jacobi SVD, which is hundreds of times slower than without XLA on a CPU. "
            "Use method='auto' or compile without XLA.",
        )
    return method


def _upstream(args, upstream):
    """The output cotangent of a `custom_gradient` gradient function: TensorFlow and JAX pass it
    positionally, Keras' PyTorch backend as ``upstream=`` (hence ``grad(*args, upstream=None)``)."""
    if upstream is None:
        (upstream,) = args
    return upstream


def _guarded_factors(x, method):
    """``(finite, scale, tall, s, u, v)``: the factors of `x` (non-finite entries replaced,
    divided by a power of two `scale` so that extreme magnitudes neither overflow nor underflow,
    transposed to tall when wide) by `method`; `s` is of the scaled matrix. `finite` is 1, or NaN
    when `x` holds a non-finite entry (`nan_unless_factor`): every output is multiplied by it."""
    all_finite, x_scaled, scale = finite_scaled(x)
    tall = is_tall(x)
    s, u, v = _FACTORS[method](orient(x_scaled, tall))
    return nan_unless_factor(all_finite, dtype_name(x)), scale, tall, s, u, v


def _descending_order(s):
    """The permutation that sorts the vector `s` in descending order, ties kept in their order.

    `ops.argsort` is ascending and not stable on TensorFlow, so the rank of each entry (how many
    entries come before it) is counted pairwise and the distinct ranks are sorted: the same
    permutation on every backend. O(k^2) comparisons, negligible beside the decomposition.
    """
    index = ops.arange(static_or_dynamic_shape(s)[0])
    before = ops.logical_or(
        s[None, :] > s[:, None],
        ops.logical_and(s[None, :] == s[:, None], index[None, :] < index[:, None]),
    )
    rank = ops.sum(ops.cast(before, "int32"), axis=1)
    return ops.argsort(rank)


def _singular_values(x, method):
    """Descending singular values of rank-2 `x` with the factor-reuse gradient."""

    @ops.custom_gradient
    def forward(x):
        finite, scale, tall, s, u, v = _guarded_factors(x, method)
        s = s * scale  # the factors u, v (and so the gradient) do not depend on the scale
        order = _descending_order(s)
        s, u, v = ops.take(s, order), ops.take(u, order, axis=1), ops.take(v, order, axis=1)

        def grad(*args, upstream=None):
            upstream = _upstream(args, upstream)
            # d s_i / d E = u_i v_i^T (oriented like the tall matrix).
            g = _backend.matmul(u * (upstream * finite)[None, :], v, transpose_b=True)
            return orient(g, tall)

        return s * finite, grad

    return forward(x)


def _nuclear_norm_factored(x, method):
    @ops.custom_gradient
    def forward(x):
        finite, scale, tall, s, u, v = _guarded_factors(x, method)
        total = ops.sum(s) * (scale * finite)  # ||cE||_* = c ||E||_*; U V^T does not depend on c

        def grad(*args, upstream=None):
            upstream = _upstream(args, upstream)
            # d ||E||_* / d E = U V^T (zero-singular-value directions dropped).
            g = _backend.matmul(u, v, transpose_b=True) * (upstream * finite)
            return orient(g, tall)

        return total, grad

    return forward(x)


def _sigma_max_bound(gram, frobenius):
    """An upper bound of ``s_1`` from the Gram matrix ``A = E^T E``: ``sqrt(||A||_1)``, which is
    ``>= sqrt(||A||_2) = s_1`` (an induced norm bounds the spectral radius), or ``||E||_F``
    where that is smaller. For unit rows it is 2-5x tighter than ``||E||_F`` (b = 144, d = 128:
    3.8 against 12; the largest singular value is 2.0), which saves Newton-Schulz iterations."""
    bound = ops.sqrt(ops.max(ops.sum(ops.abs(gram), axis=-2), axis=-1))
    return ops.where(bound < frobenius, bound, frobenius)  # (`ops.minimum` would be float32)


def _newton_schulz_start_in_tall_space(x_tall, gram, scale, eye):
    """``Y`` after the two quintic steps, iterated on ``Y`` itself (`M x N`)."""
    y = x_tall / scale
    a, b, c = _NS_QUINTIC
    for step in range(2):
        # Y^T Y of the first step is the Gram matrix over scale^2 (divided twice: the zero
        # matrix's scale is the smallest normal float, whose square is 0).
        yty = gram / scale / scale if step == 0 else _backend.matmul(_t(y), y)
        y = _backend.matmul(y, a * eye + b * yty + c * _backend.matmul(yty, yty))
    return y


def _newton_schulz_start_in_gram_space(x_tall, gram, scale, eye):
    """``Y`` after the two quintic and `_NS_GRAM_CUBIC_STEPS` cubic steps, iterated on `N x N`
    matrices: every iterate is ``Y = E Q / scale`` with ``Q`` a polynomial in the Gram matrix
    ``A = E^T E``, so a step ``Y <- Y p(Y^T Y)`` is ``Q <- Q p(S)`` with ``S = Y^T Y =
    Q A Q / scale^2``, and ``Y`` is formed once at the end (one `M x N x N` product)."""
    a, b, c = _NS_QUINTIC
    gram = gram / scale / scale  # (divided twice, as in the tall start)
    q, s = None, gram
    steps = 2 + _NS_GRAM_CUBIC_STEPS
    for step in range(steps):
        if step < 2:
            p = a * eye + b * s + c * _backend.matmul(s, s)
        else:
            p = 1.5 * eye - 0.5 * s
        q = p if q is None else _backend.matmul(q, p)
        if step < steps - 1:
            # S from Q (not updated as S p(S)^2), so that S stays the Gram matrix of the Q that
            # is used, as Y^T Y of the tall iteration is recomputed from Y.
            s = _backend.matmul(q, _backend.matmul(gram, q))
    # No shift of A is needed. Its computed eigenvalues that are zero in exact arithmetic come
    # out as +-eps * ||A||; the maps diverge on a negative one (each step multiplies it by
    # p(lambda)^2 > 1), but only a loop without bound would get there: in these six steps it
    # grows at most ~(3.4445^2 * 1.5^4)^2 ~ 3,600-fold, to ~ -4e-4 * ||A|| in float32, where p
    # is still within 1e-3 of p(0). Y itself is E Q / scale, whose Gram matrix is positive
    # semidefinite whatever the sign of A's computed eigenvalues (a direction of E that is zero
    # stays ~60 times the rounding noise of E), and the tall loop works on Y.
    return _backend.matmul(x_tall / scale, q)


def polar_newton_schulz(x_tall):
    """Polar factor `U V^T` of `x_tall` (`M >= N`) by Newton-Schulz iterations
    (`_polar_newton_schulz_of_tall`).

    A wide `x_tall` (which it can be under XLA where the shape is unknown: `is_tall` leaves it
    undecided) is transposed and the result transposed back, inside a run-time conditional
    whose branches both return `M x N`: the iteration then works on the smaller Gram matrix.
    Measured under TensorFlow's XLA with the batch dimension unknown (as in Keras' `fit`),
    `svmax` forward + backward of 16 x 128 unit rows took 1.57-1.70 times as long as with the
    shape known when iterated wide, 1.05-1.11 times transposed (2-core AMD EPYC, one thread;
    `docs/benchmarks.md`).
    """
    rows, cols = static_or_dynamic_shape(x_tall)[-2:]
    return select(
        rows >= cols,
        lambda: _polar_newton_schulz_of_tall(x_tall),
        lambda: _t(_polar_newton_schulz_of_tall(_t(x_tall))),
    )


def _polar_newton_schulz_of_tall(x_tall):
    """Polar factor `U V^T` of `x_tall` (`M >= N`) by Newton-Schulz iterations.

    Starting from ``Y = E / c`` with ``c >= s_1`` (`_sigma_max_bound`) puts every singular value
    of ``Y`` in ``(0, 1]``. Two quintic steps ``Y <- Y (a I + b Y^T Y + c (Y^T Y)^2)`` with
    `_NS_QUINTIC` multiply small singular values by 3.4 each and keep them all in
    ``(0, 1.21)``; then ``Y <- Y (3 I - Y^T Y) / 2`` converges quadratically to ``U V^T`` (it
    does for any singular value in ``(0, sqrt(3))``) until the iterate moves less than the
    tolerance. Exactly-zero singular values stay zero (their direction is dropped).

    For a matrix at least twice as tall as wide (`_NS_GRAM_MIN_ASPECT`; decided at run time
    where the shape is unknown) the two quintic steps and the first `_NS_GRAM_CUBIC_STEPS` cubic
    ones run on `N x N` matrices (`_newton_schulz_start_in_gram_space`), which costs less than
    their `M x N x N` products; the tall loop then finishes (one step for a well-conditioned
    batch) and corrects the rounding of the Gram-space steps as far as they left ``Y``'s
    singular values off 1 (not the rounding of the Gram matrix itself, which the start carries
    into ``Y``'s singular vectors: hence its few steps, see `_NS_GRAM_CUBIC_STEPS`). Measured
    under TensorFlow's XLA (2-core AMD EPYC, one thread, load 1.5-2.5), `svmax` forward +
    backward with unit rows: 1,024 x 128 6.8 -> 3.2 ms, 256 x 128 2.8 -> 2.3 ms
    (`docs/benchmarks.md`).
    """
    dtype = dtype_name(x_tall)
    rows, n = static_or_dynamic_shape(x_tall)[-2:]
    eye = ops.eye(n, dtype=dtype)
    gram = _backend.matmul(_t(x_tall), x_tall)
    # Clamp so an all-zero matrix gives Y = 0 instead of 0/0.
    scale = at_least(_sigma_max_bound(gram, norm(x_tall)), _tiny(dtype))
    y = select(
        rows >= _NS_GRAM_MIN_ASPECT * n,
        lambda: _newton_schulz_start_in_gram_space(x_tall, gram, scale, eye),
        lambda: _newton_schulz_start_in_tall_space(x_tall, gram, scale, eye),
    )
    tol = _NS_TOL_EPS * _eps(dtype) * ops.sqrt(ops.cast(n, dtype))

    def keep_going(y, change):
        return change > tol

    def step(y, change):
        y_next = _backend.matmul(y, 1.5 * eye - 0.5 * _backend.matmul(_t(y), y))
        return y_next, norm(y_next - y)

    polar, _ = ops.while_loop(
        keep_going,
        step,
        (y, ops.full((), np.inf, dtype)),
        maximum_iterations=_NS_MAX_ITERATIONS,
    )
    return polar


def _nuclear_norm_newton_schulz(x):
    @ops.custom_gradient
    def forward(x):
        all_finite, x_scaled, scale = finite_scaled(x)
        finite = nan_unless_factor(all_finite, dtype_name(x))
        tall = is_tall(x)
        x_tall = orient(x_scaled, tall)
        polar = polar_newton_schulz(x_tall)  # ||x_tall||_F cannot overflow or underflow now
        total = ops.sum(polar * x_tall) * (scale * finite)  # ||E||_* = <U V^T, E>

        def grad(*args, upstream=None):
            upstream = _upstream(args, upstream)
            return orient(polar * (upstream * finite), tall)

        return total, grad

    return forward(x)


def _nuclear_norm(x, method):
    if method == "newton_schulz":
        return _nuclear_norm_newton_schulz(x)
    return _nuclear_norm_factored(x, method)


def singular_values(x, *, method="auto"):
    """Singular values of a matrix, in descending order, with a stable gradient.

    Args:
      x: A `[b, d]` floating tensor. float16/bfloat16 is computed in float32 and cast back.
      method: ``"auto"``, ``"gram"`` or ``"svd"`` (see the module docstring).

    Returns:
      A `[min(b, d)]` tensor of the dtype of `x`.

    Raises:
      ValueError: `x` is not rank 2, or `method` is unknown.
      TypeError: `x` is not floating-point.

    Example:
      >>> s = singular_values(keras.ops.convert_to_tensor([[3.0, 0.0], [0.0, 4.0]]))  # [4., 3.]
    """
    x, dtype = checks.float_matrix(x, "x")
    method = _resolve_method(method, want_vector=True)
    s = _singular_values(x, method)
    if is_tall(x) is None:
        # Under XLA with the orientation undecided (`is_tall`) the Gram path of a wide matrix
        # has N values, the last N - M of them its null space's (zero, or noise at eps * s_1).
        rows, cols = ops.shape(x)
        s = s[: ops.minimum(rows, cols)]
    return ops.cast(s, dtype)


def nuclear_norm(x, *, method="auto"):
    """Nuclear norm ``||x||_* = sum_i s_i`` with gradient ``U V^T``.

    Args:
      x: A `[b, d]` floating tensor.
      method: ``"auto"``, ``"gram"``, ``"svd"`` or ``"newton_schulz"``.

    Returns:
      A scalar of the dtype of `x` (0 for a matrix with no rows).

    Example:
      >>> nuclear_norm(keras.ops.eye(3))  # 3.0
    """
    x, dtype = checks.float_matrix(x, "x", min_rows=0)
    method = _resolve_method(method, want_vector=False)
    return ops.cast(checks.zero_unless_rows(x, lambda: _nuclear_norm(x, method)), dtype)


def mean_singular_value(x, *, method="auto"):
    """Mean singular value ``s_mu = ||x||_* / min(b, d)`` (SVMax paper, Eq. 1).

    The mean is over the ``min(b, d)`` singular values, so for ``b < d`` it is over ``b`` values
    (dissertation, "SVMax with Small Batches").

    Args:
      x: A `[b, d]` floating tensor.
      method: ``"auto"``, ``"gram"``, ``"svd"`` or ``"newton_schulz"``.

    Returns:
      A scalar of the dtype of `x`; 0 (with a zero gradient) for a batch with no rows, whose
      mean over no singular values is otherwise 0/0.

    Example:
      >>> mean_singular_value(keras.ops.eye(4))  # 1.0
    """
    x, dtype = checks.float_matrix(x, "x", min_rows=0)
    method = _resolve_method(method, want_vector=False)
    return ops.cast(
        checks.zero_unless_rows(x, lambda: _nuclear_norm(x, method) / _min_dim(x)), dtype
    )


def batched_nuclear_norm(matrices):
    """``||Q_i||_*`` of every matrix of a `[N, M, C]` batch (LORAC, seed `003` Eq. 11): `[N]` of
    the input's dtype.

    One batched ``keras.ops.svd(compute_uv=False)`` (on TensorFlow ``tf.linalg.svd``, on PyTorch
    ``torch.linalg.svdvals``), summed; its gradient is each matrix's ``U V^T`` on every backend
    (no division by singular-value gaps, so coinciding rows are safe). float16/bfloat16 is
    computed in float32 and cast back: TensorFlow has no half-precision SVD kernel, and a 10-bit
    mantissa is too coarse for one. Meant for the small matrices of a multi-view batch; for one
    large matrix use `nuclear_norm`.

    Example:
      >>> batched_nuclear_norm(keras.ops.eye(3)[None])  # [3.]
    """
    matrices = ops.convert_to_tensor(matrices)
    dtype = keras.backend.standardize_dtype(matrices.dtype)
    matrices = ops.cast(matrices, checks.compute_dtype(dtype))
    # A matrix holding NaN or inf has NaN for its norm, on every backend: PyTorch's SVD raises
    # on one (a raw `_LinAlgError`), so such matrices are zeroed before it (their gradient is
    # then 0, not NaN) and their norm set to NaN after.
    finite = ops.all(ops.isfinite(matrices), axis=(-2, -1))
    safe = ops.where(finite[..., None, None], matrices, ops.zeros_like(matrices))
    norms = ops.sum(ops.svd(safe, compute_uv=False), axis=-1)
    return ops.cast(ops.where(finite, norms, ops.full_like(norms, np.nan)), dtype)


def _is_static_int(value):
    return isinstance(value, (numbers.Integral, np.integer)) and not isinstance(value, bool)


def _is_integer_tensor(value):
    return ops.is_tensor(value) and "int" in keras.backend.standardize_dtype(value.dtype)


def svmax_bounds(batch_size, dim, dtype="float32"):
    """Lower and upper bounds ``(L, U)`` of the mean singular value of L2-normalized rows.

    With ``k = min(b, d)`` (SVMax paper Eq. 2-3; dissertation Sec. 3.4, "SVMax with Small
    Batches" for ``b < d``)::

        L = sqrt(b) / k                                  # rank-1 batch: s_1 = sqrt(b)
        U = sqrt(b * d / max(b, d)) * sqrt(b) / k        # ||E||_* <= sqrt(k) ||E||_F

    For ``b >= d`` these are the originals' ``sqrt(b) / d`` and ``sqrt(b / d)``
    (b=144, d=128: L=0.09375, U=1.06066).

    Args:
      batch_size: Number of rows `b` (a positive int, or an integer scalar tensor).
      dim: Embedding dimension `d` (likewise).
      dtype: Float dtype of the result when either argument is a tensor (a Keras dtype name or
        a backend dtype such as `tf.float32`).

    Returns:
      `(L, U)` as Python floats for static ints, otherwise as scalar tensors of `dtype`.

    Example:
      >>> svmax_bounds(144, 128)  # (0.09375, 1.06066...)
    """
    if _is_static_int(batch_size) and _is_static_int(dim):
        for arg, value in (("batch_size", batch_size), ("dim", dim)):
            if value < 1:
                raise ValueError(checks.invalid(arg, "an int >= 1", value))
        b, d = float(batch_size), float(dim)
        k = min(b, d)
        # `math.sqrt`, not `np.sqrt`: under `torch.compile` a varying batch size is a SymInt,
        # and `float()` of NumPy's square root of it gives NaN there (PyTorch 2.13).
        return math.sqrt(b) / k, math.sqrt(b * d / max(b, d)) * math.sqrt(b) / k
    name = keras.backend.standardize_dtype(dtype)
    if "float" not in name:
        raise TypeError(checks.invalid("dtype", "a floating-point dtype", name))
    tensors = []
    for arg, value in (("batch_size", batch_size), ("dim", dim)):
        if isinstance(value, bool) or not (_is_static_int(value) or _is_integer_tensor(value)):
            raise TypeError(checks.invalid(arg, "an int or an integer scalar tensor", value))
        if _is_static_int(value):
            if value < 1:
                raise ValueError(checks.invalid(arg, "an int >= 1", value))
            continue
        if len(value.shape) != 0:
            raise ValueError(
                checks.invalid(arg, "a scalar", f"<tensor of shape {tuple(value.shape)}>")
            )
        tensors.append((arg, value))
    return _checked_bounds(batch_size, dim, tensors, name)


def _checked_bounds(batch_size, dim, tensors, dtype):
    """`_bounds` of the validated arguments, after a check that each tensor in `tensors` is >= 1.

    The check depends on the backend because a tensor's value may be unknown when this runs:
    TensorFlow adds a run-time assertion to the graph (an InvalidArgumentError naming the
    argument); JAX and PyTorch check the value when it is concrete, and cannot under `jax.jit`
    (where a batch size comes from a static shape anyway, and a bad one gives inf/NaN bounds).
    """
    message = "Invalid value for argument `{}`: expected an int >= 1."
    checked = {"batch_size": batch_size, "dim": dim}
    for arg, value in tensors:
        checked[arg] = checks.checked_positive(value, message.format(arg))
    return _bounds(ops.cast(checked["batch_size"], dtype), ops.cast(checked["dim"], dtype))


def _bounds(b, d):
    """(L, U) for float tensors b, d >= 1 (no validation)."""
    k = ops.where(b < d, b, d)  # min(b, d) (ops.minimum would be float32 on PyTorch)
    lower = ops.sqrt(b) / k  # Eq. 2: rank-1 batch, s_1 = sqrt(b)
    upper = ops.sqrt(b * d / ops.where(b > d, b, d)) * ops.sqrt(b) / k  # Eq. 3
    return lower, upper


def svmax(embeddings, *, bounded=True, method="auto"):
    """The SVMax penalty of one mini-batch (a scalar; multiply by lambda yourself).

    ``bounded=True``: ``exp((U - s_mu) / (U - L))`` (SVMax paper Eq. 4), in ``[1, e]`` for
    L2-normalized rows; ``bounded=False``: ``-s_mu`` (Eq. 1). The bounds come from the batch's
    own shape (dynamic batch sizes are fine). The penalty is label-oblivious.

    A batch with ``min(b, d) < 2`` (one row, e.g. a remainder batch or a single-example
    `predict`) has ``U = L`` and Eq. 4 is 0/0: its bounded penalty is defined as 1, the minimum
    (one row is as spread out as it can be), with zero gradient. A batch with no rows has
    nothing to penalize: 0 in both forms, with a zero gradient.

    Args:
      embeddings: `[b, d]` floating tensor, normally L2-normalized rows.
      bounded: Use the bounded form (Eq. 4) or the plain negative mean (Eq. 1).
      method: Spectral path (see the module docstring).

    Returns:
      A scalar of the dtype of `embeddings`.

    Raises:
      ValueError: `embeddings` is not rank 2, or `bounded`/`method` is invalid.
    """
    bounded = checks.check_bool(bounded, "bounded")
    x, dtype = checks.float_matrix(embeddings, "embeddings", min_rows=0)
    method = _resolve_method(method, want_vector=False)
    return ops.cast(checks.zero_unless_rows(x, lambda: _svmax(x, bounded, method)), dtype)


def _svmax(x, bounded, method):
    """`svmax` of a matrix with at least one row, in `x`'s dtype."""
    s_mu = _nuclear_norm(x, method) / _min_dim(x)
    if not bounded:
        return -s_mu  # Eq. 1
    dtype = dtype_name(x)
    rows, cols = static_or_dynamic_shape(x)
    if isinstance(rows, int) and isinstance(cols, int):
        # Static shape (always on JAX and PyTorch): the bounds are Python floats and Eq. 4 takes
        # three tensor operations instead of ~20 (PyTorch runs each eagerly: 16 x 128 took
        # 0.74 ms, of which the bounds' arithmetic was a fifth).
        if min(rows, cols) < 2:
            return s_mu * 0.0 + 1.0  # the defined minimum, with a zero gradient
        lower, upper = svmax_bounds(rows, cols)
        return ops.exp((upper - s_mu) / (upper - lower))  # Eq. 4
    lower, upper = _bounds(ops.cast(rows, dtype), ops.cast(cols, dtype))
    spread = upper - lower  # 0 exactly when min(b, d) = 1
    # 1.0 where Eq. 4 is defined, else 0.0. A float mask rather than `where` on a boolean: the
    # selection is exact either way (x * 1 + 0 = x), but `where`'s gradient keeps its boolean,
    # which inside the empty-batch `tf.cond` makes TensorFlow log "Type inference failed".
    defined = ops.cast(spread > 0, dtype)
    # Guard the denominator (spread + 1 when undefined) so the unselected branch stays finite
    # (its gradient is multiplied by zero, and 0 * inf would be NaN).
    ratio = (upper - s_mu) / (spread + (1.0 - defined))
    return defined * ops.exp(ratio) + (1.0 - defined)  # Eq. 4
