"""tf_svmax's metric-learning losses against tensorflow-addons 0.23.0, case by case.

The reference values and gradients come from `tests/parity/generate_tfa_reference.py`, run by
`.ci/run` in a separate TF 2.15.1 + tensorflow-addons 0.23.0 environment on every CI run; the
path arrives in TF_SVMAX_TFA_REFERENCE. Outside CI the committed file from the same generator
is used (tests/parity/tfa_reference.npz); in CI the live file is required.
"""

import json
import os
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tf_svmax import losses, ops

COMMITTED = Path(__file__).resolve().parents[1] / "parity" / "tfa_reference.npz"
METRICS = {
    "L2": "L2",
    "squared-L2": "squared-L2",
    "angular": "angular",
    "dot": lambda x: tf.linalg.matmul(x, x, transpose_b=True),
}
TOL = dict(rtol=1e-5, atol=1e-5)


def _reference_path():
    live = os.environ.get("TF_SVMAX_TFA_REFERENCE")
    if live:
        return Path(live)
    if os.environ.get("CI"):
        pytest.fail(
            "CI must compare against a freshly generated TFA reference: "
            "TF_SVMAX_TFA_REFERENCE is not set (see .ci/run)."
        )
    return COMMITTED


REFERENCE = np.load(_reference_path())
META = json.loads(str(REFERENCE["__meta__"]))
CASES = {case["name"]: case for case in META["cases"]}


def _get(name, key):
    return REFERENCE[f"{name}:{key}"]


def _loss_fn(case):
    fn = case["fn"]
    if fn == "triplet_semihard_loss":
        return lambda y, e: losses.triplet_semihard_loss(
            y, e, case["margin"], METRICS[case["metric"]]
        )
    if fn == "triplet_hard_loss":
        return lambda y, e: losses.triplet_hard_loss(
            y, e, case["margin"], case["soft"], METRICS[case["metric"]]
        )
    if fn == "lifted_struct_loss":
        return lambda y, e: losses.lifted_struct_loss(y, e, case["margin"])
    if fn == "contrastive_loss":
        return lambda y, d: losses.contrastive_loss(y, d, case["margin"])
    if fn == "npairs_loss":
        return losses.npairs_loss
    if fn == "npairs_multilabel_loss":
        return losses.npairs_multilabel_loss
    raise AssertionError(fn)


def _value_and_grad(fn, labels, x):
    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        value = fn(labels, x)
    return value.numpy(), tape.gradient(value, x).numpy()


def test_reference_was_made_by_the_pinned_tensorflow_addons():
    assert META["tensorflow_addons"] == "0.23.0"
    assert META["tensorflow"].startswith("2.15")
    assert len(CASES) >= 90


def _tfa_is_nan(name):
    return bool(np.any(np.isnan(_get(name, "value"))))


EDGE_CASES = [n for n, c in CASES.items() if c.get("edge") or _tfa_is_nan(n)]
LOSS_CASES = [
    n
    for n, c in CASES.items()
    if n not in EDGE_CASES and "dtype" not in c and not n.startswith("distance/")
]


@pytest.mark.parametrize("name", LOSS_CASES)
def test_values_and_gradients_match_tfa(name):
    case = CASES[name]
    value, grad = _value_and_grad(_loss_fn(case), _get(name, "labels"), _get(name, "x"))
    np.testing.assert_allclose(value, _get(name, "value"), **TOL)
    np.testing.assert_allclose(grad, _get(name, "grad"), **TOL)


@pytest.mark.parametrize("name", [n for n in CASES if n.startswith("contrastive/")])
def test_contrastive_class_reduction_and_sample_weights_match_tfa(name):
    case = CASES[name]
    loss = losses.ContrastiveLoss(margin=case["margin"])
    labels, d = _get(name, "labels"), _get(name, "x")
    value, grad = _value_and_grad(loss, labels, d)
    np.testing.assert_allclose(value, _get(name, "class_value"), **TOL)
    np.testing.assert_allclose(grad, _get(name, "class_grad"), **TOL)
    weighted = loss(labels, d, sample_weight=_get(name, "weights")).numpy()
    np.testing.assert_allclose(weighted, _get(name, "weighted_value"), **TOL)


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if "dtype" in c])
def test_half_precision_matches_tfa(name):
    case = CASES[name]
    x = tf.constant(_get(name, "x"))
    value = _loss_fn(case)(_get(name, "labels"), x)
    assert value.dtype.name == case["dtype"] == "float16"
    np.testing.assert_allclose(float(value), float(_get(name, "value")), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("name", [n for n in CASES if n.startswith("distance/")])
def test_distance_matrices_match_tfa(name):
    fn = {
        "distance/pairwise": ops.pairwise_distance,
        "distance/pairwise_squared": lambda e: ops.pairwise_distance(e, squared=True),
        "distance/angular": ops.angular_distance,
    }[name]
    weights = _get(name, "weights")
    x = tf.constant(_get(name, "x"))
    with tf.GradientTape() as tape:
        tape.watch(x)
        matrix = fn(x)
        total = tf.reduce_sum(matrix * weights)
    ours, expected = matrix.numpy(), _get(name, "value")
    gradient, expected_gradient = tape.gradient(total, x).numpy(), _get(name, "grad")
    rows = _get(name, "x")
    duplicates = np.all(rows[:, None] == rows[None], axis=-1) & ~np.eye(len(rows), dtype=bool)
    assert duplicates.any()  # the case holds duplicated rows on purpose
    if name == "distance/pairwise" and np.any(expected[duplicates] != 0):
        # TFA takes sqrt of its Gram-expansion squared distance, whose rounding (~eps * |x|^2)
        # survives for duplicated rows on some CPUs (oneDNN blocking): up to sqrt(8 eps |x|^2)
        # where the true distance, which we return, is 0. The gradient is then checked against
        # the closed form sum_j (w_ij + w_ji) (x_i - x_j) / d_ij (0 where d_ij = 0).
        bound = np.sqrt(8 * np.finfo(np.float32).eps * np.max(np.sum(rows**2, axis=1)))
        assert np.all(expected[duplicates] <= bound) and np.all(ours[duplicates] == 0)
        np.testing.assert_allclose(ours[~duplicates], expected[~duplicates], **TOL)
        r = rows.astype(np.float64)
        diff = r[:, None] - r[None]
        d = np.linalg.norm(diff, axis=-1)
        coefficient = np.where(d > 0, (weights + weights.T) / np.where(d > 0, d, 1.0), 0.0)
        expected_gradient = np.einsum("ij,ijk->ik", coefficient, diff)
    else:
        np.testing.assert_allclose(ours, expected, **TOL)
    np.testing.assert_allclose(gradient, expected_gradient, **TOL)


@pytest.mark.parametrize("name", EDGE_CASES)
def test_edge_layouts_are_tfa_where_tfa_is_defined_and_zero_where_it_is_nan(name):
    case = CASES[name]
    value, grad = _value_and_grad(
        _loss_fn({"margin": 1.0, "metric": "L2", "soft": False, **case}),
        _get(name, "labels"),
        _get(name, "x"),
    )
    tfa_value = float(_get(name, "value"))
    assert np.all(np.isfinite(grad))
    if np.isnan(tfa_value):
        # Documented divergence: no positive pair (or no negative at all for the lifted
        # loss) gives 0 here; TFA divides 0 by 0.
        assert value == 0.0
    else:
        np.testing.assert_allclose(value, tfa_value, **TOL)


BLOCKED_SEMIHARD_CASES = [
    n
    for n, c in CASES.items()
    if c["fn"] == "triplet_semihard_loss"
    and n in LOSS_CASES
    and not (n.startswith("large_ties/") and c["metric"] == "angular")
]


@pytest.mark.parametrize("name", BLOCKED_SEMIHARD_CASES)
def test_semihard_in_many_row_blocks_matches_tfa(name, monkeypatch):
    """The semi-hard loss in blocks of 5 anchor rows (the last one partial), the gradient
    recomputed block by block: the same values and tie-split gradients as tensorflow-addons.

    Not the angular tie cases: there which entries of a row tie exactly depends on how BLAS
    rounds a product of 5 rows vs one of all rows (1 - cos of duplicated directions), so the
    tie split follows the blocks' rounding (the loss values still agree)."""
    from tf_svmax.losses import triplet

    monkeypatch.setattr(triplet, "_ROW_BLOCK_ELEMENTS", 5 * len(_get(name, "labels")))
    case = CASES[name]
    value, grad = _value_and_grad(_loss_fn(case), _get(name, "labels"), _get(name, "x"))
    np.testing.assert_allclose(value, _get(name, "value"), **TOL)
    np.testing.assert_allclose(grad, _get(name, "grad"), **TOL)


# TFA's classes returned the batch's scalar under reduction "none"; ours default to
# "sum_over_batch_size", which gives the same scalar without sample weights (which TFA's
# triplet, lifted and N-pair classes refused) and scales by the weights' mean with them.
REDUCTION_DIFFERS = {"none": "sum_over_batch_size"}


@pytest.mark.parametrize("name", sorted(META["class_defaults"]))
def test_class_defaults_are_tfas(name, rng):
    tfa_config = META["class_defaults"][name]
    ours = getattr(losses, name)()
    config = ours.get_config()
    for key, value in tfa_config.items():
        if key == "name":
            continue  # TFA's None became Keras 3's generated name; ours are the functions'
        if key == "reduction":
            assert config[key] == REDUCTION_DIFFERS.get(value, value)
            continue
        assert config[key] == value, key
    if tfa_config["reduction"] == "none":
        # The default and TFA's "none" give the same value on a batch without sample weights.
        labels = np.repeat(np.arange(4), 2)
        x = rng.standard_normal((8, 4)).astype("float32")
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        y_pred = x @ x.T if name.startswith("Npairs") else x
        if name == "NpairsMultilabelLoss":
            labels = np.eye(4, dtype="float32")[labels]
        as_tfa = getattr(losses, name)(reduction="none")(labels, y_pred)
        assert float(ours(labels, y_pred)) == pytest.approx(float(as_tfa), rel=1e-6)
