"""The estimators' standard errors against theory, and their edge cases."""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import norm

from evaluation.judge.estimators import (
    SortedSample,
    mean_summary,
    rate,
    ratio_summary,
    shift,
    stratum_weights,
)


def test_quantile_error_matches_the_asymptotic_formula() -> None:
    rng = np.random.default_rng(1)
    n, q, sigma = 20_000, 0.95, 0.5
    summary = SortedSample.of(rng.lognormal(0, sigma, n)).quantile(q)
    # On the log scale the values are normal: se = sigma * sqrt(q (1 - q) / n) / phi(z_q).
    theory = sigma * math.sqrt(q * (1 - q) / n) / norm.pdf(norm.ppf(q))
    assert abs(summary.scaled - sigma * norm.ppf(q)) < 4 * theory
    assert 0.8 * theory < summary.se < 1.25 * theory


def test_equal_weights_give_the_unweighted_quantile() -> None:
    values = np.random.default_rng(2).lognormal(0, 1, 999)
    plain = SortedSample.of(values).quantile(0.5)
    weighted = SortedSample.of(values, np.full(999, 3.0)).quantile(0.5)
    assert plain.scaled == weighted.scaled
    assert math.isclose(plain.se, weighted.se)


def test_rare_and_absent_events_still_have_an_error() -> None:
    none = rate(0, 1000, 0, 200)
    assert abs(none.theta) < 0.01
    assert none.se > 0
    assert math.isnan(rate(0, 0, 1, 5).reference)


def test_rank_shift_with_ties_and_without_a_difference() -> None:
    rng = np.random.default_rng(3)
    capped_a = np.minimum(rng.integers(1, 300, 4000), 128).astype(float)
    capped_b = np.minimum(rng.integers(1, 300, 4000), 128).astype(float)
    same = shift(capped_a, capped_b)
    assert abs(same.theta) < 3 * same.se
    longer = shift(capped_a, np.minimum(capped_b * 1.5, 128))
    assert longer.theta > 5 * longer.se
    constant = shift(np.full(50, 7.0), np.full(50, 7.0))
    assert constant.theta == 0
    assert constant.se == 0


def test_zero_means_and_missing_costs_are_not_compared() -> None:
    assert math.isnan(mean_summary(np.zeros(10), None).scaled)
    assert math.isnan(ratio_summary(np.zeros(10), np.ones(10)).scaled)
    assert math.isnan(ratio_summary(np.ones(10), np.zeros(10)).scaled)


def test_strata_reweight_the_reference_to_the_candidates_mix() -> None:
    reference = np.array([1] * 900 + [2] * 100 + [3] * 5)
    candidate = np.array([1] * 100 + [2] * 100 + [4] * 50)
    weights = stratum_weights(reference, candidate, min_stratum=10)
    # Stratum 3 (5 requests) and 4 (candidate only) are left out.
    assert weights.cover_reference == 1000 / 1005
    assert weights.cover_candidate == 200 / 250
    share_of_one = weights.reference[reference == 1].sum() / weights.reference.sum()
    assert math.isclose(share_of_one, 0.5)
    assert weights.reference[reference == 3].sum() == 0
