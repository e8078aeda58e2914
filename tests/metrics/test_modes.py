"""`tf_svmax.metrics.mode_coverage` on hand-built point sets (VEEGAN's counting)."""

import numpy as np
import pytest
from scipy import stats

from tf_svmax.data import gaussian_ring
from tf_svmax.metrics import mode_coverage

CENTRES = gaussian_ring(8, 2.0)
STD = 0.02


def _around(mode, count, rng, scale=STD):
    return CENTRES[mode] + scale * rng.standard_normal((count, 2)).clip(-1.5, 1.5)


def test_every_mode_equally(rng):
    points = np.concatenate([_around(m, 400, rng) for m in range(8)])
    out = mode_coverage(points, CENTRES, STD)
    assert out["modes_covered"] == 8 and out["num_modes"] == 8
    assert out["high_quality_fraction"] == 1.0  # every point within 1.5 * sqrt(2) sigma
    assert out["mode_kl"] == pytest.approx(0.0, abs=1e-12)
    assert out["mode_counts"] == [400] * 8


def test_one_mode_is_a_collapse(rng):
    out = mode_coverage(_around(3, 2500, rng), CENTRES, STD)
    assert out["modes_covered"] == 1 and out["mode_counts"][3] == 2500
    assert out["mode_kl"] == pytest.approx(np.log(8))


def test_off_ring_noise_has_no_high_quality_point(rng):
    # Inside the ring: at least 2 - 0.3 from every centre, far beyond 3 sigma = 0.06.
    points = rng.uniform(-0.3, 0.3, (1000, 2))
    out = mode_coverage(points, CENTRES, STD)
    assert out["modes_covered"] == 0 and out["high_quality_fraction"] == 0.0
    assert np.isnan(out["mode_kl"])


def test_kl_is_scipys_against_uniform(rng):
    counts = [300, 100, 0, 50, 50, 500, 10, 0]
    points = np.concatenate([_around(m, c, rng) for m, c in enumerate(counts) if c])
    noise = rng.uniform(-0.5, 0.5, (90, 2))  # low-quality points lower the fraction only
    out = mode_coverage(np.concatenate([points, noise]), CENTRES, STD)
    p = np.array(counts) / sum(counts)
    assert out["mode_kl"] == pytest.approx(stats.entropy(p, np.full(8, 1 / 8)), rel=1e-12)
    assert out["high_quality_fraction"] == pytest.approx(sum(counts) / (sum(counts) + 90))
    # 1 % of 1,100 points is 11: the mode with 10 high-quality points is not covered.
    assert out["modes_covered"] == 5


@pytest.mark.parametrize("held, covered", [(25, 2), (24, 1)])
def test_one_percent_boundary(rng, held, covered):
    """2,500 points: mode 1 is covered with 25 high-quality points (1 %), not with 24."""
    points = np.concatenate(
        [_around(0, 2000, rng), _around(1, held, rng), rng.uniform(-0.3, 0.3, (500 - held, 2))]
    )
    assert mode_coverage(points, CENTRES, STD)["modes_covered"] == covered


def test_three_sigma_boundary():
    direction = np.array([np.cos(0.3), np.sin(0.3)])
    inside = CENTRES[2] + 2.999 * STD * direction
    outside = CENTRES[2] + 3.001 * STD * direction
    out = mode_coverage(np.stack([inside, outside]), CENTRES, STD)
    assert out["mode_counts"][2] == 1 and out["high_quality_fraction"] == 0.5


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match=r"argument `points`"):
        mode_coverage(np.zeros((0, 2)), CENTRES, STD)
    with pytest.raises(ValueError, match=r"argument `points`"):
        mode_coverage(np.full((3, 2), np.nan), CENTRES, STD)
    with pytest.raises(ValueError, match=r"argument `centres`.*\[m, 2\]"):
        mode_coverage(np.zeros((3, 2)), np.zeros((8, 3)), STD)
    with pytest.raises(ValueError, match=r"argument `std`"):
        mode_coverage(np.zeros((3, 2)), CENTRES, 0.0)
    with pytest.raises(ValueError, match=r"argument `min_share`"):
        mode_coverage(np.zeros((3, 2)), CENTRES, STD, min_share=1.5)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_centres_are_refused(rng, bad):
    """A NaN centre was counted as a ninth mode (KL NaN) and an inf centre as an uncovered one
    (7 of 8): neither is a mixture's mode."""
    points = np.concatenate([_around(m, 10, rng) for m in range(8)])
    centres = CENTRES.copy()
    centres[0, 1] = bad
    with pytest.raises(ValueError, match=r"argument `centres`.*finite.*at \(0, 1\)"):
        mode_coverage(points, centres, STD)


def test_points_must_be_numbers():
    """Strings are refused, also those NumPy would parse ("1.5" is not a generated point)."""
    for points in (np.array([["a", "b"]]), np.array([["1.5", "2"]]), [[0.0, None]]):
        with pytest.raises(ValueError, match=r"argument `points`.*real numbers"):
            mode_coverage(points, CENTRES, STD)
    with pytest.raises(ValueError, match=r"argument `centres`.*real numbers"):
        mode_coverage(np.zeros((3, 2)), CENTRES.astype(str), STD)


def test_weighted_kl_is_scipys_against_the_weights(rng):
    weights = np.array([0.30, 0.02, 0.10, 0.05, 0.25, 0.08, 0.12, 0.08])
    counts = [300, 10, 100, 50, 250, 80, 120, 90]
    points = np.concatenate([_around(m, c, rng) for m, c in enumerate(counts)])
    out = mode_coverage(points, CENTRES, STD, weights=weights)
    p = np.array(counts) / sum(counts)
    assert out["mode_kl"] == pytest.approx(stats.entropy(p, weights), rel=1e-12)
    assert out["mode_kl"] < mode_coverage(points, CENTRES, STD)["mode_kl"]  # closer to weights
    # Weights are normalised: proportional weights give the same KL.
    scaled = mode_coverage(points, CENTRES, STD, weights=3 * weights)
    assert scaled["mode_kl"] == pytest.approx(out["mode_kl"], rel=1e-12)


def test_points_on_a_zero_weight_mode_give_an_infinite_kl(rng):
    weights = np.array([0.5, 0.5, 0, 0, 0, 0, 0, 0])
    points = np.concatenate([_around(0, 100, rng), _around(2, 100, rng)])
    assert mode_coverage(points, CENTRES, STD, weights=weights)["mode_kl"] == np.inf


@pytest.mark.parametrize("weights", [np.full(7, 1 / 7), -np.ones(8), np.zeros(8)])
def test_bad_weights_are_named(rng, weights):
    with pytest.raises(ValueError, match=r"`weights`"):
        mode_coverage(_around(0, 10, rng), CENTRES, STD, weights=weights)
