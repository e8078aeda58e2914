"""NaN in gives NaN out: the mining losses on NaN, inf and overflowing embeddings, on every
Keras backend, eagerly and compiled (XLA on TensorFlow, ``jit_compile=True``, and JAX,
``jax.jit``; PyTorch eagerly), and the losses that wrap them (issue 59, item 1).

Before: ``where(x >= 0, x, 0)`` hinges turned NaN into 0 on JAX and PyTorch (a diverged run
reported a loss of exactly 0), and XLA's max/min reductions on TensorFlow dropped a NaN row
(`BatchHardTripletLoss` finite, `TripletHardLoss` inf). The reference is IEEE arithmetic: a
float64 NumPy sum over any NaN, inf - inf or overflowing distance is not finite.

Runs once per backend (marked all_backends: tests/conftest.py)."""

import numpy as np
import pytest

from tests import backends
from tf_svmax import losses as L

pytestmark = pytest.mark.all_backends

LABELS = np.repeat(np.arange(4), 3).astype("int32")

LOSSES = {
    "TripletSemiHardLoss": L.TripletSemiHardLoss,
    "TripletHardLoss": L.TripletHardLoss,
    "TripletHardLoss-soft": lambda: L.TripletHardLoss(soft=True),
    "LiftedStructLoss": L.LiftedStructLoss,
    "LiftedStructLoss-squared": lambda: L.LiftedStructLoss(distance="squared-L2"),
    "BatchHardTripletLoss": L.BatchHardTripletLoss,
    "BatchHardTripletLoss-soft": lambda: L.BatchHardTripletLoss(margin="soft"),
}


def _embeddings(kind, b=12, seed=0):
    """`b` unit rows of width 5 with one bad row: a NaN entry, an inf entry, or a finite row
    scaled by 1e30 (its squared distances overflow float32)."""
    x = np.random.default_rng(seed).standard_normal((b, 5)).astype("float32")
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    if kind == "nan":
        x[3, 1] = np.nan
    elif kind == "inf":
        x[3, 1] = np.inf
    else:
        x[3] *= np.float32(1e30)
    return x


KINDS = ("nan", "inf", "overflow")


def _finite(b=12, seed=0):
    """The same rows without the bad one."""
    x = _embeddings("nan", b, seed)
    x[3, 1] = 0.5
    return x


def _reference_is_finite(x):
    """Whether the float64 squared distances of `x` (as float32 would compute them, with the
    Gram expansion) are all finite: the independent reference of "a non-finite batch"."""
    x32 = x.astype(np.float32)
    with np.errstate(all="ignore"):
        squares = np.sum(x32 * x32, axis=1, dtype=np.float32)
        gram = (x32 @ x32.T).astype(np.float32)
        d2 = squares[:, None] + squares[None, :] - np.float32(2.0) * gram
    return bool(np.all(np.isfinite(d2)))


def _call(mode, fn):
    return backends.compiled(fn) if mode == "compiled" else fn


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("name", sorted(LOSSES))
def test_a_non_finite_batch_gives_nan(name, mode):
    loss = LOSSES[name]()
    call = _call(mode, lambda y, x: loss(y, x))
    for kind in KINDS:
        x = _embeddings(kind)
        assert not _reference_is_finite(x)
        value = float(backends.to_numpy(call(LABELS, x)))
        assert np.isnan(value), (kind, value)
    # A finite batch stays finite (the guard adds 0).
    assert np.isfinite(float(backends.to_numpy(call(LABELS, _finite()))))


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("name", ["TripletSemiHardLoss", "LiftedStructLoss"])
def test_nan_without_positive_pairs_is_nan_not_the_empty_batch_s_zero(name, mode):
    """Singleton classes: no positive pair, whose finite value is 0; a NaN batch is NaN."""
    loss = LOSSES[name]()
    call = _call(mode, lambda y, x: loss(y, x))
    labels = np.arange(12).astype("int32")
    assert float(backends.to_numpy(call(labels, _finite()))) == 0.0
    assert np.isnan(float(backends.to_numpy(call(labels, _embeddings("nan")))))


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_batch_hard_per_anchor_values_are_nan_for_every_anchor_that_sees_the_nan_row(mode):
    loss = L.BatchHardTripletLoss(reduction=None)
    call = _call(mode, lambda y, x: loss(y, x))
    values = backends.to_numpy(call(LABELS, _embeddings("nan")))
    # Every anchor's distance row holds the NaN row's column.
    assert values.shape == (12,) and np.isnan(values).all()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "wrap",
    ["RegularizedLoss", "XMLLoss", "CrossBatchMemory"],
)
def test_the_wrapping_losses_keep_the_nan(wrap, kind):
    base = L.TripletSemiHardLoss()
    x = _embeddings(kind)
    if wrap == "RegularizedLoss":
        # A zero-weight spread-out-free regularizer: the value is the base loss'.
        loss = L.RegularizedLoss(base, [L.SVMaxLoss(lambda_=0.0)])
    elif wrap == "XMLLoss":
        loss = L.XMLLoss(base, num_prototypes=2, lambda_=0.0)
        x = np.concatenate([x, np.ones((12, 2), "float32")], axis=1)
    else:
        loss = L.CrossBatchMemory(base, memory_size=24)
    assert np.isnan(float(backends.to_numpy(loss(LABELS, x))))


# Labels a trace cannot refuse (issue 59, item 2): NaN, not the value with the label ignored. --

SIMILARITIES = np.random.default_rng(1).uniform(-1, 1, (6, 3)).astype("float32")
PROXY_LABELS = np.array([0, 1, 2, 1, 0, 2])


def _ref_proxy_anchor(labels, s, alpha=32.0, delta=0.1):
    from tests.reference_ranking import proxy_anchor

    return proxy_anchor(labels, s, alpha, delta)


@pytest.mark.skipif(backends.BACKEND == "torch", reason="Keras does not compile PyTorch with XLA")
@pytest.mark.parametrize("bad", ["out of range", "negative", "non-integral"])
def test_proxy_anchor_under_xla_gives_nan_for_a_label_outside_its_classes(bad):
    """TensorFlow's `jit_compile=True` dropped the label assert (36.70), a JAX trace ignored the
    row; eagerly the same labels are refused by name (tests/losses/test_paper_losses.py)."""
    loss = L.ProxyAnchorLoss()
    call = backends.compiled(lambda y, s: loss(y, s))
    want = _ref_proxy_anchor(PROXY_LABELS, SIMILARITIES)
    backends.assert_close(backends.to_numpy(call(PROXY_LABELS, SIMILARITIES)), want, 1e-5)
    labels = {
        "out of range": np.array([0, 1, 2, 1, 3, 2]),
        "negative": np.array([0, 1, 2, 1, -1, 2]),
        "non-integral": np.array([0, 1, 2, 1, 0.5, 2], "float32"),
    }[bad]
    assert np.isnan(backends.to_numpy(call(labels, SIMILARITIES)))
