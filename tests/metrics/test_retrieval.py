import contextlib
import io

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.metrics import normalized_mutual_info_score

from tests.reference_retrieval import brute_map_at_r, brute_neighbors, brute_recall
from tf_svmax.metrics import retrieval

pytestmark = pytest.mark.all_backends


@pytest.mark.parametrize("block_size", [1, 7, 1024])
def test_recall_and_map_at_r_match_brute_force_with_ties_and_singletons(rng, block_size):
    # Integer grid coordinates give many tied distances; label 99 is a single-image class.
    x = rng.integers(-2, 3, size=(40, 3)).astype(np.float32)
    y = rng.integers(0, 6, size=40)
    y[0] = 99
    got = retrieval.recall_at_k(x, y, ks=(1, 2, 4, 8), block_size=block_size)
    for k in (1, 2, 4, 8):
        assert got[k] == pytest.approx(brute_recall(x, y, k))
    assert retrieval.map_at_r(x, y, block_size=block_size) == pytest.approx(brute_map_at_r(x, y))


def test_neighbors_match_brute_force_order(rng):
    x = rng.standard_normal((30, 4)).astype(np.float32)
    np.testing.assert_array_equal(
        retrieval.nearest_neighbors(x, 29, block_size=8), brute_neighbors(x, None)
    )


def test_perfect_and_known_values():
    x = np.array([[0.0], [0.1], [5.0], [5.1]], np.float32)
    y = np.array([0, 0, 1, 1])
    assert retrieval.recall_at_k(x, y, ks=(1,)) == {1: 1.0}
    assert retrieval.map_at_r(x, y) == 1.0
    y_bad = np.array([0, 1, 0, 1])
    assert retrieval.recall_at_k(x, y_bad, ks=(1,)) == {1: 0.0}


def _geometric_nmi(y, clusters):
    """I(Y; C) / sqrt(H(Y) H(C)) from the contingency table (dissertation Sec. 5.4.3)."""
    _, yi = np.unique(y, return_inverse=True)
    _, ci = np.unique(clusters, return_inverse=True)
    joint = np.zeros((yi.max() + 1, ci.max() + 1))
    np.add.at(joint, (yi, ci), 1.0)
    joint /= joint.sum()
    py, pc = joint.sum(1), joint.sum(0)
    nz = joint > 0
    mutual = (joint[nz] * np.log(joint[nz] / np.outer(py, pc)[nz])).sum()
    entropy = lambda p: -(p[p > 0] * np.log(p[p > 0])).sum()  # noqa: E731
    return mutual / np.sqrt(entropy(py) * entropy(pc))


@pytest.mark.parametrize("init", ["k-means++-sklearn", "random"])
def test_nmi_is_the_geometric_nmi_of_seeded_kmeans(rng, init):
    """With scikit-learn's draws the clusters are scikit-learn's (the default pooled draws are
    another random stream: tested for quality in test_kmeans.py)."""
    x = rng.standard_normal((60, 5)).astype(np.float32) + np.repeat(np.eye(5)[:3] * 1.5, 20, 0)
    y = np.repeat(np.arange(3), 20)
    theirs = "k-means++" if init == "k-means++-sklearn" else init
    clusters = KMeans(n_clusters=3, n_init=1, random_state=7, init=theirs).fit_predict(x)
    expected = _geometric_nmi(y, clusters)
    assert retrieval.nmi(x, y, seed=7, init=init) == pytest.approx(expected, abs=1e-12)
    # Not sklearn's default (arithmetic) normalisation when the two entropies differ.
    arithmetic = normalized_mutual_info_score(y, clusters)
    if abs(arithmetic - expected) > 1e-9:
        assert retrieval.nmi(x, y, seed=7, init=init) != pytest.approx(arithmetic, abs=1e-9)


def test_nmi_runs_kmeans_on_one_blas_thread_and_restores_the_pool(rng):
    """The one-thread limit (k-means++ seeding's thread hand-off cost) is scoped to the fit:
    the caller's BLAS thread count is back afterwards, and the clusters equal an unlimited fit's
    (the 10 x 3 set is small enough that summation order cannot flip an assignment)."""
    import threadpoolctl

    x = rng.standard_normal((30, 4)).astype(np.float32) + np.repeat(np.eye(4)[:3] * 3, 10, 0)
    y = np.repeat(np.arange(3), 10)
    before = [p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]
    seen = []
    real_fit = KMeans.fit

    def spy(self, *args, **kwargs):
        info = threadpoolctl.threadpool_info()
        seen.extend(p["num_threads"] for p in info if p["user_api"] == "blas")
        return real_fit(self, *args, **kwargs)

    KMeans.fit = spy
    try:
        value = retrieval.nmi(x, y, seed=3, init="k-means++-sklearn")
    finally:
        KMeans.fit = real_fit
    assert seen and set(seen) == {1}
    after = [p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]
    assert after == before
    clusters = KMeans(n_clusters=3, n_init=1, random_state=3).fit_predict(x)
    assert value == pytest.approx(_geometric_nmi(y, clusters), abs=1e-12)


def _brute_first_positive_ranks(x, y):
    nbrs = brute_neighbors(x, y)
    out = []
    for i in range(len(y)):
        hits = np.flatnonzero(y[nbrs[i]] == y[i])
        out.append(hits[0] if len(hits) else -1)
    return np.array(out)


def _random_case(rng):
    n = int(rng.integers(3, 50))
    kind = rng.integers(3)
    if kind == 0:  # integer grid: many exact ties
        x = rng.integers(-2, 3, size=(n, int(rng.integers(1, 4)))).astype(np.float32)
    elif kind == 1:  # collapsed embedding: every distance tied
        x = np.ones((n, 3), np.float32)
    else:
        x = rng.standard_normal((n, 4)).astype(np.float32)
    y = rng.integers(0, int(rng.integers(1, 20)), size=n)
    return x, y


@pytest.mark.parametrize("list_size", [0, 1, 4, 512])
@pytest.mark.parametrize("bound_columns", [1, 3, 4096])
def test_metrics_match_brute_force_on_random_tied_and_collapsed_sets(
    rng, monkeypatch, bound_columns, list_size
):
    # A small column sample forces the MAP@R candidate bound to be loose (the SOP-scale path).
    monkeypatch.setattr(retrieval, "_BOUND_COLUMNS", bound_columns)
    # Neighbour lists (none, short ones that cover few questions, or everything) answer the
    # rank and MAP@R questions they cover; a full pass answers the rest.
    monkeypatch.setattr(retrieval, "_LIST_SIZE", list_size)
    for _ in range(40):
        x, y = _random_case(rng)
        if np.bincount(y).max() < 2:
            continue
        block = int(rng.integers(1, 9))
        np.testing.assert_array_equal(
            retrieval.first_positive_ranks(x, y, block_size=block),
            _brute_first_positive_ranks(x, y),
        )
        assert retrieval.map_at_r(x, y, block_size=block) == pytest.approx(
            brute_map_at_r(x, y), abs=1e-12
        )


def test_evaluate_retrieval_matches_the_references(rng):
    y = np.repeat(np.arange(8), 6)
    y[-1] = 99  # a single-image class: no positive, kept for NMI only
    x = rng.standard_normal((48, 6)).astype(np.float32) + 2.0 * np.eye(6)[y % 6]
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    out = retrieval.evaluate_retrieval(x, y, ks=(1, 4), seed=3, kmeans_init="k-means++-sklearn")
    for k in (1, 4):
        assert out[f"recall_at_{k}"] == pytest.approx(brute_recall(x, y, k), abs=1e-12)
    assert out["map_at_r"] == pytest.approx(brute_map_at_r(x, y), abs=1e-12)
    clusters = KMeans(n_clusters=9, n_init=1, random_state=3).fit_predict(x)
    assert out["nmi"] == pytest.approx(_geometric_nmi(y, clusters), abs=1e-12)
    singular = np.linalg.svd(x.astype(np.float64), compute_uv=False)
    assert out["s_mu"] == pytest.approx(singular.mean(), rel=1e-6)
    assert out["s_mu_lower"] == pytest.approx(np.sqrt(48) / 6)
    assert out["s_mu_upper"] == pytest.approx(np.sqrt(48 / 6))
    assert (out["num_queries"], out["num_embeddings"], out["num_classes"]) == (47, 48, 9)
    assert out["kmeans_converged"] and out["kmeans_iterations"] >= 1
    assert out["seconds"] >= out["seconds_neighbors"] > 0
    assert out["seconds_nmi"] >= out["seconds_kmeans_seeding"] + out["seconds_kmeans_lloyd"]


def test_default_nmi_is_within_sampling_error_of_scikit_learns(rng):
    """The default seeding (pooled draws) against scikit-learn's converged k-means++ NMI over
    seeds, on a set with 5 points per class like Stanford Online Products."""
    y = np.repeat(np.arange(80), 5)
    centres = rng.standard_normal((80, 16))
    x = (centres[y] + 0.5 * rng.standard_normal((400, 16))).astype(np.float32)
    ours = [retrieval.nmi(x, y, seed=s) for s in range(5)]
    theirs = [
        _geometric_nmi(y, KMeans(80, n_init=1, random_state=s).fit_predict(x)) for s in range(5)
    ]
    assert np.mean(ours) == pytest.approx(np.mean(theirs), abs=0.01)


def test_spectrum_of_the_cub_test_split_shape(rng):
    # Dissertation Fig. 3.9: CUB test b = 5924, d = 128 gives U = sqrt(5924 / 128) = 6.80.
    x = rng.standard_normal((5924, 128)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    y = np.arange(5924) % 100
    out = retrieval.evaluate_retrieval(x, y, compute_nmi=False, compute_map_at_r=False)
    assert round(out["s_mu_upper"], 2) == 6.80
    assert out["s_mu_lower"] == pytest.approx(np.sqrt(5924) / 128)
    assert out["s_mu_lower"] <= out["s_mu"] <= out["s_mu_upper"]
    assert "nmi" not in out and "map_at_r" not in out


def test_progress_bar(rng, capsys):
    x = rng.standard_normal((30, 3)).astype(np.float32)
    retrieval.evaluate_retrieval(x, np.arange(30) % 3, block_size=8, verbose=1)
    out = capsys.readouterr().out
    assert "30/30" in out and "k-means with 3 clusters" in out


def test_bad_input():
    with pytest.raises(ValueError, match=r"argument `labels`"):
        retrieval.recall_at_k(np.zeros((3, 2)), [0, 1])
    for labels in ([0.0, np.nan, np.nan], np.array([1.0, np.inf, 1.0]), np.array([0, None, 1])):
        with pytest.raises(ValueError, match=r"argument `labels`.*no NaN"):
            retrieval.recall_at_k(np.eye(3), labels)
    # A list mixing ints and strings would become strings (1 and "1" one class): refused.
    with pytest.raises(ValueError, match=r"argument `labels`.*one type.*mixed list"):
        retrieval.recall_at_k(np.eye(3), [1, "1", "a"])
    # String ids work; ties go to the smaller index, the lone "b" has no positive.
    assert retrieval.recall_at_k(np.eye(3), ["a", "a", "b"], ks=(1,)) == {1: 1.0}
    with pytest.raises(ValueError, match=r"argument `embeddings`.*finite"):
        retrieval.map_at_r(np.array([[np.nan, 0.0], [0.0, 0.0]]), [0, 0])
    for ks in ((0,), (1.5,), ("a",), (float("nan"),), (True,), ()):
        with pytest.raises(ValueError, match=r"argument `ks`"):
            retrieval.recall_at_k(np.zeros((3, 2)), [0, 0, 1], ks=ks)
    assert retrieval.recall_at_k(np.eye(3), [0, 0, 1], ks=[np.int64(2), 1, 2]).keys() == {1, 2}
    with pytest.raises(ValueError, match=r"argument `init`"):
        retrieval.nmi(np.zeros((3, 2)), [0, 0, 1], init="kmeans")
    with pytest.raises(ValueError, match=r"argument `compute_nmi`"):
        retrieval.evaluate_retrieval(np.zeros((3, 2)), [0, 0, 1], compute_nmi="yes")
    with pytest.raises(ValueError, match=r"argument `embeddings`.*at least 2 rows"):
        retrieval.evaluate_retrieval(np.zeros((1, 2)), [0])


def test_identical_rows_tie_whatever_the_block_size(rng):
    # BLAS rounds the same dot product differently by position; duplicates must still tie.
    v = rng.standard_normal((1, 128)).astype(np.float32)
    x = np.concatenate([np.tile(v, (60, 1)), rng.standard_normal((20, 128)).astype(np.float32)])
    y = np.arange(80) % 7
    expected = _brute_first_positive_ranks(x, y)
    for block in (1, 3, 1024):
        np.testing.assert_array_equal(
            retrieval.first_positive_ranks(x, y, block_size=block), expected
        )
        assert retrieval.map_at_r(x, y, block_size=block) == pytest.approx(
            brute_map_at_r(x, y), abs=1e-12
        )


def test_collapsed_rows_take_the_exact_per_row_path(rng, monkeypatch):
    monkeypatch.setattr(retrieval, "_count", lambda mask: np.full(len(mask), 10**9))
    x, y = np.ones((30, 2), np.float32), np.arange(30) % 4
    x[::5] = 0.0
    assert retrieval.map_at_r(x, y, block_size=7) == pytest.approx(brute_map_at_r(x, y))


def test_huge_values_are_refused():
    x = np.array([[1e20, 0], [1e20, 1], [0, 0], [0, 1]], np.float32)
    with pytest.raises(ValueError, match=r"argument `embeddings`.*fit in float32"):
        retrieval.map_at_r(x, [0, 0, 1, 1])


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def _printed(stream, monkeypatch, **kwargs):
    # A line at every block: the interval is what a slow scan would wait for.
    monkeypatch.setattr(retrieval, "_PROGRESS_SECONDS", 0.0, raising=False)
    x = np.random.default_rng(0).standard_normal((30, 3)).astype(np.float32)
    with contextlib.redirect_stdout(stream):
        retrieval.evaluate_retrieval(x, np.arange(30) % 3, block_size=8, **kwargs)
    return stream.getvalue()


def test_progress_to_a_log_is_plain_lines(monkeypatch):
    """`python -m benchmarks.retrieval_eval > log` filled the log with the Keras bar's carriage
    returns and colour codes: off a terminal, verbose=1 prints one plain line per interval."""
    out = _printed(io.StringIO(), monkeypatch, verbose=1)
    assert "\r" not in out and "\x1b" not in out and "\b" not in out
    lines = out.splitlines()
    assert [line.split(" queries")[0] for line in lines[:4]] == [
        "retrieval: 8/30",
        "retrieval: 16/30",
        "retrieval: 24/30",
        "retrieval: 30/30",
    ]
    assert lines[4].startswith("NMI: k-means with 3 clusters") and len(lines) == 5
    plain = _printed(_Terminal(), monkeypatch, verbose=2).splitlines()  # 2: plain anywhere
    assert [line.split(" queries")[0] for line in plain] == [
        line.split(" queries")[0] for line in lines
    ]


def test_progress_bar_on_a_terminal(monkeypatch):
    out = _printed(_Terminal(), monkeypatch, verbose=1)
    assert "\r" in out and "30/30" in out and "k-means with 3 clusters" in out
    assert _printed(io.StringIO(), monkeypatch, verbose=0) == ""
    for verbose in (3, "yes", True, 1.0):
        with pytest.raises(ValueError, match=r"argument `verbose`.*0, 1 or 2"):
            _printed(io.StringIO(), monkeypatch, verbose=verbose)


def test_embeddings_must_be_a_finite_number_matrix():
    with pytest.raises(ValueError, match=r"argument `embeddings`.*at least 1 column.*\(30, 0\)"):
        retrieval.evaluate_retrieval(np.zeros((30, 0)), np.arange(30) % 3)
    # NumPy would parse these strings into numbers: refused, they are not an embedding.
    with pytest.raises(ValueError, match=r"argument `embeddings`.*real numbers"):
        retrieval.recall_at_k(np.array([["1", "2"], ["3", "4"]]), [0, 0])
    with pytest.raises(ValueError, match=r"argument `embeddings`.*2-D"):
        retrieval.recall_at_k(np.zeros(4), [0, 0, 1, 1])
    with pytest.raises(ValueError, match=r"argument `embeddings`.*finite.*nan at \(1, 0\)"):
        retrieval.nearest_neighbors([[0.0, 1.0], [np.nan, 2.0]], 1)


def test_kmeans_settings_are_checked_before_the_scan(monkeypatch):
    monkeypatch.setattr(retrieval, "_scan", lambda *a, **k: pytest.fail("scanned first"))
    x, y = np.eye(4, dtype=np.float32), [0, 0, 1, 1]
    for settings, arg in (
        ({"seed": -1}, "seed"),
        ({"seed": 1.5}, "seed"),
        ({"kmeans_init": "kmeans"}, "init"),
        ({"kmeans_max_iter": 0}, "max_iter"),
    ):
        with pytest.raises(ValueError, match=rf"argument `{arg}`"):
            retrieval.evaluate_retrieval(x, y, **settings)


@pytest.mark.parametrize("cap_factor", [4, 1])
def test_neighbor_lists_hold_every_point_below_the_radius(rng, monkeypatch, cap_factor):
    """Against float64 brute force: each row lists distinct other points with their squared
    distances, every point it leaves out is at least the radius away (float32 rounding
    aside), about `size` of them and at most the cap (4x; 1x: about half the rows are
    crowded and take the radius of their cap-th nearest)."""
    monkeypatch.setattr(retrieval, "_LIST_CAP_FACTOR", cap_factor)
    x = rng.standard_normal((900, 8)).astype(np.float32)
    x[:40] = x[0]  # duplicates
    size = 30
    lists = retrieval.neighbor_lists(x, size=size, block_size=128)
    x64 = x.astype(np.float64)
    d2 = ((x64[:, None] - x64[None]) ** 2).sum(-1)
    counts = np.diff(lists.indptr)
    assert counts.max() <= cap_factor * size and size / 3 < counts.mean() < 3 * size
    tolerance = 1e-5 * d2.max()  # float32 expanded-form rounding
    for i in range(len(x)):
        listed = lists.indices[lists.indptr[i] : lists.indptr[i + 1]]
        assert i not in listed and len(set(listed)) == len(listed)
        np.testing.assert_allclose(
            lists.squared_distances[lists.indptr[i] : lists.indptr[i + 1]],
            d2[i, listed],
            atol=tolerance,
        )
        others = np.setdiff1d(np.arange(len(x)), np.append(listed, i))
        assert (d2[i, others] >= lists.radii[i] - tolerance).all()
        assert (d2[i, listed] < lists.radii[i] + tolerance).all()


def test_evaluate_retrieval_seeds_kmeans_from_its_scan_with_the_same_result(rng):
    """The scan hands its neighbour lists to the k-means++ seeding: most candidates' rows come
    from them, and the clusters (so the NMI) are those computed without lists, same seed."""
    y = np.repeat(np.arange(120), 5)
    x = rng.standard_normal((120, 16))[y] + 0.6 * rng.standard_normal((600, 16))
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    for seed in (0, 1):
        out = retrieval.evaluate_retrieval(
            x, y, seed=seed, neighbor_list_size=60, compute_spectrum=False
        )
        plain = retrieval.evaluate_retrieval(
            x, y, seed=seed, neighbor_list_size=0, compute_spectrum=False
        )
        assert out["kmeans_seeding_rows_from_neighbors"] > out["kmeans_seeding_rows_computed"]
        assert plain["kmeans_seeding_rows_from_neighbors"] == 0
        assert out["nmi"] == plain["nmi"] == retrieval.nmi(x, y, seed=seed)
        for key in ("recall_at_1", "recall_at_8", "map_at_r"):
            assert out[key] == plain[key]


def test_neighbor_list_size_is_checked():
    x, y = np.eye(4, dtype=np.float32), [0, 0, 1, 1]
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match=r"argument `neighbor_list_size`.*>= 0"):
            retrieval.evaluate_retrieval(x, y, neighbor_list_size=bad)
    with pytest.raises(ValueError, match=r"argument `size`"):
        retrieval.neighbor_lists(x, size=0)


def test_split_retrieval_results_puts_the_documented_metrics_apart_from_bookkeeping(rng):
    y = np.repeat(np.arange(5), 4)
    x = rng.standard_normal((20, 4)).astype(np.float32)
    out = retrieval.evaluate_retrieval(x, y, ks=(1, 8), seed=0)
    split = retrieval.split_retrieval_results(out)
    metric_names = {"recall_at_1", "recall_at_8", "map_at_r", "nmi", "s_mu"}
    assert set(split["metrics"]) == metric_names | {"s_mu_lower", "s_mu_upper"}
    assert {"num_queries", "num_embeddings", "num_classes", "seconds"} <= set(split["info"])
    assert not any(k.startswith(("recall", "map", "nmi", "s_mu")) for k in split["info"])
    assert {**split["metrics"], **split["info"]} == out  # nothing lost, nothing added


@pytest.mark.parametrize(
    "results, received",
    [
        (None, "<NoneType>"),
        ([("recall_at_1", 0.5)], "<list>"),
        ({1: 0.5, "nmi": 0.2}, "<mapping with the int key 1>"),
    ],
)
def test_split_retrieval_results_refuses_what_is_not_a_results_mapping(results, received):
    with pytest.raises(TypeError, match=r"argument `results`\. Expected a mapping") as error:
        retrieval.split_retrieval_results(results)
    assert f"Received: results='{received}'" in str(error.value)
