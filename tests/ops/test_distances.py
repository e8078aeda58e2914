"""`tf_svmax.ops.distances` on every Keras backend: the originals' `cdist` in O(n m) memory, the
TFA-semantics matrices, and distance rows, against NumPy/SciPy float64 references.

NumPy goes in and comes out (tests/backends.py); float32 values and gradients agree with the
references to 1e-5 relative on every backend. The float64 parametrizations run where float64
exists: TensorFlow and PyTorch; JAX without `jax_enable_x64` (its default, kept by the tests)
computes float64 input in float32, which `test_float64_input_on_jax_...` pins instead.
The TFA-semantics matrices are also compared with tensorflow-addons in
tests/losses/test_tfa_parity.py (TensorFlow).
"""

import functools
import re

import keras
import numpy as np
import pytest
from keras import ops

from tests import backends
from tests import reference_ranking as rr
from tf_svmax.ops import distances

pytestmark = pytest.mark.all_backends


def _weighted_sum(fn, weights):
    """``x -> sum(W * fn(x))``, the scalar whose gradient is compared."""

    def total(x):
        dtype = keras.backend.standardize_dtype(x.dtype)
        return ops.sum(fn(x) * ops.convert_to_tensor(weights.astype(dtype)))

    return total


def _numpy_gradient(x, weights, metric):
    """d/dx of sum_ij W_ij dist(x_i, x_j) from explicit differences (float64)."""
    diff = x[:, None, :] - x[None, :, :]
    if metric == "cityblock":
        local = np.sign(diff)
    elif metric == "sqeuclidean":
        local = 2.0 * diff
    else:  # euclidean, with the originals' 1e-12 under the square root
        local = diff / np.sqrt((diff**2).sum(-1, keepdims=True) + 1e-12)
    return ((weights + weights.T)[:, :, None] * local).sum(axis=1)


@pytest.mark.parametrize("dtype", [np.float32, backends.FLOAT64])
@pytest.mark.parametrize("metric", ["euclidean", "sqeuclidean", "cityblock"])
@pytest.mark.parametrize("block_elements", [None, 7])
def test_cdist_values_and_gradients_match_explicit_differences(
    rng, metric, block_elements, dtype, monkeypatch
):
    if block_elements:  # the explicit differences in blocks of a row or less
        monkeypatch.setattr(distances, "_BLOCK_ELEMENTS", block_elements)
    x = rng.standard_normal((23, 5))
    x[7] = x[3]  # a duplicated row: zero distance, sign 0
    weights = rng.standard_normal((23, 23))
    x = x.astype(dtype)
    reference = x.astype(np.float64)
    d = backends.to_numpy(distances.cdist(x, x, metric))
    _, (grad,) = backends.value_and_grad(
        _weighted_sum(lambda t: distances.cdist(t, t, metric), weights), x
    )
    assert d.dtype == grad.dtype == dtype
    if dtype == np.float32:
        backends.assert_close(d, rr.cdist(reference, metric), backends.RTOL32)
        backends.assert_close(grad, _numpy_gradient(reference, weights, metric), backends.RTOL32)
        return
    # The Gram expansion leaves ~1e-15 of the squared distance at zero distances: sqrt(1e-12 +
    # 1e-15) differs from the originals' 1e-6 by ~1e-9 there (cdist's exactness note).
    np.testing.assert_allclose(d, rr.cdist(x, metric), rtol=1e-9, atol=1e-8)
    np.testing.assert_allclose(grad, _numpy_gradient(x, weights, metric), rtol=1e-7, atol=1e-6)


def test_cdist_float32_is_as_exact_as_the_explicit_float32_sum(rng):
    """Within float32 rounding of the exact value, near-duplicate rows included: the float64
    Gram expansion of float32 rows (on JAX without x64 inside `jax.enable_x64`)."""
    x = rng.standard_normal((40, 128)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    x[5] = x[2] + np.float32(1e-4) * rng.standard_normal(128).astype(np.float32)
    exact = rr.cdist(x.astype(np.float64), "euclidean")
    got = backends.to_numpy(distances.cdist(x, x, "euclidean"))
    explicit = np.sqrt(((x[:, None] - x[None]) ** 2).sum(-1) + np.float32(1e-12))
    assert np.abs(got - exact).max() <= 2 * np.abs(explicit - exact).max() + 1e-7


def test_cdist_under_the_backends_compiler_and_graph(rng):
    x = rng.standard_normal((11, 4)).astype(np.float32)
    for metric in distances.CDIST_METRICS:
        eager = backends.to_numpy(distances.cdist(x, x, metric))
        for wrap in (backends.compiled, backends.graph):
            got = backends.to_numpy(wrap(_cdist_of_itself(metric))(x))
            backends.assert_close(got, eager, backends.RTOL32)


def _cdist_of_itself(metric):
    return lambda t: distances.cdist(t, t, metric)


def _tfa_l2(x, squared):
    """TFA's L2 semantics from explicit differences: exactly 0 (and no gradient) where a row
    meets itself or a duplicate."""
    squares = ((x[:, None] - x[None]) ** 2).sum(-1)
    return squares if squared else np.sqrt(squares)


def _tfa_l2_gradient(x, weights, squared):
    """d/dx of sum_ij W_ij L2(x_i, x_j) (float64), zero at zero distances."""
    diff = x[:, None] - x[None]
    norms = np.sqrt((diff**2).sum(-1, keepdims=True))
    local = 2.0 * diff if squared else np.divide(diff, norms, where=norms > 0, out=0 * diff)
    return ((weights + weights.T)[:, :, None] * local).sum(axis=1)


@pytest.mark.parametrize("dtype", [np.float32, backends.FLOAT64])
@pytest.mark.parametrize("squared", [False, True])
def test_pairwise_distance_values_and_gradients(rng, squared, dtype):
    # Rows well apart: TFA's float32 Gram expansion cancels for near-duplicates (it matches TFA
    # there, tests/losses/test_tfa_parity.py, not the exact value).
    x = rng.standard_normal((12, 6)).astype(dtype)
    weights = rng.standard_normal((12, 12))
    reference = x.astype(np.float64)
    value, (grad,) = backends.value_and_grad(
        _weighted_sum(lambda t: distances.pairwise_distance(t, squared=squared), weights), x
    )
    got = backends.to_numpy(distances.pairwise_distance(x, squared=squared))
    assert np.all(np.diag(got) == 0.0)
    rtol = backends.RTOL32 if dtype == np.float32 else 1e-10
    backends.assert_close(got, _tfa_l2(reference, squared), rtol)
    backends.assert_close(value, (weights * _tfa_l2(reference, squared)).sum(), rtol)
    backends.assert_close(grad, _tfa_l2_gradient(reference, weights, squared), rtol)


def _angular(x):
    """``(max(1 - U U^T, 0), U)`` with ``U = x / sqrt(max(|x|^2, 1e-12))`` (tf.math.l2_normalize,
    as TFA's angular distance), in float64."""
    unit = x / np.sqrt(np.maximum((x**2).sum(1, keepdims=True), 1e-12))
    return np.maximum(1.0 - unit @ unit.T, 0.0), unit


def _angular_gradient(x, weights):
    """d/dx of sum_ij W_ij angular(x_i, x_j) (float64): ``-(G + G^T) U`` through the normalization,
    ``(I - u u^T) / |x|`` for a row, ``1e6 I`` (1 / sqrt(1e-12)) for a zero row."""
    distance, unit = _angular(x)
    g = weights * (distance > 0)
    grad_unit = -(g + g.T) @ unit
    norms = np.sqrt((x**2).sum(1, keepdims=True))
    projected = grad_unit - (grad_unit * unit).sum(1, keepdims=True) * unit
    return np.where(norms**2 > 1e-12, projected / np.maximum(norms, 1e-300), 1e6 * grad_unit)


@pytest.mark.parametrize("dtype", [np.float32, backends.FLOAT64])
def test_angular_distance_values_and_gradients_with_a_zero_row(rng, dtype):
    """A zero row: distance 1 to every other row and finite gradients on every backend
    (`keras.ops.normalize` gives NaN there on PyTorch, keras-team/keras#23075)."""
    x = rng.standard_normal((10, 4)).astype(dtype)
    x[6] = 0.0
    weights = rng.standard_normal((10, 10))
    reference = x.astype(np.float64)
    _, (grad,) = backends.value_and_grad(_weighted_sum(distances.angular_distance, weights), x)
    got = backends.to_numpy(distances.angular_distance(x))
    assert np.isfinite(grad).all()
    # float64: the zero row's gradient is 1e6 times its upstream sum, which cancels.
    rtol = backends.RTOL32 if dtype == np.float32 else 1e-8
    backends.assert_close(got, _angular(reference)[0], rtol)
    np.testing.assert_array_equal(np.delete(got[6], 6), 1.0)
    backends.assert_close(grad, _angular_gradient(reference, weights), rtol)


@pytest.mark.parametrize("squared", [False, True])
def test_distance_rows_are_rows_of_the_matrix(rng, squared):
    x = rng.standard_normal((17, 4)).astype(np.float32)
    x[9] = x[4]
    full = backends.to_numpy(distances.pairwise_distance(x, squared=squared))
    for start, count in ((0, 5), (5, 7), (12, 5), (17, 0)):
        rows = backends.to_numpy(
            distances.pairwise_distance(x, squared=squared, rows=(start, count))
        )
        np.testing.assert_allclose(rows, full[start : start + count], rtol=1e-6, atol=1e-6)
        assert np.all(rows[np.arange(count), start + np.arange(count)] == 0.0)
    angular = backends.to_numpy(distances.angular_distance(x))
    np.testing.assert_allclose(
        backends.to_numpy(distances.angular_distance(x, rows=(3, 6))),
        angular[3:9],
        rtol=1e-6,
        atol=1e-6,
    )


# Each name's one meaning (tf_svmax.ops.distances.DISTANCES), from SciPy/NumPy on float64 rows:
# TFA's names with TFA's definitions (exactly zero where a row meets itself), the cdist
# names with the originals' (1e-12 under the square root; cosine of the rows as given), and the
# two similarities (pytorch-metric-learning's `CosineSimilarity`, `DotProductSimilarity`).
def _scipy_table(x):
    from scipy.spatial import distance as sd  # noqa: PLC0415 (test-only dependency)

    sq = sd.cdist(x, x, "sqeuclidean")
    itself = np.eye(len(x), dtype=bool)
    return {
        "L2": np.where(itself, 0.0, sd.cdist(x, x, "euclidean")),
        "squared-L2": np.where(itself, 0.0, sq),
        "angular": np.maximum(sd.cdist(x, x, "cosine"), 0.0),
        "euclidean": np.sqrt(sq + 1e-12),
        "sqeuclidean": sq,
        "cityblock": sd.cdist(x, x, "cityblock"),
        "cosine": 1.0 - x @ x.T,
        "cosine_similarity": 1.0 - sd.cdist(x, x, "cosine"),
        "dot": x @ x.T,
    }


SIMILARITIES = ("cosine_similarity", "dot")


def test_the_table_says_which_names_are_similarities():
    assert set(distances.DISTANCES) == set(_scipy_table(np.eye(2)))
    assert distances.SIMILARITY_NAMES == SIMILARITIES
    assert set(distances.DISTANCE_NAMES) == set(distances.DISTANCES) - set(SIMILARITIES)
    for name, entry in distances.DISTANCES.items():
        assert entry.name == name
        assert distances.is_similarity(name) == (name in SIMILARITIES)
    assert not distances.is_similarity(np.abs)  # TFA's callable: a distance


@pytest.mark.parametrize("dtype", [np.float32, backends.FLOAT64])
@pytest.mark.parametrize("metric", list(distances.DISTANCES))
def test_every_name_has_its_one_meaning(rng, metric, dtype):
    x = rng.standard_normal((9, 5)).astype(dtype)
    expected = _scipy_table(x.astype(np.float64))[metric]
    got = backends.to_numpy(distances.distance_matrix(x, metric))
    rows = backends.to_numpy(distances.distance_matrix(x, metric, rows=(2, 5)))
    assert got.dtype == dtype
    kinds = (distances.DISTANCE, distances.SIMILARITY)
    assert distances.check_distance(metric, kinds=kinds) == metric
    if dtype == np.float32:
        backends.assert_close(got, expected, backends.RTOL32)
        backends.assert_close(rows, expected[2:7], backends.RTOL32)
        return
    # "euclidean" at zero distance: the Gram expansion's ~1e-15 beside the 1e-12 moves the 1e-6
    # by ~1e-9 (cdist's exactness note; test_cdist_values_and_gradients_... allows 1e-8 too).
    atol = 1e-8 if metric == "euclidean" else 1e-12
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=atol)
    np.testing.assert_allclose(rows, expected[2:7], rtol=1e-9, atol=atol)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_is_computed_in_float32_and_returned_in_its_dtype(rng, dtype):
    x = rng.standard_normal((7, 3)).astype(np.float32)
    x_half = ops.cast(x, dtype)
    exact = _scipy_table(backends.to_numpy(ops.cast(x_half, "float32")).astype(np.float64))
    for metric in distances.DISTANCES:
        got = distances.distance_matrix(x_half, metric)
        assert keras.backend.standardize_dtype(got.dtype) == dtype
        # One rounding to the half type of the float32 result (2^-8 for bfloat16).
        backends.assert_close(backends.to_numpy(ops.cast(got, "float32")), exact[metric], 2**-7)


def test_float64_input_on_jax_without_x64_is_float32_and_says_so(rng):
    if backends.BACKEND != "jax":
        pytest.skip("only JAX has no float64 by default")
    from tf_svmax import checks  # noqa: PLC0415

    checks._WARNED.discard("jax-float64")
    x = rng.standard_normal((6, 3))
    with pytest.warns(RuntimeWarning, match="float64 input .* computed in float32"):
        got = backends.to_numpy(distances.pairwise_distance(x))
    assert got.dtype == np.float32
    backends.assert_close(got, _tfa_l2(x, False), backends.RTOL32)


def test_the_two_families_differ_where_their_definitions_do(rng):
    x = rng.standard_normal((6, 3)).astype(np.float32)  # rows not normalized
    table = {
        m: backends.to_numpy(distances.distance_matrix(x, m)).astype(np.float64)
        for m in distances.DISTANCE_NAMES
    }
    # "L2" is exactly 0 on the diagonal, "euclidean" 1e-6 (sqrt of the 1e-12).
    assert np.all(np.diag(table["L2"]) == 0.0)
    np.testing.assert_allclose(np.diag(table["euclidean"]), 1e-6, rtol=1e-5)
    # "angular" normalizes the rows, "cosine" does not.
    assert not np.allclose(table["angular"], table["cosine"])
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    np.testing.assert_allclose(
        backends.to_numpy(distances.distance_matrix(unit, "cosine")), table["angular"], atol=1e-6
    )


def test_check_distance_refuses_other_names_other_kinds_and_callables_unless_allowed():
    distance_names = r"\['L2', 'squared-L2', 'angular', 'euclidean', 'sqeuclidean', " + (
        r"'cityblock', 'cosine'\]"
    )
    for bad in ("L1", "cos", "Euclidean", None, 2):
        with pytest.raises(
            ValueError,
            match=rf"argument `distance`. Expected one of {distance_names}. Received: "
            + rf"distance={re.escape(repr(bad))}$",
        ):
            distances.check_distance(bad)
    with pytest.raises(ValueError, match=r"argument `distance_metric`.*or a callable"):
        distances.check_distance("L1", "distance_metric", allow_callable=True)
    # A similarity where a distance is needed, and the reverse: refused as such.
    for similarity in SIMILARITIES:
        with pytest.raises(
            ValueError,
            match=rf"argument `distance`. Expected a distance \(one of {distance_names}\); "
            + rf"'{similarity}' is a similarity \(larger for closer rows\). Received: "
            + rf"distance='{similarity}'",
        ):
            distances.check_distance(similarity)
    with pytest.raises(ValueError, match=r"a similarity \(one of \['cosine_similarity', 'dot'\]"):
        distances.check_distance("L2", kinds=(distances.SIMILARITY,))
    with pytest.raises(ValueError, match=r"argument `distance`"):
        distances.check_distance(np.abs)
    assert distances.check_distance(np.abs, allow_callable=True) is np.abs
    both = (distances.DISTANCE, distances.SIMILARITY)
    assert distances.check_distance("dot", kinds=both) == "dot"
    with pytest.raises(ValueError, match=r"argument `distance`"):
        distances.distance_matrix(np.eye(2), "L1")


def test_the_losses_that_take_a_distance_refuse_a_similarity(rng):
    from tf_svmax import losses  # noqa: PLC0415

    x = rng.standard_normal((6, 4)).astype(np.float32)
    y = np.repeat(np.arange(3), 2)
    takers = {
        "distance_metric": (
            losses.TripletSemiHardLoss,
            losses.TripletHardLoss,
            lambda **kw: losses.triplet_semihard_loss(y, x, **kw),
            lambda **kw: losses.triplet_hard_loss(y, x, **kw),
        ),
        "distance": (
            losses.BatchHardTripletLoss,
            losses.LiftedStructLoss,
            lambda **kw: losses.batch_hard_triplet_loss(y, x, **kw),
            lambda **kw: losses.lifted_struct_loss(y, x, **kw),
        ),
    }
    for arg, makers in takers.items():
        for make in makers:
            for similarity in SIMILARITIES:
                with pytest.raises(ValueError, match=rf"`{arg}`.*'{similarity}' is a similarity"):
                    make(**{arg: similarity})


@pytest.mark.skipif(
    backends.BACKEND != "tensorflow", reason="the losses run on TensorFlow until their port"
)
@pytest.mark.parametrize("metric", distances.DISTANCE_NAMES)
def test_the_losses_read_both_spellings_from_the_one_table(rng, metric):
    import tensorflow as tf  # noqa: PLC0415

    from tf_svmax import losses  # noqa: PLC0415

    x = rng.standard_normal((8, 4))
    y = np.repeat(np.arange(4), 2)
    table = _scipy_table(x)[metric]
    given = lambda e: tf.constant(table)  # noqa: E731 (the table as TFA's custom distance)
    for fn in (losses.triplet_semihard_loss, losses.triplet_hard_loss):
        np.testing.assert_allclose(
            fn(y, x, distance_metric=metric).numpy(),
            fn(y, x, distance_metric=given).numpy(),
            rtol=1e-9,
        )
    # batch_hard_triplet_loss with the same distances: farthest positive - closest negative.
    same = y[:, None] == y[None, :]
    positive = np.where(same & ~np.eye(8, dtype=bool), table, 0.0).max(axis=1)
    negative = np.where(same, np.inf, table).min(axis=1)
    np.testing.assert_allclose(
        losses.batch_hard_triplet_loss(y, x, margin="none", distance=metric).numpy(),
        positive - negative,
        rtol=1e-9,
        atol=1e-12,
    )


@pytest.mark.skipif(
    backends.BACKEND != "tensorflow", reason="only TensorFlow traces with unknown shapes"
)
def test_tensorflow_graphs_of_unknown_shape(rng):
    import tensorflow as tf  # noqa: PLC0415

    x = tf.constant(rng.standard_normal((10, 4)))
    spec = tf.TensorSpec([None, None], tf.float64)
    for metric in distances.DISTANCES:
        full = tf.function(functools.partial(distances.distance_matrix, distance=metric))
        rows = tf.function(
            functools.partial(distances.distance_matrix, distance=metric, rows=(2, 5))
        )
        expected = _scipy_table(x.numpy())[metric]
        atol = 1e-8 if metric == "euclidean" else 1e-12
        np.testing.assert_allclose(full.get_concrete_function(spec)(x), expected, atol=atol)
        np.testing.assert_allclose(rows.get_concrete_function(spec)(x), expected[2:7], atol=atol)
