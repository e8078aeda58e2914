"""The tensorflow-addons loss functions (semi-hard and hard triplet, lifted structured, N-pair,
multi-label N-pair, contrastive) on every Keras backend, against independent references:

* tensorflow-addons 0.23.0's own values and gradients (tests/parity/tfa_reference.npz, the
  committed output of tests/parity/generate_tfa_reference.py), tie cases included;
* float64 NumPy implementations of TFA's formulas below (explicit loops), their gradients by
  central differences, on generic inputs (no ties, where the gradient is unique).
"""

import importlib
import json
import math
from pathlib import Path

import numpy as np
import pytest

from tests import backends
from tests.conftest import MAX_RELATIVE_ERROR

pytestmark = pytest.mark.all_backends

# The modules themselves (the package refuses its loss names outside TensorFlow for now).
contrastive, lifted, npairs, triplet = (
    importlib.import_module(f"tf_svmax.losses.{m}")
    for m in ("contrastive", "lifted", "npairs", "triplet")
)

REFERENCE = np.load(Path(__file__).resolve().parents[1] / "parity" / "tfa_reference.npz")
CASES = {c["name"]: c for c in json.loads(str(REFERENCE["__meta__"]))["cases"]}
RTOL = 1e-5
ATOL = 1e-5  # test_tfa_parity's tolerance for TFA's float32 outputs
# function -> the current test's max relative error where |expected| >= 1e-3 (`_record`); each
# test gets its own (`_report_errors`), and the run's terminal summary prints the maxima.
ERRORS = {}


@pytest.fixture(autouse=True)
def _report_errors(record_property, monkeypatch):
    """The relative errors this test's `_check`s see, as its `MAX_RELATIVE_ERROR` property: a
    report for the record beside the checks (tests/conftest.py's terminal summary), not one."""
    errors = {}
    monkeypatch.setitem(globals(), "ERRORS", errors)
    record_property(MAX_RELATIVE_ERROR, errors)  # filled while the test runs


def _get(name, key):
    return REFERENCE[f"{name}:{key}"]


def _dot(x):
    from keras import ops

    return ops.matmul(x, ops.transpose(x))


def _fn(case):
    metric = {"dot": _dot}.get(case.get("metric"), case.get("metric", "L2"))
    margin = case.get("margin", 1.0)
    return {
        "triplet_semihard_loss": lambda y, e: triplet.triplet_semihard_loss(y, e, margin, metric),
        "triplet_hard_loss": lambda y, e: triplet.triplet_hard_loss(
            y, e, margin, case.get("soft", False), metric
        ),
        "lifted_struct_loss": lambda y, e: lifted.lifted_struct_loss(y, e, margin),
        "contrastive_loss": lambda y, d: contrastive.contrastive_loss(y, d, margin),
        "npairs_loss": npairs.npairs_loss,
        "npairs_multilabel_loss": npairs.npairs_multilabel_loss,
    }[case["fn"]]


def _scalar(fn):
    """`fn` summed to a scalar (the contrastive loss is per pair)."""
    from keras import ops

    return lambda y, x: ops.sum(fn(y, x))


def _record(key, got, expected):
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    big = np.abs(expected) >= 1e-3  # relative error where it means something
    err = float(np.max(np.abs(got - expected)[big] / np.abs(expected)[big], initial=0.0))
    ERRORS[key] = max(ERRORS.get(key, 0.0), err)


def _check(key, got, expected, atol=ATOL):
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=atol)
    _record(key, got, expected)


def _tfa_nan(name):
    return bool(np.any(np.isnan(_get(name, "value"))))


TFA_CASES = [
    n
    for n, c in CASES.items()
    if "dtype" not in c and not n.startswith("distance/") and not c.get("edge") and not _tfa_nan(n)
]


@pytest.mark.parametrize("name", TFA_CASES)
def test_values_and_gradients_match_tensorflow_addons(name):
    case = CASES[name]
    if (
        backends.BACKEND == "torch"
        and name.startswith("large_ties/triplet_semihard")
        and case["metric"] == "angular"
    ):
        pytest.skip(
            "which angular distances of duplicated directions tie exactly follows the BLAS "
            "rounding of 1 - cos, and PyTorch's CPU product rounds them apart (as blocks of rows "
            "do on TensorFlow: test_tfa_parity's block test leaves these cases out too)"
        )
    labels, x = _get(name, "labels"), _get(name, "x")
    value, (grad,) = backends.value_and_grad(
        lambda e: (
            _scalar(_fn(case))(labels, e)
            if case["fn"] == "contrastive_loss"
            else _fn(case)(labels, e)
        ),
        x,
    )
    expected = _get(name, "value")
    if case["fn"] == "contrastive_loss":
        expected = np.sum(expected)
    _check(case["fn"], value, expected)
    _check(case["fn"] + " grad", grad, _get(name, "grad"))


# ---- float64 NumPy references of TFA's formulas -------------------------------------------


def _pdist(x, metric):
    x = np.asarray(x, np.float64)
    n = len(x)
    d = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            diff = x[i] - x[j]
            if metric == "L2":
                d[i, j] = math.sqrt(diff @ diff)
            elif metric == "squared-L2":
                d[i, j] = diff @ diff
            else:  # angular
                d[i, j] = 1.0 - x[i] @ x[j] / (np.linalg.norm(x[i]) * np.linalg.norm(x[j]))
    return d


def ref_semihard(labels, x, margin=1.0, metric="L2"):
    d, n = _pdist(x, metric), len(x)
    total, pairs = 0.0, 0
    for a in range(n):
        negs = [d[a, k] for k in range(n) if labels[k] != labels[a]]
        for p in range(n):
            if p == a or labels[p] != labels[a]:
                continue
            pairs += 1
            farther = [v for v in negs if v > d[a, p]]
            # TFA's masked_maximum of no entry is the row minimum (0: the anchor itself).
            semi = min(farther) if farther else (max(negs) if negs else d[a].min())
            total += max(margin + d[a, p] - semi, 0.0)
    return total / pairs if pairs else 0.0


def ref_hard(labels, x, margin=1.0, metric="L2", soft=False):
    d, n = _pdist(x, metric), len(x)
    out = []
    for a in range(n):
        pos = [d[a, p] for p in range(n) if p != a and labels[p] == labels[a]]
        neg = [d[a, k] for k in range(n) if labels[k] != labels[a]]
        hp = max(pos) if pos else d[a].min()
        hn = min(neg) if neg else d[a].max()
        out.append(math.log1p(math.exp(hp - hn)) if soft else max(hp - hn + margin, 0.0))
    return float(np.mean(out)) if out else 0.0


def ref_lifted(labels, x, margin=1.0):
    d, n = _pdist(x, "L2"), len(x)
    total, pairs = 0.0, 0
    for i in range(n):
        for j in range(n):
            if i == j or labels[i] != labels[j]:
                continue
            pairs += 1
            s = sum(math.exp(margin - d[i, k]) for k in range(n) if labels[k] != labels[i])
            s += sum(math.exp(margin - d[j, k]) for k in range(n) if labels[k] != labels[j])
            if s > 0:
                total += max(math.log(s) + d[i, j], 0.0) ** 2
    return 0.25 * total / (pairs / 2.0) if pairs else 0.0


def _xent(targets, logits):
    logits = np.asarray(logits, np.float64)
    out = []
    for t, z in zip(targets, logits, strict=True):
        top = z.max()
        lse = top + math.log(sum(math.exp(v - top) for v in z))
        out.append(-sum(ti * (zi - lse) for ti, zi in zip(t, z, strict=True)))
    return float(np.mean(out))


def ref_npairs(labels, logits):
    same = np.array([[float(a == b) for b in labels] for a in labels])
    return _xent(same / same.sum(axis=1, keepdims=True), logits)


def ref_npairs_multilabel(y, logits):
    y = np.asarray(y, np.float64)
    shared = y @ y.T
    return _xent(shared / shared.sum(axis=1, keepdims=True), logits)


def ref_contrastive_sum(labels, d, margin=1.0):
    d = np.asarray(d, np.float64)
    return sum(
        y * v * v + (1.0 - y) * max(margin - v, 0.0) ** 2
        for y, v in zip(labels.ravel(), d, strict=True)
    )


def _embeddings(rng, n=12, dim=5, normalize=True):
    x = rng.normal(size=(n, dim))
    if normalize:
        x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype("float32")


LABELS = np.array([0, 1, 2, 0, 1, 2, 0, 3, 1, 3, 2, 4], dtype="int32")  # 4: a singleton


def _generic_cases():
    for metric in ("L2", "squared-L2", "angular"):
        for margin in (0.2, 1.0):
            yield (
                f"semihard/{metric}/{margin}",
                (
                    lambda y, e, m=margin, k=metric: triplet.triplet_semihard_loss(y, e, m, k),
                    lambda y, e, m=margin, k=metric: ref_semihard(y, e, m, k),
                ),
            )
            yield (
                f"hard/{metric}/{margin}",
                (
                    lambda y, e, m=margin, k=metric: triplet.triplet_hard_loss(y, e, m, False, k),
                    lambda y, e, m=margin, k=metric: ref_hard(y, e, m, k),
                ),
            )
        yield (
            f"hard/{metric}/soft",
            (
                lambda y, e, k=metric: triplet.triplet_hard_loss(y, e, 1.0, True, k),
                lambda y, e, k=metric: ref_hard(y, e, 1.0, k, soft=True),
            ),
        )
    for margin in (0.5, 1.0):
        yield (
            f"lifted/{margin}",
            (
                lambda y, e, m=margin: lifted.lifted_struct_loss(y, e, m),
                lambda y, e, m=margin: ref_lifted(y, e, m),
            ),
        )


GENERIC = dict(_generic_cases())


@pytest.mark.parametrize("name", sorted(GENERIC))
def test_embedding_losses_match_numpy_on_generic_inputs(name, rng):
    fn, ref = GENERIC[name]
    x = _embeddings(rng)
    value, (grad,) = backends.value_and_grad(lambda e: fn(LABELS, e), x)
    key = name.split("/")[0]
    _check(key, value, ref(LABELS, x), atol=1e-6)
    _check(key + " grad", grad, backends.numpy_gradient(lambda e: ref(LABELS, e), x), atol=1e-6)


def test_npairs_losses_match_numpy(rng):
    logits = rng.normal(size=(8, 8)).astype("float32")
    labels = np.array([0, 1, 0, 2, 1, 3, 2, 0], "int64")
    value, (grad,) = backends.value_and_grad(lambda z: npairs.npairs_loss(labels, z), logits)
    _check("npairs_loss", value, ref_npairs(labels, logits), atol=1e-6)
    expected = backends.numpy_gradient(lambda z: ref_npairs(labels, z), logits)
    _check("npairs_loss grad", grad, expected, atol=1e-6)

    multi = (rng.random((8, 5)) < 0.4).astype("float32")
    multi[:, 0] = 1.0  # every sample has a label
    value, (grad,) = backends.value_and_grad(
        lambda z: npairs.npairs_multilabel_loss(multi, z), logits
    )
    _check("npairs_multilabel_loss", value, ref_npairs_multilabel(multi, logits), atol=1e-6)
    expected = backends.numpy_gradient(lambda z: ref_npairs_multilabel(multi, z), logits)
    _check("npairs_multilabel_loss grad", grad, expected, atol=1e-6)


def test_npairs_multilabel_refuses_a_sample_without_labels():
    y = np.array([[1, 0], [0, 0]], "float32")
    with pytest.raises(Exception, match="at least one label"):
        backends.to_numpy(npairs.npairs_multilabel_loss(y, np.eye(2, dtype="float32")))


def test_contrastive_matches_numpy(rng):
    d = rng.uniform(0.05, 2.0, size=10).astype("float32")
    labels = (rng.random(10) < 0.5).astype("int64")
    got = backends.to_numpy(contrastive.contrastive_loss(labels, d, 1.0))
    expected = [ref_contrastive_sum(labels[i : i + 1], d[i : i + 1]) for i in range(10)]
    _check("contrastive_loss", got, expected, atol=1e-6)
    value, (grad,) = backends.value_and_grad(
        lambda v: _scalar(lambda y, e: contrastive.contrastive_loss(y, e, 1.0))(labels, v), d
    )
    _check(
        "contrastive_loss grad",
        grad,
        backends.numpy_gradient(lambda v: ref_contrastive_sum(labels, v), d),
    )


def test_contrastive_pairs_a_label_column_with_its_distance_and_refuses_other_shapes(rng):
    """`[B, 1]` labels with `[B]` distances were broadcast to `[B, B]` (0.584 instead of the
    per-pair mean, 0.336 in the issue); TFA's Keras 2 class aligned them row by row. `[B, 2]`
    labels failed inside Mul."""
    d = rng.uniform(0.05, 2.0, size=10).astype("float32")
    labels = (rng.random(10) < 0.5).astype("float32")
    want = ref_contrastive_sum(labels, d) / 10
    loss = contrastive.ContrastiveLoss()
    for y, distances in ((labels[:, None], d), (labels, d[:, None]), (labels[:, None], d[:, None])):
        _check("ContrastiveLoss", backends.to_numpy(loss(y, distances)), want, atol=1e-6)
        per_pair = backends.to_numpy(contrastive.contrastive_loss(y, distances, 1.0))
        assert per_pair.shape == distances.shape
    with pytest.raises(ValueError, match=r"argument `y_true`.*one label per distance.*\(10, 2\)"):
        loss(np.stack([labels, labels], axis=1), d)


@pytest.mark.parametrize("fn_name", ["semihard", "hard", "lifted"])
def test_label_shapes_and_dtypes_give_the_same_loss(fn_name, rng):
    fn, ref = GENERIC[
        {"semihard": "semihard/L2/1.0", "hard": "hard/L2/1.0"}.get(fn_name, "lifted/1.0")
    ]
    x = _embeddings(rng)
    expected = ref(LABELS, x)
    for labels in (
        LABELS,
        LABELS[:, None],
        LABELS.astype("int64"),
        LABELS[:, None].astype("int64"),
    ):
        _check(fn_name, backends.to_numpy(fn(labels, x)), expected, atol=1e-6)


def test_semihard_and_hard_tie_cases_of_duplicate_embeddings(rng):
    """Duplicated rows and equal distances: values against the NumPy references (the gradients
    at these ties are TFA's split, checked against TFA's output above). Small-integer
    coordinates, so that every backend's float32 distances are exact and the ties are ties
    everywhere (with arbitrary floats, which pairs tie depends on the backend's BLAS rounding)."""
    base = rng.integers(-2, 3, size=(4, 3)).astype("float32")
    x = np.concatenate([base, base, base[:2]])  # every distance appears at least twice
    labels = np.array([0, 1, 0, 1, 1, 0, 1, 0, 0, 1], "int32")
    for metric in ("L2", "squared-L2"):
        for margin in (0.5, 4.0):
            got = backends.to_numpy(triplet.triplet_semihard_loss(labels, x, margin, metric))
            _check("semihard ties", got, ref_semihard(labels, x, margin, metric), atol=1e-6)
            got = backends.to_numpy(triplet.triplet_hard_loss(labels, x, margin, False, metric))
            _check("hard ties", got, ref_hard(labels, x, margin, metric), atol=1e-6)
    got = backends.to_numpy(lifted.lifted_struct_loss(labels, x, 1.0))
    _check("lifted ties", got, ref_lifted(labels, x, 1.0), atol=1e-6)


@pytest.mark.parametrize(
    "labels", [np.zeros(12, "int32"), np.arange(12, dtype="int32")], ids=["one-class", "singletons"]
)
def test_one_class_and_singleton_batches(labels, rng):
    # The generic cases' batch size: eager JAX reuses their programs (one per operation and
    # shape) instead of compiling ~150 more.
    x = _embeddings(rng)
    for key, fn, ref in (
        ("semihard", triplet.triplet_semihard_loss, ref_semihard),
        ("hard", triplet.triplet_hard_loss, ref_hard),
        ("lifted", lifted.lifted_struct_loss, ref_lifted),
    ):
        value, (grad,) = backends.value_and_grad(lambda e, f=fn: f(labels, e), x)
        _check(key, value, ref(labels, x), atol=1e-6)
        assert np.all(np.isfinite(grad))


def test_empty_batches_and_anchor_ranges():
    """A batch with no rows is refused by the functions (naming the argument; the classes
    return 0 for it), and a range of no anchors (a replica's empty share) gives 0."""
    for fn in (triplet.triplet_semihard_loss, triplet.triplet_hard_loss, lifted.lifted_struct_loss):
        with pytest.raises(ValueError, match="at least 1 row"):
            fn(np.zeros(0, "int32"), np.zeros((0, 4), "float32"))
        x = np.eye(4, dtype="float32")
        labels = np.array([0, 0, 1, 1], "int32")
        refs = dict(ref_labels=labels, ref_embeddings=x)
        got = backends.to_numpy(fn(labels[:0], x[:0], **refs, ref_offset=1))
        assert got == 0.0


@pytest.mark.skipif(backends.BACKEND == "torch", reason="PyTorch has no XLA compilation")
@pytest.mark.parametrize("name", ["semihard/L2/1.0", "hard/angular/soft", "lifted/1.0"])
def test_compiled_matches_numpy(name, rng):
    fn, ref = GENERIC[name]
    x = _embeddings(rng)
    got = backends.to_numpy(backends.compiled(fn)(LABELS, x))
    _check(name.split("/")[0] + " jit", got, ref(LABELS, x), atol=1e-6)
    logits = rng.normal(size=(8, 8)).astype("float32")
    labels = np.array([0, 1, 0, 2, 1, 3, 2, 0], "int32")
    got = backends.to_numpy(backends.compiled(npairs.npairs_loss)(labels, logits))
    _check("npairs jit", got, ref_npairs(labels, logits), atol=1e-6)


def test_semihard_in_anchor_blocks_matches_numpy(rng, monkeypatch):
    """Blocks of 5 anchor rows (the last partial), each recomputed for the gradient."""
    monkeypatch.setattr(triplet, "_ROW_BLOCK_ELEMENTS", 5 * len(LABELS))
    fn, ref = GENERIC["semihard/L2/1.0"]
    x = _embeddings(rng)
    value, (grad,) = backends.value_and_grad(lambda e: fn(LABELS, e), x)
    _check("semihard blocks", value, ref(LABELS, x), atol=1e-6)
    _check(
        "semihard blocks grad",
        grad,
        backends.numpy_gradient(lambda e: ref(LABELS, e), x),
        atol=1e-6,
    )


@pytest.mark.skipif(backends.BACKEND != "jax", reason="blocks under the compiler: jax.jit only")
def test_semihard_in_anchor_blocks_under_jax_jit_matches_numpy(rng, monkeypatch):
    """Under `jax.jit` the anchor blocks are unrolled in the trace (5 rows each, the last
    partial): the same value and gradient as the NumPy reference."""
    import jax

    monkeypatch.setattr(triplet, "_ROW_BLOCK_ELEMENTS", 5 * len(LABELS))
    fn, ref = GENERIC["semihard/L2/1.0"]
    x = _embeddings(rng)
    value, grad = jax.jit(jax.value_and_grad(lambda e: fn(LABELS, e)))(x)
    _check("semihard jit blocks", np.asarray(value), ref(LABELS, x), atol=1e-6)
    _check(
        "semihard jit blocks grad",
        np.asarray(grad),
        backends.numpy_gradient(lambda e: ref(LABELS, e), x),
        atol=1e-6,
    )

    def sorts():  # a new function each time: jax.jit caches traces per function
        program = jax.jit(lambda e: fn(LABELS, e)).lower(x).as_text()
        return program.count("stablehlo.sort")

    blocked = sorts()
    monkeypatch.setattr(triplet, "_ROW_BLOCK_ELEMENTS", 1 << 22)
    assert blocked > sorts()  # blocks of two shapes (5 rows, the last 2): two sorts, not one
