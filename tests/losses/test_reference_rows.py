"""The losses' reference rows (``ref_labels``, ``ref_embeddings``, ``ref_offset``), on every
backend: anchors mined against a reference set that holds them, against float64 NumPy loops
from the definitions (tests/reference_xbm.py), values and gradients; the replica split's
`reference_parts` adding up to the loss; the arguments' checks."""

import numpy as np
import pytest

from tests import backends
from tests.reference_xbm import (
    random_batch,
    ref_batch_hard,
    ref_contrastive,
    ref_hard,
    ref_lifted,
    ref_semihard,
)
from tf_svmax import losses

# name: (function, its NumPy reference with the anchors at `offset`, the loss class)
FUNCTIONS = {
    "semihard": (losses.triplet_semihard_loss, ref_semihard, losses.TripletSemiHardLoss),
    "hard": (losses.triplet_hard_loss, ref_hard, losses.TripletHardLoss),
    "lifted": (losses.lifted_struct_loss, ref_lifted, losses.LiftedStructLoss),
    "batch_hard": (
        lambda *a, **k: _mean(losses.batch_hard_triplet_loss(*a, **k)),
        ref_batch_hard,
        losses.BatchHardTripletLoss,
    ),
    "contrastive": (
        losses.all_pairs_contrastive_loss,
        ref_contrastive,
        losses.AllPairsContrastiveLoss,
    ),
}
N, OFFSET, B = 11, 3, 4


def _mean(values):
    import keras

    return keras.ops.mean(values)


def _data(rng):
    x, y = random_batch(rng, b=N, dim=4, classes=3)
    return x, y


@pytest.mark.parametrize("name", FUNCTIONS)
def test_anchors_against_references_match_numpy(rng, name):
    """Anchors = rows 3..6 of 11 references: the value is the NumPy loop's over those anchors
    against all 11 rows; the gradient reaches the anchors (`y_pred`) and the other reference
    rows, as the loop's finite differences, and not the references' rows of the anchors
    (the anchors take their place)."""
    fn, ref, _ = FUNCTIONS[name]
    x, y = _data(rng)
    anchors = x[OFFSET : OFFSET + B]
    # The references' rows of the anchors are placeholders: the anchors replace them.
    placeholder = x.copy()
    placeholder[OFFSET : OFFSET + B] = 7.0

    def loss(a, r):
        return fn(y[OFFSET : OFFSET + B], a, ref_labels=y, ref_embeddings=r, ref_offset=OFFSET)

    value, (grad_anchors, grad_refs) = backends.value_and_grad(loss, anchors, placeholder)
    want = ref(y, x, B, offset=OFFSET)
    assert want > 0.01  # the comparison means something
    backends.assert_close(value, want, backends.RTOL32)
    grad = backends.numpy_gradient(lambda z: ref(y, z, B, offset=OFFSET), x.astype(np.float64))
    backends.assert_close(grad_anchors, grad[OFFSET : OFFSET + B], 1e-4)
    others = np.r_[0:OFFSET, OFFSET + B : N]
    backends.assert_close(grad_refs[others], grad[others], 1e-4)
    assert np.abs(grad[others]).max() > 1e-3  # the references do receive gradient
    np.testing.assert_array_equal(grad_refs[OFFSET : OFFSET + B], 0.0)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_a_set_that_is_its_own_reference_is_the_plain_loss(rng, name):
    fn, _, _ = FUNCTIONS[name]
    x, y = _data(rng)
    plain = backends.to_numpy(fn(y, x))
    with_refs = backends.to_numpy(fn(y, x, ref_labels=y, ref_embeddings=x, ref_offset=0))
    np.testing.assert_allclose(with_refs, plain, rtol=1e-6)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_reference_parts_of_disjoint_anchor_ranges_add_up_to_the_loss(rng, name):
    """What each replica computes (its rows against the global batch), an empty range
    included: the ranges' parts, counts summed, give the loss on the whole set."""
    _, ref, cls = FUNCTIONS[name]
    x, y = _data(rng)
    ranges = ((0, 4), (4, 0), (4, 5), (9, 2))

    def split(z):
        return backends.split_value(cls(), y, z, ranges)

    value, (grad,) = backends.value_and_grad(split, x)
    backends.assert_close(value, ref(y, x, N), backends.RTOL32)
    want = backends.numpy_gradient(lambda z: ref(y, z, N), x.astype(np.float64))
    backends.assert_close(grad, want, 1e-4)


def test_the_reference_arguments_are_checked(rng):
    x, y = _data(rng)
    fn = losses.triplet_semihard_loss
    with pytest.raises(ValueError, match="`ref_embeddings`"):
        fn(y[:3], x[:3], ref_labels=y)
    with pytest.raises(ValueError, match="`ref_labels`"):
        fn(y[:3], x[:3], ref_embeddings=x)
    with pytest.raises(ValueError, match="`ref_offset`.*0 without ref_labels"):
        fn(y, x, ref_offset=2)
    with pytest.raises(ValueError, match=r"`ref_offset`.*\[0, 8\].*ref_offset=9"):
        fn(y[:3], x[:3], ref_labels=y, ref_embeddings=x, ref_offset=9)
    with pytest.raises(ValueError, match="`ref_offset`.*ref_offset=-1"):
        fn(y[:3], x[:3], ref_labels=y, ref_embeddings=x, ref_offset=-1)
    with pytest.raises(ValueError, match="`ref_embeddings`.*width 4"):
        fn(y[:3], x[:3], ref_labels=y, ref_embeddings=x[:, :3])
    with pytest.raises(ValueError, match="`ref_labels`"):
        fn(y[:3], x[:3], ref_labels=y[:5], ref_embeddings=x)


def test_no_anchors_against_references_give_zero(rng):
    """A replica's empty share: no anchors (refused without references) give 0 (no values for
    the per-anchor batch-hard loss)."""
    x, y = _data(rng)
    for name, (fn, _, _) in FUNCTIONS.items():
        if name == "batch_hard":
            fn = losses.batch_hard_triplet_loss
        got = backends.to_numpy(fn(y[:0], x[:0], ref_labels=y, ref_embeddings=x, ref_offset=2))
        assert got.shape == ((0,) if name == "batch_hard" else ()), name
        assert np.all(got == 0.0), name
