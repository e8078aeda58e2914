"""`tf_svmax.metrics.kmeans` against scikit-learn's own k-means++ and KMeans."""

import numpy as np
import pytest
from sklearn.cluster import KMeans, kmeans_plusplus

from tf_svmax.metrics import kmeans

pytestmark = pytest.mark.all_backends


def _blobs(rng, n, k, d, dtype, spread=0.3):
    centres = rng.standard_normal((k, d))
    labels = rng.integers(0, k, n)
    return (centres[labels] + spread * rng.standard_normal((n, d))).astype(dtype)


def _potential(x, indices):
    x = x.astype(np.float64)
    d2 = ((x[:, None, :] - x[indices][None]) ** 2).sum(-1)
    return d2.min(axis=1).sum()


@pytest.mark.parametrize("trials", [None, 1, 3])
def test_float64_seeds_are_scikit_learns(rng, trials):
    """draws="sklearn": same draws, same greedy choice: with float64 data every index equals
    scikit-learn's."""
    x = _blobs(rng, 1500, 60, 12, np.float64)
    for seed in (0, 5):
        ours = kmeans.kmeans_plusplus(x, 60, seed=seed, n_local_trials=trials, draws="sklearn")
        _, theirs = kmeans_plusplus(x, 60, random_state=seed, n_local_trials=trials)
        np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("trials", [None, 2])
def test_pooled_seeds_follow_scikit_learns_distribution(rng, trials):
    """The pooled draws (rejection sampling, sparse rows) are another random stream for the
    same greedy k-means++ distribution: over 120 seeds the potential's mean and spread match
    scikit-learn's own `kmeans_plusplus` within sampling error (4 standard errors)."""
    x = _blobs(rng, 600, 40, 6, np.float64, spread=0.5)
    seeds = range(120)
    ours = np.array(
        [_potential(x, kmeans.kmeans_plusplus(x, 40, seed=s, n_local_trials=trials)) for s in seeds]
    )
    theirs = np.array(
        [
            _potential(x, kmeans_plusplus(x, 40, random_state=s, n_local_trials=trials)[1])
            for s in seeds
        ]
    )
    error = np.sqrt((ours.var() + theirs.var()) / len(seeds))
    assert abs(ours.mean() - theirs.mean()) < 4 * error
    assert ours.std() == pytest.approx(theirs.std(), rel=0.35)


def test_pooled_seeds_are_deterministic_and_not_scikit_learns_stream(rng):
    x = _blobs(rng, 800, 50, 8, np.float32)
    first = kmeans.kmeans_plusplus(x, 50, seed=2)
    np.testing.assert_array_equal(kmeans.kmeans_plusplus(x, 50, seed=2), first)
    _, theirs = kmeans_plusplus(x.astype(np.float64), 50, random_state=2)
    assert not np.array_equal(first, theirs)


def test_duplicate_points_do_not_stall_the_pooled_draws():
    """Fewer distinct points than centres: the potential reaches 0 and the draws stop there
    (scikit-learn's draws then all land on row 0)."""
    x = np.repeat(np.eye(3, dtype=np.float32), 4, axis=0)
    idx = kmeans.kmeans_plusplus(x, 5, seed=0)
    assert len({tuple(r) for r in x[idx[:3]]}) == 3
    assert idx.shape == (5,) and idx.min() >= 0 and idx.max() < 12


@pytest.mark.parametrize("draws", ["pooled", "sklearn"])
def test_float32_seeding_has_scikit_learns_quality(rng, draws):
    """In float32 a near-tie may pick another candidate, so compare what the seeding is for:
    the k-means potential of the chosen centres, over seeds, against scikit-learn's on float64
    (and a seeding that ignored the greedy trials would be visibly worse)."""
    x = _blobs(rng, 3000, 150, 32, np.float32, spread=0.5)
    ours = [_potential(x, kmeans.kmeans_plusplus(x, 150, seed=s, draws=draws)) for s in range(4)]
    theirs = [
        _potential(x, kmeans_plusplus(x.astype(np.float64), 150, random_state=s)[1])
        for s in range(4)
    ]
    plain = [
        _potential(x, kmeans.kmeans_plusplus(x, 150, seed=s, n_local_trials=1)) for s in range(4)
    ]
    assert np.mean(ours) == pytest.approx(np.mean(theirs), rel=0.02)
    assert np.mean(plain) > 1.05 * np.mean(theirs)


def test_seeds_are_distinct_rows_of_x(rng):
    x = _blobs(rng, 400, 40, 8, np.float32)
    idx = kmeans.kmeans_plusplus(x, 40, seed=1)
    assert idx.dtype == np.int64 and idx.shape == (40,)
    assert len(np.unique(idx)) == 40 and idx.min() >= 0 and idx.max() < 400


@pytest.mark.parametrize("init", ["k-means++-sklearn", "random"])
def test_kmeans_equals_scikit_learns_kmeans(rng, init):
    x = _blobs(rng, 600, 12, 6, np.float64)
    labels, info = kmeans.kmeans(x, 12, seed=4, init=init, max_iter=300)
    theirs = "k-means++" if init == "k-means++-sklearn" else init
    reference = KMeans(n_clusters=12, n_init=1, init=theirs, random_state=4, max_iter=300).fit(x)
    np.testing.assert_array_equal(labels, reference.labels_)
    seconds = {k: info.pop(k) for k in ("seconds_kmeans_seeding", "seconds_kmeans_lloyd")}
    assert min(seconds.values()) >= 0
    rows = {"kmeans_seeding_rows_computed": 12, "kmeans_seeding_rows_from_neighbors": 0}
    assert info == {
        "kmeans_init": init,
        "kmeans_iterations": int(reference.n_iter_),
        "kmeans_converged": bool(reference.n_iter_ < 300),
        **(rows if init != "random" else {}),
    }


def test_default_kmeans_has_scikit_learns_inertia(rng):
    """Default (pooled) seeding + Lloyd: the converged inertia over seeds matches scikit-learn's
    `KMeans(init="k-means++")` (another random stream, so not the same clusters)."""
    x = _blobs(rng, 1500, 60, 12, np.float32, spread=0.6)

    def inertia(labels):
        return sum(((x[labels == c] - x[labels == c].mean(0)) ** 2).sum() for c in set(labels))

    ours = [inertia(kmeans.kmeans(x, 60, seed=s)[0]) for s in range(6)]
    theirs = [KMeans(60, n_init=1, random_state=s).fit(x).inertia_ for s in range(6)]
    assert np.mean(ours) == pytest.approx(np.mean(theirs), rel=0.01)


def test_kmeans_reports_an_iteration_cap(rng):
    x = _blobs(rng, 600, 12, 6, np.float32, spread=1.5)
    _, info = kmeans.kmeans(x, 12, seed=0, max_iter=1)
    assert info["kmeans_iterations"] == 1 and info["kmeans_converged"] is False


def test_bad_arguments_are_named():
    x = np.zeros((5, 2), np.float32)
    with pytest.raises(ValueError, match=r"argument `x`.*float32 or float64.*int64"):
        kmeans.kmeans_plusplus(np.zeros((5, 2), np.int64), 2)
    with pytest.raises(ValueError, match=r"argument `x`.*2-D"):
        kmeans.kmeans_plusplus(np.zeros(5, np.float32), 2)
    with pytest.raises(ValueError, match=r"argument `n_clusters`.*at most 5.*6"):
        kmeans.kmeans_plusplus(x, 6)
    with pytest.raises(ValueError, match=r"argument `n_clusters`"):
        kmeans.kmeans_plusplus(x, 0)
    with pytest.raises(ValueError, match=r"argument `n_local_trials`"):
        kmeans.kmeans_plusplus(x, 2, n_local_trials=0)
    with pytest.raises(ValueError, match=r"argument `draws`.*pooled.*sklearn.*fast"):
        kmeans.kmeans_plusplus(x, 2, draws="fast")
    with pytest.raises(ValueError, match=r"argument `init`.*k-means\+\+-sklearn.*kmeans"):
        kmeans.kmeans(x, 2, init="kmeans")
    with pytest.raises(ValueError, match=r"argument `max_iter`"):
        kmeans.kmeans(x, 2, max_iter=0)


@pytest.mark.parametrize("init", kmeans.INITS)
def test_every_init_checks_its_arguments(init):
    """init="random" went straight to scikit-learn (its own errors); every init checks the
    same things by name."""
    x = np.random.default_rng(0).normal(size=(10, 3)).astype(np.float32)
    with pytest.raises(ValueError, match=r"argument `n_clusters`.*at most 10.*11"):
        kmeans.kmeans(x, 11, init=init)
    with pytest.raises(ValueError, match=r"argument `n_clusters`.*0"):
        kmeans.kmeans(x, 0, init=init)
    for seed in (-1, 1.5, 2**32, True):
        with pytest.raises(ValueError, match=r"argument `seed`.*2\*\*32 - 1"):
            kmeans.kmeans(x, 2, init=init, seed=seed)
    with pytest.raises(ValueError, match=r"argument `x`.*finite.*nan at \(3, 0\)"):
        kmeans.kmeans(np.where(np.arange(10)[:, None] == 3, np.nan, x), 2, init=init)


@pytest.mark.parametrize("draws", kmeans.DRAWS)
@pytest.mark.parametrize("bad", [np.nan, -np.inf])
def test_non_finite_rows_are_refused(draws, bad):
    """A NaN row was chosen as a centre (draws="sklearn"; the pooled draws never returned)."""
    x = np.random.default_rng(0).normal(size=(10, 3)).astype(np.float32)
    x[3, 1] = bad
    with pytest.raises(ValueError, match=r"argument `x`.*finite.*at \(3, 1\)"):
        kmeans.kmeans_plusplus(x, 3, draws=draws)
    with pytest.raises(ValueError, match=r"argument `seed`"):
        kmeans.kmeans_plusplus(x[:3] * 0, 3, draws=draws, seed=-1)


def _far_blobs(scale):
    """4 well separated float32 blobs of 5 points, at the given scale."""
    rng = np.random.default_rng(0)
    x = np.repeat(rng.normal(size=(4, 3)), 5, axis=0) + 0.01 * rng.normal(size=(20, 3))
    return (x * scale).astype(np.float32)


@pytest.mark.parametrize("scale", [1e20, 1e-25])
@pytest.mark.parametrize("init", kmeans.INITS)
def test_extreme_float32_scales_cluster_like_unit_scale(scale, init):
    """Around 1e20 the float32 squared norms overflow (the centres were duplicates, all points
    one cluster; the pooled draws never returned), around 1e-25 they underflow to 0. The data
    are scaled by a power of two first: the same clusters as at unit scale."""
    x = _far_blobs(scale)
    labels, _ = kmeans.kmeans(x, 4, seed=1, init=init)
    np.testing.assert_array_equal(np.bincount(labels), [5, 5, 5, 5])
    assert len(set(labels[::5])) == 4
    for draws in kmeans.DRAWS:
        seeds = kmeans.kmeans_plusplus(x, 4, seed=1, draws=draws)
        assert sorted(seeds // 5) == [0, 1, 2, 3]


def test_power_of_two_scaling_keeps_scikit_learns_float64_seeds(rng):
    """The rescaling is exact (a power of two): float64 data far from unit scale still get
    scikit-learn's indices with draws="sklearn"."""
    x = _blobs(rng, 500, 20, 6, np.float64) * 2.0**40
    ours = kmeans.kmeans_plusplus(x, 20, seed=3, draws="sklearn")
    _, theirs = kmeans_plusplus(x, 20, random_state=3)
    np.testing.assert_array_equal(ours, theirs)


def _brute_lists(x, size, rng=None):
    """Reference `NeighborLists` from float64 brute force: row i lists every point j != i
    closer than its radius, the squared distance to its `size`-th nearest other point (a
    random size per row when `size` is an array)."""
    x64 = x.astype(np.float64)
    d2 = ((x64[:, None, :] - x64[None]) ** 2).sum(-1)
    np.fill_diagonal(d2, np.inf)
    radii = np.sort(d2, axis=1)[np.arange(len(x)), np.asarray(size) - 1]
    mask = d2 < radii[:, None]
    rows, columns = np.nonzero(mask)
    indptr = np.concatenate([[0], np.cumsum(mask.sum(axis=1))])
    return kmeans.NeighborLists(indptr, columns, d2[rows, columns].astype(x.dtype), radii)


@pytest.mark.parametrize("size", ["small", "mixed", "all"])
def test_neighbor_lists_give_the_seeds_computed_without_them(rng, size):
    """The lists only spare computing rows: with float64 data the seeds equal the seeding's
    without lists, same seed, whether the lists cover few points (most rows computed), some
    (rows from lists plus the points whose D^2 exceeds the radius) or all of them."""
    x = _blobs(rng, 700, 45, 6, np.float64, spread=0.5)
    sizes = {"small": 3, "mixed": rng.integers(1, 300, len(x)), "all": len(x) - 1}[size]
    lists = _brute_lists(x, sizes)
    for seed in (0, 1, 2):
        stats = {}
        ours = kmeans.kmeans_plusplus(x, 45, seed=seed, neighbors=lists, stats=stats)
        np.testing.assert_array_equal(ours, kmeans.kmeans_plusplus(x, 45, seed=seed))
        if size != "small":
            assert stats["rows_from_neighbors"] > stats["rows_computed"]


def test_neighbor_lists_are_trusted_only_up_to_their_radius(rng):
    """A list whose radius is too large for it (points left out) must change the seeds: the
    radius is what the seeding relies on, so a test of the lists can fail."""
    x = _blobs(rng, 700, 45, 6, np.float64, spread=0.5)
    lists = _brute_lists(x, 60)
    lists.radii[:] = np.inf  # claims every point is listed
    changed = [
        not np.array_equal(
            kmeans.kmeans_plusplus(x, 45, seed=s, neighbors=lists),
            kmeans.kmeans_plusplus(x, 45, seed=s),
        )
        for s in range(3)
    ]
    assert any(changed)


def test_kmeans_with_neighbor_lists_has_scikit_learns_inertia(rng):
    """float32, lists from float64 brute force: the converged inertia over seeds matches
    scikit-learn's `KMeans(init="k-means++")`, and the info says where the rows came from."""
    x = _blobs(rng, 1500, 60, 12, np.float32, spread=0.6)
    lists = _brute_lists(x, 100)

    def inertia(labels):
        return sum(((x[labels == c] - x[labels == c].mean(0)) ** 2).sum() for c in set(labels))

    runs = [kmeans.kmeans(x, 60, seed=s, neighbors=lists) for s in range(6)]
    theirs = [KMeans(60, n_init=1, random_state=s).fit(x).inertia_ for s in range(6)]
    assert np.mean([inertia(labels) for labels, _ in runs]) == pytest.approx(
        np.mean(theirs), rel=0.01
    )
    assert all(info["kmeans_seeding_rows_from_neighbors"] > 0 for _, info in runs)


def test_bad_neighbor_lists_are_named():
    x = np.random.default_rng(0).normal(size=(10, 3)).astype(np.float32)
    lists = _brute_lists(x, 4)
    with pytest.raises(ValueError, match=r"argument `neighbors`.*10 rows"):
        kmeans.kmeans_plusplus(x[:9], 2, neighbors=lists)
    with pytest.raises(ValueError, match=r"argument `neighbors`"):
        kmeans.kmeans_plusplus(x, 2, neighbors="lists")
    with pytest.raises(ValueError, match=r"argument `indptr`"):
        kmeans.NeighborLists(lists.indptr[:-1], lists.indices, lists.squared_distances, lists.radii)
    with pytest.raises(ValueError, match=r"argument `indices`.*\[0, 10\)"):
        kmeans.NeighborLists(lists.indptr, lists.indices + 10, lists.squared_distances, lists.radii)
    with pytest.raises(ValueError, match=r"argument `radii`.*NaN"):
        kmeans.NeighborLists(
            lists.indptr, lists.indices, lists.squared_distances, lists.radii * np.nan
        )
    with pytest.raises(ValueError, match=r"argument `squared_distances`"):
        kmeans.NeighborLists(lists.indptr, lists.indices, lists.squared_distances[1:], lists.radii)


@pytest.mark.parametrize("lists", [False, True])
def test_seeding_reports_each_points_nearest_seed(rng, lists):
    """`nearest_centre` (the assignment step of Lloyd's first iteration, which kmeans then
    skips) is the argmin of float64 brute-force distances to the seeds."""
    x = _blobs(rng, 700, 45, 6, np.float64, spread=0.5)
    stats = {}
    neighbors = _brute_lists(x, 80) if lists else None
    seeds = kmeans.kmeans_plusplus(x, 45, seed=4, neighbors=neighbors, stats=stats)
    d2 = ((x[:, None] - x[seeds][None]) ** 2).sum(-1)
    np.testing.assert_array_equal(stats["nearest_centre"], d2.argmin(axis=1))


def test_default_kmeans_is_scikit_learns_lloyd_from_the_same_seeds(rng):
    """kmeans(init="k-means++") does Lloyd's first iteration from the seeding's assignment and
    hands the rest to scikit-learn: the clusters and iteration count of scikit-learn's
    `KMeans` started from the same seeds."""
    x = _blobs(rng, 1200, 40, 8, np.float64, spread=0.8)
    for seed in (0, 1, 2):
        labels, info = kmeans.kmeans(x, 40, seed=seed)
        start = x[kmeans.kmeans_plusplus(x, 40, seed=seed)]
        reference = KMeans(40, init=start, n_init=1, max_iter=300).fit(x)
        np.testing.assert_array_equal(labels, reference.labels_)
        assert info["kmeans_iterations"] == reference.n_iter_ > 1
        assert info["kmeans_converged"]
        _, capped = kmeans.kmeans(x, 40, seed=seed, max_iter=2)
        assert capped["kmeans_iterations"] == 2
