"""The papers' loss functions (batch-hard triplet, all-pairs contrastive, the P x K pair losses,
spread-out, Proxy-Anchor) on every Keras backend: value and gradient (the backend's own
autodiff) against independent float64 NumPy references (tests/reference_ranking.py's loops,
a loop written from the all-pairs formula here, pytorch-metric-learning's stored values),
in float32 within 1e-5 relative; also under the backend's compiler (tests/backends.compiled).

Runs once per backend (marked all_backends: tests/conftest.py)."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
from keras import ops

from tests import reference_ranking as ref
from tests.backends import BACKEND, compiled, numpy_gradient, to_numpy, value_and_grad
from tf_svmax.losses.batch_hard import batch_hard_triplet_loss
from tf_svmax.losses.pair_contrastive import all_pairs_contrastive_loss
from tf_svmax.losses.pk_pairs import (
    pk_angular_loss,
    pk_contrastive_loss,
    pk_contrastive_pairs,
    pk_npair_loss,
)
from tf_svmax.losses.proxy_anchor import proxy_anchor_loss
from tf_svmax.losses.spread_out import random_negatives, spread_out_loss

pytestmark = pytest.mark.all_backends

RTOL = 1e-5
GOLDEN = Path(__file__).resolve().parent / "golden" / "pml_contrastive.npz"


def check(fn, reference, x, *, grad=True):
    """`fn` (float32 tensor -> scalar) against the float64 `reference` (array -> float):
    value within 1e-5 relative, gradient within 1e-5 of its largest entry; also compiled."""
    x = np.asarray(x, np.float32)
    want = reference(x.astype(np.float64))
    value, (got_grad,) = value_and_grad(fn, x)
    assert float(value) == pytest.approx(want, rel=RTOL, abs=RTOL)
    jitted = to_numpy(compiled(fn)(ops.convert_to_tensor(x)))
    assert float(jitted) == pytest.approx(want, rel=RTOL, abs=RTOL)
    assert np.all(np.isfinite(got_grad))
    if grad:
        want_grad = numpy_gradient(reference, x)
        scale = max(np.abs(want_grad).max(), 1e-3)
        np.testing.assert_allclose(got_grad, want_grad, rtol=0, atol=RTOL * scale)
    return float(value)


def _weights(n):
    # A fixed weighting of per-row values, so the gradient of each value is checked (not only
    # of their sum).
    return np.linspace(0.5, 1.5, n)


def _unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture
def data(rng):
    x = _unit(rng.standard_normal((8, 4))).astype(np.float32)
    y = np.array([0, 1, 0, 2, 1, 0, 2, 1])
    return x, y


# --- batch_hard_triplet_loss ---


@pytest.mark.parametrize("margin", [0.2, "soft", "none"])
@pytest.mark.parametrize("metric", ["euclidean", "sqeuclidean", "cityblock", "cosine"])
def test_batch_hard_matches_the_reference(data, metric, margin):
    x, y = data
    w = _weights(len(y))

    def fn(e):
        return ops.sum(
            ops.convert_to_tensor(w, "float32")
            * batch_hard_triplet_loss(y, e, margin=margin, distance=metric)
        )

    check(fn, lambda e: float(w @ ref.batch_hard(y, e, margin, metric)), x)


def test_batch_hard_with_labels_of_shape_b_1_and_one_class(data):
    x, y = data
    got = to_numpy(batch_hard_triplet_loss(y[:, None], x))
    np.testing.assert_allclose(got, ref.batch_hard(y, x, 0.2, "euclidean"), rtol=RTOL)
    value, (grad,) = value_and_grad(
        lambda e: ops.sum(batch_hard_triplet_loss(np.zeros(8, int), e)), x
    )
    assert float(value) == 0.0 and np.all(grad == 0.0)  # no negative: 0, as documented


def test_batch_hard_at_ties_gives_the_reference_value_and_a_finite_gradient(data):
    x, y = data
    x = x.copy()
    x[2] = x[0]  # a duplicate positive pair: tied distances
    x[4] = x[1]
    w = _weights(len(y))
    check(
        lambda e: ops.sum(ops.convert_to_tensor(w, "float32") * batch_hard_triplet_loss(y, e)),
        lambda e: float(w @ ref.batch_hard(y, e, 0.2, "euclidean")),
        x,
        grad=False,  # the max over tied entries has no unique gradient
    )


# --- all_pairs_contrastive_loss ---


def ref_all_pairs(labels, x, pos_margin, neg_margin, metric):
    """Hadsell's pair terms over every ordered pair of distinct rows, each kind averaged over
    its terms above 0 (pytorch-metric-learning's AvgNonZeroReducer), from the formula."""
    x = np.asarray(x, np.float64)
    if metric == "cosine_similarity":
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
    sums, counts = {True: 0.0, False: 0.0}, {True: 0, False: 0}
    for a in range(len(x)):
        for r in range(len(x)):
            if a == r:
                continue
            same = labels[a] == labels[r]
            if metric == "L2":
                d = math.sqrt(((x[a] - x[r]) ** 2).sum())
                term = d - pos_margin if same else neg_margin - d
            else:
                s = x[a] @ x[r]
                term = pos_margin - s if same else s - neg_margin
            term = max(term, 0.0)
            sums[same] += term
            counts[same] += term > 0
    return sum(sums[k] / counts[k] if counts[k] else 0.0 for k in (True, False))


MARGINS = {"cosine_similarity": (1.0, 0.5), "dot": (1.0, 0.0), "L2": (0.5, 1.5)}


@pytest.mark.parametrize("metric", sorted(MARGINS))
def test_all_pairs_matches_the_reference(rng, metric):
    x = rng.standard_normal((10, 4)).astype(np.float32)
    y = np.array([0, 1, 0, 2, 1, 0, 2, 1, 1, 3])
    pos, neg = MARGINS[metric]
    value = check(
        lambda e: all_pairs_contrastive_loss(y, e, pos_margin=pos, neg_margin=neg, distance=metric),
        lambda e: ref_all_pairs(y, e, pos, neg, metric),
        x,
    )
    assert value > 0.1


def test_all_pairs_matches_pytorch_metric_learning_golden_values():
    with np.load(GOLDEN) as f:
        golden = {key: f[key] for key in f.files}
    settings = json.loads(str(golden["__meta__"]))["settings"]
    x, y = golden["values/x"].astype(np.float32), golden["values/y"]
    for setting, kw in (
        ("cosine", {}),
        ("dot", {"distance": "dot", "pos_margin": 1.0, "neg_margin": 0.0}),
        ("lp_raw", {"distance": "L2", "pos_margin": 2.0, "neg_margin": 3.5}),
    ):
        theirs = settings[setting]
        assert (theirs["pos_margin"], theirs["neg_margin"]) == (
            kw.get("pos_margin", 1.0),
            kw.get("neg_margin", 0.5),
        )
        value, (grad,) = value_and_grad(lambda e, kw=kw: all_pairs_contrastive_loss(y, e, **kw), x)
        want = golden[f"values/{setting}/float32/value"]
        assert float(value) == pytest.approx(float(want), rel=RTOL, abs=RTOL)
        np.testing.assert_allclose(grad, golden[f"values/{setting}/float32/grad"], atol=RTOL)


def test_all_pairs_with_b_1_labels_one_class_and_nan(data):
    x, y = data
    want = ref_all_pairs(y, x, 1.0, 0.5, "cosine")
    got = to_numpy(all_pairs_contrastive_loss(y[:, None], x))
    assert float(got) == pytest.approx(want, rel=RTOL)
    one_class = np.zeros(len(y), int)
    got = to_numpy(all_pairs_contrastive_loss(one_class, x))
    assert float(got) == pytest.approx(ref_all_pairs(one_class, x, 1.0, 0.5, "cosine"), rel=RTOL)
    bad = x.copy()
    bad[3, 1] = np.nan
    assert np.isnan(to_numpy(all_pairs_contrastive_loss(y, bad)))
    assert np.isnan(to_numpy(compiled(lambda e: all_pairs_contrastive_loss(y, e))(bad)))


# --- the P x K pair losses ---


def test_pk_contrastive_pairs_are_the_originals_layout(rng):
    x = rng.standard_normal((16, 3)).astype(np.float32)
    y = np.repeat([4, 7, 1, 9], 4)
    first, second, similar = (to_numpy(t) for t in pk_contrastive_pairs(y, x))
    pairs = [(g + i, g + j) for g in (0, 8) for i, j in ((0, 1), (4, 3), (2, 5), (6, 7))]
    np.testing.assert_array_equal(first, x[[i for i, _ in pairs]])
    np.testing.assert_array_equal(second, x[[j for _, j in pairs]])
    np.testing.assert_array_equal(similar, [y[i] == y[j] for i, j in pairs])


@pytest.mark.parametrize("labels", [np.repeat([4, 7, 1, 9], 4), np.zeros(16, int)])
def test_pk_contrastive_matches_the_reference(rng, labels):
    x = _unit(rng.standard_normal((16, 3))).astype(np.float32)
    w = _weights(8)
    check(
        lambda e: ops.sum(ops.convert_to_tensor(w, "float32") * pk_contrastive_loss(labels, e)),
        lambda e: float(w @ ref.pk_contrastive(labels, e, 1.0)),
        x,
    )


@pytest.mark.parametrize("labels", [np.repeat([3, 0, 5, 3, 2], 2), np.zeros(10, int)])
@pytest.mark.parametrize("loss", ["npair", "angular"])
def test_pk_npair_and_angular_match_the_reference(rng, loss, labels):
    x = _unit(rng.standard_normal((10, 4))).astype(np.float32)
    w = _weights(5)
    if loss == "npair":

        def fn(e):
            return pk_npair_loss(labels, e, l2_reg=0.002)

        def reference(e):
            return ref.pk_npair(labels, e, 0.002)
    else:

        def fn(e):
            return pk_angular_loss(labels, e, alpha=40.0, l2_reg=0.002)

        def reference(e):
            return ref.pk_angular(labels, e, 40.0, 0.002)

    check(
        lambda e: ops.sum(ops.convert_to_tensor(w, "float32") * fn(e)),
        lambda e: float(w @ reference(e)),
        x,
    )
    # [B, 1] labels give the same values.
    np.testing.assert_array_equal(
        to_numpy(
            pk_npair_loss(labels[:, None], x)
            if loss == "npair"
            else pk_angular_loss(labels[:, None], x, alpha=40.0)
        ),
        to_numpy(
            pk_npair_loss(labels, x) if loss == "npair" else pk_angular_loss(labels, x, alpha=40.0)
        ),
    )


# A ValueError on JAX and PyTorch; TensorFlow's eager assertion raises InvalidArgumentError.
REFUSAL = ValueError if BACKEND != "tensorflow" else Exception


def test_pk_layout_is_refused(rng):
    x = rng.standard_normal((8, 3)).astype(np.float32)
    with pytest.raises(REFUSAL, match="consecutive rows per class"):
        pk_npair_loss(np.array([0, 1, 1, 1, 2, 2, 3, 3]), x)
    with pytest.raises(ValueError, match="multiple of 2"):
        pk_npair_loss(np.zeros(7, int), x[:7])


def test_pk_contrastive_docstring_example():
    got = to_numpy(
        pk_contrastive_loss(np.repeat([0, 1], 4), np.eye(8, dtype=np.float32), margin=2.0)
    )
    near, far = 2.0 + 1e-5, (2.0 - math.sqrt(2.0 + 1e-5)) ** 2
    np.testing.assert_allclose(got, [near, far, far, near], rtol=RTOL)


@pytest.mark.parametrize(
    ("fn", "kwargs"),
    [
        (pk_contrastive_loss, dict(margin=-1.0)),
        (pk_npair_loss, dict(l2_reg=-0.1)),
        (pk_npair_loss, dict(l2_reg=None)),
        (pk_angular_loss, dict(alpha=90.0)),
        (pk_angular_loss, dict(alpha=True)),
        (pk_angular_loss, dict(l2_reg=float("nan"))),
    ],
)
def test_pk_functions_refuse_bad_settings_by_name(rng, fn, kwargs):
    x = rng.standard_normal((8, 3)).astype(np.float32)
    labels = np.repeat(
        np.arange(2 if fn is pk_contrastive_loss else 4), 4 if fn is pk_contrastive_loss else 2
    )
    (arg,) = kwargs
    with pytest.raises(ValueError, match=rf"argument `{arg}`.*Received: {arg}="):
        fn(labels, x, **kwargs)


# --- spread-out ---


def test_random_negatives_picks_the_argmax_of_the_other_class_draws(rng):
    y = np.array([0, 1, 0, 2, 1, 0, 2, 1])
    uniform = rng.uniform(size=(8, 8)).astype(np.float32)
    want = [int(np.argmax(np.where(y != y[i], uniform[i], -1.0))) for i in range(8)]
    np.testing.assert_array_equal(to_numpy(random_negatives(y, uniform)), want)
    np.testing.assert_array_equal(to_numpy(random_negatives(np.zeros(4, int), uniform[:4, :4])), -1)


def test_spread_out_matches_the_reference(data):
    x, y = data
    negatives = np.array([1, 2, 3, 0, 0, 7, -1, 0])
    check(
        lambda e: spread_out_loss(y[:, None], e, negatives),
        lambda e: ref.spread_out(e, negatives),
        x,
    )
    assert float(to_numpy(spread_out_loss(y, x, -np.ones(8, int)))) == 0.0


# --- Proxy-Anchor ---


@pytest.mark.parametrize("labels", [np.array([0, 2, 2, 4, 0, 1]), np.full(6, 3)])
def test_proxy_anchor_matches_the_reference(rng, labels):
    s = np.tanh(rng.standard_normal((6, 5))).astype(np.float32) * 0.5
    check(
        lambda t: proxy_anchor_loss(labels, t, alpha=8.0, delta=0.1),
        lambda t: ref.proxy_anchor(labels, t, 8.0, 0.1),
        s,
    )
    got = to_numpy(proxy_anchor_loss(labels[:, None], s, alpha=8.0))
    assert float(got) == pytest.approx(ref.proxy_anchor(labels, s, 8.0, 0.1), rel=RTOL)


def test_proxy_anchor_refuses_ids_outside_the_proxies(rng):
    s = rng.standard_normal((3, 4)).astype(np.float32)
    with pytest.raises(REFUSAL, match="class ids in"):
        proxy_anchor_loss(np.array([0, 4, 1]), s)


def test_backend_is_the_process_backend():
    assert BACKEND in ("tensorflow", "jax", "torch")
