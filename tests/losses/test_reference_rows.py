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
from tf_svmax.losses import _common

pytestmark = pytest.mark.all_backends

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

    value, (grad_anchors, grad_refs) = backends.value_and_grad_in_one_program(
        loss, anchors, placeholder
    )
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

    value, (grad,) = backends.value_and_grad_in_one_program(split, x)
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


# ``ref_mask``: a fixed-size reference set of which only some rows are in use (the cross-batch
# memory's bank under XLA). A masked row must be as if absent: the NumPy loops run on the kept
# rows only.
MASK_CASES = (
    # (seed, number of references, anchors' offset, anchors' count)
    (0, 13, 0, 4),
    (1, 13, 5, 3),
    (2, 16, 12, 4),
    (3, 9, 2, 5),
)
# The masking is keras.ops code shared by the backends: TensorFlow runs every case, JAX and
# PyTorch two (JAX compiles a case's two programs, `backends.value_and_grad_in_one_program`:
# ~4 s for the semi-hard one on a 2-core CPU, the long pole of CI's backend step).
if backends.BACKEND != "tensorflow":
    MASK_CASES = MASK_CASES[::2]  # anchors first (the memory's layout) and last


def _masked_case(seed, n, offset, b):
    """References (x, y) with a random mask, True on the anchors' rows; the masked rows hold
    rows far from every other (5x longer: were they read, they would be each anchor's farthest
    negative, the semi-hard fallback and the row maxima) of every class."""
    rng = np.random.default_rng(seed)
    x, y = random_batch(rng, b=n, dim=4, classes=3)
    mask = rng.random(n) < 0.5
    mask[offset : offset + b] = True
    x[~mask] *= 5.0
    return x, y, mask


def _kept(mask, offset):
    """The kept rows and the anchors' offset among them."""
    return np.flatnonzero(mask), int(np.sum(mask[:offset]))


@pytest.mark.parametrize("case", MASK_CASES)
@pytest.mark.parametrize("name", FUNCTIONS)
def test_masked_references_are_the_kept_references(name, case):
    """Value and gradients with ``ref_mask`` = the NumPy loop's on the kept rows (anchors and
    kept references), = the call on the kept references (compacted); the masked rows get a zero
    gradient."""
    fn, ref, _ = FUNCTIONS[name]
    seed, n, offset, b = case
    x, y, mask = _masked_case(seed, n, offset, b)
    keep, kept_offset = _kept(mask, offset)
    assert 0 < keep.size - b < n - b  # some references kept, some masked

    def masked(a, r):
        return fn(
            y[offset : offset + b],
            a,
            ref_labels=y,
            ref_embeddings=r,
            ref_offset=offset,
            ref_mask=mask,
        )

    def compacted(a, r):
        return fn(
            y[offset : offset + b], a, ref_labels=y[keep], ref_embeddings=r, ref_offset=kept_offset
        )

    anchors = x[offset : offset + b]
    value, (grad_anchors, grad_refs) = backends.value_and_grad_in_one_program(masked, anchors, x)
    want = ref(y[keep], x[keep], b, offset=kept_offset)
    assert want > 0.01
    backends.assert_close(value, want, backends.RTOL32)
    grad = backends.numpy_gradient(
        lambda z: ref(y[keep], z, b, offset=kept_offset), x[keep].astype(np.float64)
    )
    anchor_rows = slice(kept_offset, kept_offset + b)
    backends.assert_close(grad_anchors, grad[anchor_rows], 1e-4)
    others = np.setdiff1d(keep, np.arange(offset, offset + b))
    kept_others = np.setdiff1d(np.arange(keep.size), np.arange(kept_offset, kept_offset + b))
    backends.assert_close(grad_refs[others], grad[kept_others], 1e-4)
    np.testing.assert_array_equal(grad_refs[~mask], 0.0)
    np.testing.assert_array_equal(grad_refs[offset : offset + b], 0.0)  # the anchors' places

    # The same computation on fewer columns: equal to float32 rounding (sums over other orders).
    value_c, (grad_anchors_c, grad_refs_c) = backends.value_and_grad_in_one_program(
        compacted, anchors, x[keep]
    )
    np.testing.assert_allclose(value, value_c, rtol=1e-6)
    np.testing.assert_allclose(grad_anchors, grad_anchors_c, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(grad_refs[keep], grad_refs_c, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_masked_rows_are_never_read(name):
    """Whatever the masked rows hold (NaN, inf), the value and gradients are unchanged."""
    fn, _, _ = FUNCTIONS[name]
    x, y, mask = _masked_case(1, 13, 5, 3)
    poisoned = x.copy()
    poisoned[np.flatnonzero(~mask)[0]] = np.nan
    poisoned[np.flatnonzero(~mask)[-1]] = np.inf

    def masked(r):
        return fn(y[5:8], r[5:8], ref_labels=y, ref_embeddings=r, ref_offset=5, ref_mask=mask)

    value, (grad,) = backends.value_and_grad_in_one_program(masked, x)
    value_p, (grad_p,) = backends.value_and_grad_in_one_program(masked, poisoned)
    np.testing.assert_array_equal(value_p, value)
    np.testing.assert_array_equal(grad_p, grad)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_only_the_anchors_in_use_is_the_loss_on_the_anchors(name):
    """A mask True only on the anchors' rows: the loss of the anchors alone (their own
    references), value and gradient; with no anchors either, 0."""
    fn, _, _ = FUNCTIONS[name]
    x, y, _ = _masked_case(2, 13, 4, 5)
    mask = np.zeros(13, bool)
    mask[4:9] = True

    def masked(a):
        return fn(y[4:9], a, ref_labels=y, ref_embeddings=x, ref_offset=4, ref_mask=mask)

    value, (grad,) = backends.value_and_grad_in_one_program(masked, x[4:9])
    alone, (grad_alone,) = backends.value_and_grad_in_one_program(lambda a: fn(y[4:9], a), x[4:9])
    assert alone > 0.01
    np.testing.assert_allclose(value, alone, rtol=1e-6)
    np.testing.assert_allclose(grad, grad_alone, rtol=1e-5, atol=1e-7)
    if name == "batch_hard":
        fn = losses.batch_hard_triplet_loss
    none = np.zeros(13, bool)
    got = backends.to_numpy(
        fn(y[:0], x[:0], ref_labels=y, ref_embeddings=x, ref_offset=3, ref_mask=none)
    )
    assert np.all(got == 0.0), name


@pytest.mark.parametrize("name", FUNCTIONS)
def test_the_classes_pass_the_mask(name):
    """`call` and `reference_parts` (through `Loss`) take ``ref_mask``: the parts' value is
    the function's; without it they are unchanged. (The shapes of `test_the_mask_compiles`'
    eager call: eager JAX compiles one program per operation and shape.)"""
    fn, _, cls = FUNCTIONS[name]
    x, y, mask = _masked_case(5, 13, 2, 4)
    loss = cls()
    assert loss.accepts_ref_mask
    refs = dict(ref_labels=y, ref_embeddings=x, ref_offset=2)
    want = backends.to_numpy(fn(y[2:6], x[2:6], **refs, ref_mask=mask))
    parts = loss.reference_parts(y[2:6], x[2:6], **refs, ref_mask=mask)
    backends.assert_close(_common.mean_of_parts(parts), want, 1e-6)
    called = loss.call(y[2:6], x[2:6], **refs, ref_mask=mask)
    if name == "batch_hard":
        called = _mean(called)
    backends.assert_close(called, want, 1e-6)
    unmasked = backends.to_numpy(fn(y[2:6], x[2:6], **refs))
    assert abs(unmasked - want) > 1e-3  # the mask changes the value here
    backends.assert_close(
        _common.mean_of_parts(loss.reference_parts(y[2:6], x[2:6], **refs)), unmasked, 1e-6
    )


@pytest.mark.parametrize("name", FUNCTIONS)
def test_the_mask_compiles(name):
    """Under the backend's compiler (XLA on TensorFlow and JAX) the masked value is the eager
    one: the mask is data, the shapes fixed."""
    fn, _, _ = FUNCTIONS[name]
    x, y, mask = _masked_case(0, 13, 0, 4)

    def masked(r, m):
        return fn(y[:4], r[:4], ref_labels=y, ref_embeddings=r, ref_offset=0, ref_mask=m)

    eager = backends.to_numpy(masked(x, mask))
    got = backends.to_numpy(backends.compiled(masked)(x, mask))
    np.testing.assert_allclose(got, eager, rtol=1e-6)


# A False ``ref_mask`` entry on an anchor's own row drops that anchor: the set against itself
# with a mask S is the loss on the rows of S alone (XMLLoss' class halves under XLA). The
# semi-hard case runs on TensorFlow only (JAX's eager semi-hard gradients cost ~9 s a case on
# CI's 2-core CPU; the masking is the shared keras.ops code of the other four).
SUBSET_LOSSES = [
    name for name in FUNCTIONS if backends.BACKEND == "tensorflow" or name != "semihard"
]
SUBSET_CASES = (
    # (seed, rows): a random subset S of about half the rows (at least two classes in it)
    (4, 11),
    (5, 14),
)
if backends.BACKEND != "tensorflow":
    SUBSET_CASES = SUBSET_CASES[:1]  # JAX's eager gradients: ~2 s a case on CI's CPU


def _subset_case(seed, n):
    rng = np.random.default_rng(seed)
    x, y = random_batch(rng, b=n, dim=4, classes=3)
    keep = rng.random(n) < 0.55
    keep[:2] = True  # classes 0 and 1 (random_batch's first rows): every anchor has a negative
    x[~keep] *= 5.0  # far rows: were they read, they would be the farthest negatives
    x[np.flatnonzero(~keep)[0]] = np.nan  # and one that would poison everything
    return x, y, keep


def _against_itself(name, y):
    """The set (y, x) as its own references with ``ref_mask``: ``loss(x, mask)`` (for the
    per-anchor batch-hard loss, the mean over the anchors in use: its class'
    `reference_parts`)."""
    fn = FUNCTIONS[name][0]
    if name == "batch_hard":

        def fn(y, x, **references):
            parts = losses.BatchHardTripletLoss().reference_parts(y, x, **references)
            return _common.mean_of_parts(parts)

    def loss(x, mask):
        return fn(y, x, ref_labels=y, ref_embeddings=x, ref_offset=0, ref_mask=mask)

    return loss


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("case", SUBSET_CASES)
@pytest.mark.parametrize("name", SUBSET_LOSSES)
def test_masked_anchors_are_dropped_the_loss_on_the_subset(name, case, mode):
    """``ref_mask`` = S over a set that is its own reference (anchors at 0): the NumPy loop's
    value on the rows of S alone and its gradient on them (finite differences), a zero
    gradient on the dropped rows (anchors as well as references), eagerly and compiled."""
    ref = FUNCTIONS[name][1]
    x, y, keep = _subset_case(*case)
    assert 2 < keep.sum() < keep.size - 2  # anchors kept and dropped
    loss = _against_itself(name, y)
    if mode == "eager":
        value, (grad,) = backends.value_and_grad(lambda z: loss(z, keep), x)
    else:
        value, grad = backends.compiled_value_and_grad(loss, x, keep)
    s = keep.sum()
    want = ref(y[keep], x[keep], s)
    assert want > 0.01  # the comparison means something
    backends.assert_close(value, want, backends.RTOL32)
    want_grad = backends.numpy_gradient(lambda z: ref(y[keep], z, s), x[keep].astype(np.float64))
    assert np.abs(want_grad).max() > 1e-3
    backends.assert_close(grad[keep], want_grad, 1e-4)
    np.testing.assert_array_equal(grad[~keep], 0.0)
    # The same computation as the loss on the rows of S (compacted), to float32 rounding.
    alone = FUNCTIONS[name][0](y[keep], x[keep])
    np.testing.assert_allclose(value, backends.to_numpy(alone), rtol=1e-6)


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("name", SUBSET_LOSSES)
def test_an_empty_subset_gives_zero_with_zero_gradient(name, mode):
    x, y, _ = _subset_case(4, 11)
    none = np.zeros(len(y), bool)
    loss = _against_itself(name, y)
    if mode == "eager":
        value, (grad,) = backends.value_and_grad(lambda z: loss(z, none), x)
    else:
        value, grad = backends.compiled_value_and_grad(loss, x, none)
    assert value == 0.0
    np.testing.assert_array_equal(grad, 0.0)


def test_a_dropped_anchor_is_out_of_the_per_sample_mean(rng):
    """`BatchHardTripletLoss` (one value per anchor): a dropped anchor's value is 0 and its
    `reference_parts` count only the anchors in use, so the mean is the subset's."""
    x, y, keep = _subset_case(4, 11)  # the first subset case's (eager JAX: its programs)
    loss = losses.BatchHardTripletLoss()
    values = backends.to_numpy(
        losses.batch_hard_triplet_loss(y, x, ref_labels=y, ref_embeddings=x, ref_mask=keep)
    )
    np.testing.assert_array_equal(values[~keep], 0.0)
    parts = loss.reference_parts(y, x, ref_labels=y, ref_embeddings=x, ref_mask=keep)
    backends.assert_close(
        _common.mean_of_parts(parts), ref_batch_hard(y[keep], x[keep], keep.sum()), 1e-5
    )


def test_the_mask_argument_is_checked(rng):
    x, y = _data(rng)
    fn = losses.triplet_semihard_loss
    refs = dict(ref_labels=y, ref_embeddings=x, ref_offset=3)
    mask = np.ones(N, bool)
    with pytest.raises(ValueError, match="`ref_mask`.*None without ref_labels"):
        fn(y, x, ref_mask=mask)
    with pytest.raises(
        ValueError, match=r"`ref_mask`.*one entry per row of `ref_embeddings` \(11\)"
    ):
        fn(y[3:7], x[3:7], **refs, ref_mask=mask[:10])
    with pytest.raises(ValueError, match="`ref_mask`.*bool vector.*int8"):
        fn(y[3:7], x[3:7], **refs, ref_mask=mask.astype(np.int8))
    with pytest.raises(ValueError, match="`ref_mask`.*bool vector.*shape"):
        fn(y[3:7], x[3:7], **refs, ref_mask=mask[:, None])
