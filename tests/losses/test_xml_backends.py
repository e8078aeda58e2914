"""XMLLoss (seed 004, Eq. 2.10-2.11) on every Keras backend (TensorFlow, JAX, PyTorch) against a
float64 NumPy composition of the ridge fit and explicit-loop ranking references (the five losses
that take ``ref_mask``, the P x K pair losses): value and gradient eagerly and under
XLA (TensorFlow ``jit_compile=True``, ``jax.jit``), one SGD step of `fit` in each mode the
backend has (JAX's default jitted step included), and the refusal under XLA of a loss that
neither takes ``ref_mask`` nor works on class blocks."""

import keras
import numpy as np
import pytest
import scipy.linalg
from keras import ops

from tests import backends
from tests import reference_ranking as ref
from tests.reference_xbm import ref_contrastive, ref_hard, ref_lifted, ref_semihard
from tf_svmax.losses import (
    AllPairsContrastiveLoss,
    BatchHardTripletLoss,
    LiftedStructLoss,
    PKAngularLoss,
    PKContrastiveLoss,
    PKNpairLoss,
    TripletHardLoss,
    TripletSemiHardLoss,
    XMLLoss,
)
from tf_svmax.losses._base import BatchPenaltyLoss
from tf_svmax.losses.xml import class_halves

pytestmark = pytest.mark.all_backends

# float32 against float64 references, relative to the largest reference entry.
RTOL = 1e-5
E, M = 6, 4  # embedding columns, prototype (histogram) columns
LAMBDA, RIDGE = 0.3, 0.05


def _base():
    return BatchHardTripletLoss(margin="soft", distance="sqeuclidean")


def _xml(base=None, **kwargs):
    base = _base() if base is None else base
    return XMLLoss(base, num_prototypes=M, lambda_=LAMBDA, ridge=RIDGE, **kwargs)


def _batch_hard_reference(y, x):
    return ref.batch_hard(y, x, "soft", "sqeuclidean").mean()


def _hard_reference(y, x):
    return ref_hard(y, x, len(y))  # tensorflow-addons' hard triplet: L2, margin 1


# The five ranking losses that take ref_mask (XMLLoss masks its halves for them under XLA):
# (loss, its float64 NumPy reference of tests/reference_ranking.py or tests/reference_xbm.py).
BASES = {
    "batch_hard": (_base, _batch_hard_reference),
    "hard": (TripletHardLoss, _hard_reference),
    "semihard": (TripletSemiHardLoss, lambda y, x: ref_semihard(y, x, len(y))),
    "lifted": (LiftedStructLoss, lambda y, x: ref_lifted(y, x, len(y))),
    "contrastive": (AllPairsContrastiveLoss, lambda y, x: ref_contrastive(y, x, len(y))),
}

# The P x K pair losses (no ref_mask: under XLA each half is a static block of rows), with their
# float64 references (tests/reference_ranking.py's loops) and a batch of distinct class blocks:
# (loss, reference, P, K). P x 4 contrastive pairs classes two by two, so each half needs an
# even number of classes (P = 8: 4 + 4); the N-pair and angular losses take any P (5: 3 + 2).
PK_BASES = {
    "pk_contrastive": (
        PKContrastiveLoss,
        lambda y, x: ref.pk_contrastive(y, x, 1.0).mean(),
        8,
        4,
    ),
    "pk_npair": (PKNpairLoss, lambda y, x: ref.pk_npair(y, x, 0.002).mean(), 5, 2),
    "pk_angular": (PKAngularLoss, lambda y, x: ref.pk_angular(y, x, 45.0, 0.002).mean(), 5, 2),
}


def _ridge(z, y):
    a = np.concatenate([z, np.sqrt(RIDGE) * np.eye(z.shape[1])])
    return scipy.linalg.lstsq(a, np.concatenate([y, np.zeros((z.shape[1], y.shape[1]))]))[0]


def _reference(labels, y_pred, f=_batch_hard_reference):
    """Eq. 2.11 in float64: halves by first appearance, each predicted from the ridge fit to
    the other, L2-normalised, the ranking loss `f` (default: the mean of the explicit-loop
    batch-hard rows)."""
    y_pred = np.asarray(y_pred, np.float64)
    emb, hist = y_pred[:, :-M], y_pred[:, -M:]
    _, first_rows = np.unique(labels, return_index=True)
    classes = labels[np.sort(first_rows)]
    first = np.isin(labels, classes[: (len(classes) + 1) // 2])
    predicted = np.empty_like(emb)
    for part in (first, ~first):
        predicted[part] = hist[part] @ _ridge(hist[~part], emb[~part])
    predicted /= np.linalg.norm(predicted, axis=1, keepdims=True)
    cross = f(labels[first], predicted[first]) + f(labels[~first], predicted[~first])
    return (1 - LAMBDA) * f(labels, emb) + LAMBDA * cross


def _batch(rng, classes=4, k=4):
    labels = np.repeat(np.array([7, 2, 9, 4, 11, 0])[:classes], k)[rng.permutation(classes * k)]
    return labels.astype("int32"), rng.standard_normal((classes * k, E + M)).astype(np.float32)


def _block_batch(rng, classes, k, labels=None):
    """A P x K batch: `classes` consecutive blocks of `k` rows, distinct labels unless given."""
    if labels is None:
        labels = rng.permutation(40)[:classes] * 3 - 7  # distinct, not 0..P-1, some negative
    labels = np.repeat(np.asarray(labels), k).astype("int32")
    return labels, rng.standard_normal((len(labels), E + M)).astype(np.float32)


def _relative_error(got, expected):
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    return float(np.max(np.abs(got - expected)) / np.max(np.abs(expected)))


def test_class_halves_split_the_classes_in_order_of_first_appearance():
    labels = np.array([5, 5, 2, 2, 9, 9, 1, 1, 4, 4], "int32")
    got = backends.to_numpy(class_halves(ops.convert_to_tensor(labels)))
    np.testing.assert_array_equal(got, [1, 1, 1, 1, 1, 1, 0, 0, 0, 0])


def test_value_and_gradient_match_numpy(rng):
    labels, y_pred = _batch(rng)
    value, (grad,) = backends.value_and_grad(lambda y: _xml()(labels, y), y_pred)
    assert _relative_error(value, _reference(labels, y_pred)) < RTOL
    want = backends.numpy_gradient(lambda y: _reference(labels, y), y_pred)
    assert _relative_error(grad, want) < RTOL


def test_class_halves_under_xla_are_the_eager_ones(rng):
    """`class_halves` traced for XLA (keras.ops only) = eagerly (NumPy or tf.unique), on
    float, repeated and scattered labels, one class and no rows included."""
    cases = [
        np.array([5, 5, 2, 2, 9, 9, 1, 1, 4, 4], "int32"),
        rng.integers(0, 7, 25).astype("int64"),
        np.array([3.5, -1.0, 3.5, 2.25, -1.0], "float32"),
        np.array([4, 4, 4], "int32"),
        np.zeros([0], "int32"),
    ]
    for labels in cases:
        eager = backends.to_numpy(class_halves(ops.convert_to_tensor(labels)))
        traced = backends.to_numpy(backends.compiled(class_halves)(labels))
        np.testing.assert_array_equal(traced, eager)


@pytest.mark.parametrize("base", BASES)
def test_value_and_gradient_under_xla_match_numpy(rng, base):
    """TensorFlow ``jit_compile=True`` and ``jax.jit`` (PyTorch: eagerly): each half is the
    ranking loss with the half as ``ref_mask``; the value and gradient are the reference's."""
    make, f = BASES[base]
    labels, y_pred = _batch(rng, classes=5, k=3)  # 3 classes in the first half, 2 in the other
    xml = _xml(make())
    value, grad = backends.compiled_value_and_grad(lambda y: xml(labels, y), y_pred)
    assert _relative_error(value, _reference(labels, y_pred, f)) < RTOL
    want = backends.numpy_gradient(lambda y: _reference(labels, y, f), y_pred)
    assert _relative_error(grad, want) < RTOL


def test_zero_lambda_is_the_base_loss_on_every_backend_and_under_xla(rng):
    labels, y_pred = _batch(rng)
    xml = XMLLoss(_base(), num_prototypes=M, lambda_=0.0)
    fn = backends.compiled(lambda y: xml(labels, y))  # no halves: nothing data-dependent
    want = ref.batch_hard(labels, y_pred[:, :-M], "soft", "sqeuclidean").mean()
    assert _relative_error(backends.to_numpy(fn(y_pred)), want) < RTOL


def _model(rng):
    model = keras.Sequential([keras.Input((12,)), keras.layers.Dense(E + M, use_bias=False)])
    model.layers[0].kernel.assign(rng.standard_normal((12, E + M)).astype(np.float32) * 0.3)
    return model


# fit's modes per backend: "eager" (run_eagerly; on JAX Keras still traces the loss once for
# its symbolic build, which takes the XLA path), "graph" (TensorFlow's tf.function without XLA;
# PyTorch ignores jit_compile), "xla" (TensorFlow jit_compile=True, JAX's default jitted step).
FIT_MODES = {
    "tensorflow": ("eager", "graph", "xla"),
    "jax": ("eager", "xla"),
    "torch": ("eager", "graph"),
}[backends.BACKEND]
FIT_KWARGS = {
    "eager": {"run_eagerly": True},
    "graph": {"jit_compile": False},
    "xla": {"jit_compile": True} if backends.BACKEND == "tensorflow" else {},
}


# (mode, ranking loss): batch-hard in every mode; under XLA also tensorflow-addons' hard triplet
# on TensorFlow (JAX compiles a second train step for it: CI's long pole).
FIT_CASES = [(mode, "batch_hard") for mode in FIT_MODES] + (
    [("xla", "hard")] if backends.BACKEND == "tensorflow" else []
)


def _assert_one_sgd_step_is_the_numpy_step(rng, labels, base, f, fit_kwargs):
    """One full-batch SGD step of `fit` with ``_xml(base)`` moves W by ``-lr * x^T dL/dy``,
    dL/dy from the reference `f`, and reports the reference's loss."""
    x = rng.standard_normal((len(labels), 12)).astype(np.float32)
    model = _model(rng)
    w0 = backends.to_numpy(model.layers[0].kernel).astype(np.float64)
    lr = 1.0  # a step as large as the gradient: float32 weights keep its digits
    model.compile(optimizer=keras.optimizers.SGD(lr), loss=_xml(base), **fit_kwargs)
    history = model.fit(x, labels, batch_size=len(labels), shuffle=False, verbose=0)
    y = x.astype(np.float64) @ w0
    assert _relative_error(history.history["loss"][0], _reference(labels, y, f)) < RTOL
    d_y = backends.numpy_gradient(lambda y: _reference(labels, y, f), y)
    step = backends.to_numpy(model.layers[0].kernel) - w0
    assert _relative_error(step, -lr * x.T.astype(np.float64) @ d_y) < RTOL


@pytest.mark.parametrize(("mode", "base"), FIT_CASES)
def test_one_sgd_step_of_fit_equals_the_numpy_step(rng, mode, base):
    make, f = BASES[base]
    labels, _ = _batch(rng)
    _assert_one_sgd_step_is_the_numpy_step(rng, labels, make(), f, FIT_KWARGS[mode])


def test_one_sgd_step_of_fit_around_a_pk_loss_equals_the_numpy_step(rng):
    """XMLLoss(PKContrastiveLoss()) in `fit` as the retrieval trainer uses it, under XLA
    (TensorFlow ``jit_compile=True``, JAX's default jitted step; PyTorch's default step)."""
    make, f, classes, k = PK_BASES["pk_contrastive"]
    labels, _ = _block_batch(rng, classes, k)
    _assert_one_sgd_step_is_the_numpy_step(rng, labels, make(), f, FIT_KWARGS["xla"])


@pytest.mark.parametrize("base", PK_BASES)
def test_pk_losses_under_xla_match_numpy(rng, base):
    """A P x K loss takes no ``ref_mask``: under XLA each half is a static block of rows (the
    first ceil(P / 2) class blocks, the rest), the class halves when the blocks hold distinct
    classes. Value and gradient (labels traced too) are the reference's, as eagerly."""
    make, f, classes, k = PK_BASES[base]
    labels, y_pred = _block_batch(rng, classes, k)
    xml = _xml(make())
    want = _reference(labels, y_pred, f)
    want_grad = backends.numpy_gradient(lambda y: _reference(labels, y, f), y_pred)
    value, grad = backends.compiled_value_and_grad(lambda y, y_true: xml(y_true, y), y_pred, labels)
    assert _relative_error(value, want) < RTOL
    assert _relative_error(grad, want_grad) < RTOL
    value, (grad,) = backends.value_and_grad(lambda y: xml(labels, y), y_pred)
    assert _relative_error(value, want) < RTOL
    assert _relative_error(grad, want_grad) < RTOL


def test_pk_blocks_that_repeat_a_class_are_nan_under_xla_and_right_eagerly(rng):
    """Blocks 7, 3, 7, 5, 3 (a class fills two blocks): the class halves {7, 3} and {5} are no
    prefix of blocks, which is all XLA's static shapes allow, so the compiled loss is NaN
    (loud, as OLE's out-of-range class ids); eagerly it is the reference."""
    make, f, _, k = PK_BASES["pk_npair"]
    labels, y_pred = _block_batch(rng, 5, k, labels=[7, 3, 7, 5, 3])
    xml = _xml(make())
    compiled_xml = backends.compiled(lambda y, y_true: xml(y_true, y))
    eager = backends.to_numpy(xml(labels, ops.convert_to_tensor(y_pred)))
    assert _relative_error(eager, _reference(labels, y_pred, f)) < RTOL
    compiled = backends.to_numpy(compiled_xml(y_pred, labels))
    if backends.BACKEND == "torch":  # no XLA: the eager path
        assert _relative_error(compiled, eager) < RTOL
    else:
        assert np.isnan(compiled)
    # Blocks 7, 3, 5, 5: halves {7, 3} and {5} are the first two blocks and the last two.
    labels, y_pred = _block_batch(rng, 4, k, labels=[7, 3, 5, 5])
    compiled = backends.to_numpy(compiled_xml(y_pred, labels))
    assert _relative_error(compiled, _reference(labels, y_pred, f)) < RTOL


class _OwnRankingLoss(BatchPenaltyLoss):
    """A ranking loss of one's own with neither ``ref_mask`` nor class blocks: the squared
    distance of each row to its class' mean."""

    def call(self, y_true, y_pred):
        same = ops.cast(ops.equal(y_true[:, None], y_true[None, :]), y_pred.dtype)
        means = ops.matmul(same / ops.sum(same, axis=1, keepdims=True), y_pred)
        return ops.mean(ops.sum(ops.square(y_pred - means), axis=1))


@pytest.mark.skipif(backends.BACKEND == "torch", reason="Keras does not use XLA on PyTorch")
def test_a_loss_without_ref_mask_or_class_blocks_is_refused_under_xla_with_the_fix(rng):
    """A loss of one's own with neither ``ref_mask`` nor ``class_block_rows`` under XLA: the
    message names the losses that run there, the two seams and the other fix (TensorFlow:
    jit_compile=False; JAX: call it eagerly). Eagerly it runs."""
    labels, y_pred = _batch(rng)
    xml = _xml(_OwnRankingLoss())
    assert np.isfinite(backends.to_numpy(xml(labels, ops.convert_to_tensor(y_pred))))
    x = rng.standard_normal((len(labels), 12)).astype(np.float32)
    model = _model(rng)
    fix = "jit_compile=False" if backends.BACKEND == "tensorflow" else "call it eagerly"
    message = (
        "XMLLoss around _OwnRankingLoss cannot .*TripletSemiHardLoss, TripletHardLoss, "
        "LiftedStructLoss, BatchHardTripletLoss, AllPairsContrastiveLoss, PKContrastiveLoss, "
        f"PKNpairLoss or PKAngularLoss.*accepts_ref_mask.*class_block_rows.*{fix}"
    )
    model.compile(optimizer="sgd", loss=xml, jit_compile=True)
    with pytest.raises(ValueError, match=message):
        model.fit(x, labels, batch_size=len(labels), verbose=0)


def test_prototypes_fitted_to_non_finite_histograms_are_nan(rng):
    """NaN in, NaN out: a fit whose histograms hold NaN or inf gives NaN predictions on every
    backend (TensorFlow's solve raised "Input matrix is not invertible" in a graph's backward
    pass, naming no argument, issue 59 item 10); finite ones keep the ridge solution (NumPy's,
    the reference)."""
    from tf_svmax.ops.prototypes import fit_prototypes

    z = np.abs(rng.standard_normal((8, 3))).astype(np.float32)
    y = rng.standard_normal((8, 4)).astype(np.float32)
    w = np.ones(8, np.float32)
    want = np.linalg.solve(z.T @ z + 0.05 * np.eye(3), z.T @ y)
    backends.assert_close(backends.to_numpy(fit_prototypes(z, y, w, ridge=0.05)), want, 1e-4)
    for bad in (np.nan, np.inf):
        z_bad = z.copy()
        z_bad[2, 1] = bad
        assert np.isnan(backends.to_numpy(fit_prototypes(z_bad, y, w, ridge=0.05))).all()


@pytest.mark.skipif(backends.BACKEND != "tensorflow", reason="a TensorFlow graph (no XLA)")
def test_a_fit_step_on_a_non_finite_batch_in_a_tensorflow_graph_is_nan():
    """`fit` with ``jit_compile=False`` (a TensorFlow graph) on a batch holding NaN reports NaN
    (it failed with "Input matrix is not invertible", issue 59 item 10)."""
    x = np.random.default_rng(0).standard_normal((8, 6)).astype(np.float32)
    x[0, 0] = np.nan
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(6)])
    model.compile("sgd", loss=XMLLoss(TripletSemiHardLoss(), 2, lambda_=0.5), jit_compile=False)
    history = model.fit(x, np.repeat(np.arange(4), 2), batch_size=8, verbose=0)
    assert np.isnan(history.history["loss"][0])


@pytest.mark.skipif(backends.BACKEND != "tensorflow", reason="a TensorFlow graph (no XLA)")
def test_a_last_batch_of_one_row_in_a_tensorflow_graph_trains():
    """`fit` with ``jit_compile=False`` over 9 rows in batches of 8: the last batch of one row
    retraces the step with an unknown batch size, where the gradient of a row-count `tf.cond`
    around the ranking loss' own conds failed with a bare AssertionError (issue 59 item 10).
    The graph's losses are the eager ones."""
    x = np.random.default_rng(0).standard_normal((9, 6)).astype(np.float32)
    y = np.array([0, 0, 1, 1, 2, 2, 3, 3, 4])
    losses = {}
    for eager in (True, False):
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(6)])
        loss = XMLLoss(TripletSemiHardLoss(), 2, lambda_=0.5)
        model.compile("sgd", loss=loss, run_eagerly=eager, jit_compile=False)
        history = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        losses[eager] = history.history["loss"]
    assert np.isfinite(losses[False]).all()
    np.testing.assert_allclose(losses[False], losses[True], rtol=backends.RTOL32)
