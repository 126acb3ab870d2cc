"""The rollback bound holds under continuous monitoring; a fixed-sample bound does not."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evaluation.judge.sequential import few_clusters_factor, fixed_bound, mixture_bound


def crossing_rate(bound_of: object, *, alpha: float, paths: int, looks: int) -> float:
    """Share of null random walks (no true difference) whose running mean ever exceeds the
    bound, looked at after every sample."""
    rng = np.random.default_rng(11)
    steps = rng.standard_normal((paths, looks))
    n = np.arange(1, looks + 1)
    means = np.cumsum(steps, axis=1) / n
    se = 1 / np.sqrt(n)
    bounds = np.array([bound_of(s, alpha) for s in se])  # type: ignore[operator]
    return float((means > bounds).any(axis=1).mean())


def test_looking_after_every_sample_keeps_false_crossings_under_alpha() -> None:
    rate = crossing_rate(
        lambda se, a: mixture_bound(se, alpha=a, scale=0.2), alpha=0.05, paths=4000, looks=1000
    )
    assert rate <= 0.05


def test_the_same_looks_against_a_fixed_sample_bound_cross_far_more_often() -> None:
    # What the mixture bound protects against: the check above could fail.
    rate = crossing_rate(lambda se, a: fixed_bound(se, alpha=a), alpha=0.05, paths=4000, looks=1000)
    assert rate > 0.2


def test_the_bound_is_wider_than_a_single_look_and_grows_slowly_with_samples() -> None:
    for se in (0.1, 0.01, 0.001):
        assert mixture_bound(se, alpha=0.01, scale=0.1) > fixed_bound(se, alpha=0.01)
    # In standard errors it grows like sqrt(log n): a thousand times more samples cost well
    # under twice the multiplier.
    near = mixture_bound(0.05, alpha=0.01, scale=0.1) / 0.05
    far = mixture_bound(0.05 / math.sqrt(1000), alpha=0.01, scale=0.1) / (0.05 / math.sqrt(1000))
    assert near < far < 2 * near


def test_a_smaller_alpha_gives_a_wider_bound() -> None:
    assert mixture_bound(0.02, alpha=0.001, scale=0.1) > mixture_bound(0.02, alpha=0.01, scale=0.1)


def test_degenerate_errors() -> None:
    assert mixture_bound(0.0, alpha=0.01, scale=0.1) == 0.0
    assert mixture_bound(math.inf, alpha=0.01, scale=0.1) == math.inf
    with pytest.raises(ValueError, match="alpha"):
        mixture_bound(0.1, alpha=1.5, scale=0.1)


def test_a_variance_read_with_few_degrees_of_freedom_widens_a_small_alpha_most() -> None:
    assert few_clusters_factor(math.inf, alpha=1e-4) == 1.0
    tight = few_clusters_factor(8, alpha=2e-4)
    assert tight * fixed_bound(1.0, alpha=2e-4) == pytest.approx(5.81, abs=0.01)  # t, 8 df
    assert few_clusters_factor(8, alpha=0.05) < 1.15 < tight
    widths = [few_clusters_factor(df, alpha=2e-4) for df in (4, 8, 30, 300)]
    assert widths == sorted(widths, reverse=True)
    assert widths[-1] < 1.02
