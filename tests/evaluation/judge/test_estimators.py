"""The estimators' standard errors against theory and simulation, and their edge cases."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from scipy.stats import norm

from evaluation.judge.estimators import (
    Clusters,
    Estimate,
    RateCounts,
    RateSample,
    SortedSample,
    compare,
    counted_rate,
    mean_summary,
    rate,
    ratio_summary,
    shared_clusters,
)
from evaluation.judge.sequential import few_clusters_factor, fixed_bound, mixture_bound


def each_alone(n: int) -> Clusters:
    """Requests read as independent: each in a window of its own, on one replica."""
    return Clusters(np.arange(n, dtype=np.int64), np.zeros(n, dtype=np.int64), n)


def by_window(window: np.ndarray, replica: np.ndarray | None = None) -> Clusters:
    window = window.astype(np.int64)
    replica = np.zeros(len(window), dtype=np.int64) if replica is None else replica
    return Clusters(window, replica.astype(np.int64), int(window.max()) + 1)


def independent_se(values: np.ndarray) -> float:
    """The standard error of the mean of independent values, by the textbook formula."""
    return float(np.std(values, ddof=1)) / math.sqrt(len(values))


def test_quantile_error_matches_the_asymptotic_formula() -> None:
    rng = np.random.default_rng(1)
    n, q, sigma = 20_000, 0.95, 0.5
    summary = SortedSample.of(rng.lognormal(0, sigma, n), each_alone(n)).quantile(q)
    # On the log scale the values are normal: se = sigma * sqrt(q (1 - q) / n) / phi(z_q).
    theory = sigma * math.sqrt(q * (1 - q) / n) / norm.pdf(norm.ppf(q))
    assert abs(summary.scaled - sigma * norm.ppf(q)) < 4 * theory
    assert 0.8 * theory < summary.se < 1.25 * theory


def test_arms_share_the_numbering_of_their_windows_and_replicas() -> None:
    first = (np.array(["a", "a", "b"]), np.array([100.0, 109.9, 125.0]), None)
    second = (np.array(["c", "b"]), np.array([101.0, 129.0]), None)
    one, two = shared_clusters([first, second])
    assert one.window[0] == one.window[1] == two.window[0]  # one 10 s window, any arm
    assert one.window[2] == two.window[1] != one.window[0]
    assert one.replica[2] == two.replica[1]  # replica b serves both arms
    assert len({one.replica[0], one.replica[2], two.replica[0]}) == 3
    (empty,) = shared_clusters([(np.array([], dtype=np.str_), np.array([]), None)])
    assert len(empty) == 0


def test_prompt_sizes_are_binned_on_the_pooled_deciles_with_unknown_sizes_apart() -> None:
    rng = np.random.default_rng(11)
    sizes = rng.integers(1, 5000, 3000)
    sizes[:100] = 0  # records of an older gateway
    names, ts = np.array(["r"] * 3000), np.arange(3000.0)
    one, two = shared_clusters(
        [(names[:1000], ts[:1000], sizes[:1000]), (names[1000:], ts[1000:], sizes[1000:])]
    )
    bins = np.concatenate([one.prompt_bin, two.prompt_bin])
    assert set(bins[:100].tolist()) == {0}
    counts = np.bincount(bins[100:], minlength=11)[1:]
    assert counts.min() > 250
    assert counts.max() < 330
    # Bins follow the requests they belong to when an arm is cut.
    assert one.prompt_bin is not None
    cut = one[np.arange(5)].prompt_bin
    assert cut is not None
    assert np.array_equal(cut, one.prompt_bin[:5])
    # Too few known sizes to adjust for: no bins at all.
    few = shared_clusters([(names[:500], ts[:500], sizes[:500])])[0]
    assert few.prompt_bin is None
    assert shared_clusters([(names[:2000], ts[:2000], None)])[0].prompt_bin is None


def prefill_arms(
    rng: np.random.Generator, n: int, *, slower: float = 1.0
) -> tuple[tuple[np.ndarray, Clusters], tuple[np.ndarray, Clusters]]:
    """Two arms whose TTFT is mostly their prompts' prefill: 2 ms plus 0.05 ms a token, times
    noise; the candidate `slower` by a factor."""
    sizes = []
    values = []
    for factor in (1.0, slower):
        size = np.round(rng.lognormal(np.log(400), 1.0, n)).astype(np.int64) + 1
        sizes.append(size)
        values.append(factor * (2 + 0.05 * size) * rng.lognormal(0, 0.3, n))
    numbered = shared_clusters(
        [(np.array([f"r{i % 4}" for i in range(n)]), np.arange(n) / 20.0, size) for size in sizes]
    )
    return (values[0], numbered[0]), (values[1], numbered[1])


@pytest.mark.parametrize("q", [0.5, 0.9])
def test_adjusting_for_prompt_size_narrows_the_error_and_keeps_the_estimate(q: float) -> None:
    rng = np.random.default_rng(12)
    plain, adjusted, errors = [], [], []
    for _ in range(60):
        (ref, ref_clusters), (cand, cand_clusters) = prefill_arms(rng, 3000, slower=1.2)
        reference = SortedSample.of(ref, ref_clusters).quantile(q)
        candidate = SortedSample.of(cand, cand_clusters).quantile(q)
        unadjusted = compare(reference, candidate)
        estimate = compare(reference, candidate, adjust=True)
        assert estimate.adjusted
        assert not unadjusted.adjusted
        plain.append(unadjusted.theta)
        adjusted.append(estimate.theta)
        errors.append((unadjusted.se, estimate.se))
    truth = math.log(1.2)
    # Both estimate the same difference (the adjustment has mean zero)...
    assert abs(np.mean(plain) - truth) < 0.02
    assert abs(np.mean(adjusted) - truth) < 0.02
    # ...the adjusted one with less spread, and an error that says so honestly.
    assert np.std(adjusted) < 0.8 * np.std(plain)
    se_plain, se_adjusted = np.mean(errors, axis=0)
    assert se_adjusted < 0.8 * se_plain
    assert 0.8 < se_adjusted / np.std(adjusted) < 1.25


def test_prompt_sizes_are_not_adjusted_for_in_small_arms_or_where_unknown() -> None:
    rng = np.random.default_rng(13)
    (ref, ref_clusters), (cand, cand_clusters) = prefill_arms(rng, 150)
    reference = mean_summary(ref, ref_clusters)
    estimate = compare(reference, mean_summary(cand, cand_clusters), adjust=True)
    assert not estimate.adjusted  # fewer than two bins of 100 in the smaller arm
    (ref, _), (cand, _) = prefill_arms(rng, 3000)
    estimate = compare(
        mean_summary(ref, each_alone(3000)), mean_summary(cand, each_alone(3000)), adjust=True
    )
    assert not estimate.adjusted


def test_a_replica_unlike_the_others_for_the_whole_window_widens_the_error() -> None:
    # Eight replicas, each slower or faster than the rest by its own constant offset, over 60
    # windows: nothing moves within a replica over time, so windows alone see little.
    rng = np.random.default_rng(6)
    replica = np.repeat(np.arange(8), 600)
    window = np.tile(np.repeat(np.arange(60), 10), 8)
    values = np.exp(rng.normal(0.0, 0.5, 8)[replica] + rng.normal(0.0, 1.0, len(replica)))
    windows_only = mean_summary(values, by_window(window)).se
    both = mean_summary(values, by_window(window, replica)).se
    assert both > 2 * windows_only


def test_a_drift_shared_within_windows_widens_the_error_to_what_the_mean_really_varies_by() -> None:
    rng = np.random.default_rng(3)
    means, clustered, independent = [], [], []
    window = np.repeat(np.arange(40), 50)
    for _ in range(300):
        values = rng.normal(0.0, 1.0, 40)[window] + rng.normal(0.0, 1.0, len(window)) + 10
        means.append(math.log(values.mean()))
        clustered.append(mean_summary(values, by_window(window)).se)
        independent.append(independent_se(values) / values.mean())
    spread = float(np.std(means))  # how much the estimate truly varies
    assert float(np.mean(independent)) < 0.3 * spread  # reading requests as independent...
    assert 0.85 * spread < float(np.mean(clustered)) < 1.2 * spread  # ...but not windows
    assert min(c / i for c, i in zip(clustered, independent, strict=True)) > 2


def test_a_burst_that_moves_both_arms_at_once_cancels_in_their_difference() -> None:
    # Both arms' latencies rise and fall together, window by window (a burst of traffic across
    # the fleet); each arm alone varies a lot, their difference hardly.
    rng = np.random.default_rng(8)
    window = np.repeat(np.arange(60), 20)
    differences, errors, apart = [], [], []
    for _ in range(200):
        load = rng.normal(0.0, 0.5, 60)[window]
        first = np.exp(3 + load + rng.normal(0.0, 0.3, len(window)))
        second = np.exp(3 + load + rng.normal(0.0, 0.3, len(window)))
        reference = mean_summary(first, by_window(window))
        candidate = mean_summary(second, by_window(window))
        estimate = compare(reference, candidate)
        differences.append(estimate.theta)
        errors.append(estimate.se)
        apart.append(math.hypot(reference.se, candidate.se))
    spread = float(np.std(differences))
    assert 0.85 * spread < float(np.mean(errors)) < 1.3 * spread
    assert float(np.mean(apart)) > 3 * spread  # as if the arms were independent: far too wide


def test_the_clustered_error_is_never_below_the_independent_one() -> None:
    rng = np.random.default_rng(4)
    ratios = []
    for _ in range(200):  # independent data in random windows: about equal, never below
        values = rng.normal(10.0, 1.0, 400)
        summary = mean_summary(values, by_window(rng.integers(0, 30, 400)))
        ratios.append(summary.se / (independent_se(values) / values.mean()))
    assert min(ratios) > 0.99  # (n - 1 / n: the textbook formula divides by n - 1)
    assert float(np.mean(ratios)) < 1.15  # no drift to find: it finds little
    # Windows whose requests cancel out (sums of zero) read as independent, not as certain.
    pairs = np.array([9.0, 11.0] * 50)
    paired = mean_summary(pairs, by_window(np.repeat(np.arange(50), 2)))
    assert paired.se == pytest.approx(independent_se(pairs) / 10, rel=0.01)
    assert paired.se > 0
    # One window has no spread between windows to read: the independent variance.
    alone = mean_summary(pairs, by_window(np.zeros(100)))
    assert alone.se == pytest.approx(independent_se(pairs) / 10, rel=0.01)


def test_means_ratios_quantiles_and_rates_all_read_the_clusters() -> None:
    rng = np.random.default_rng(5)
    window = np.repeat(np.arange(20), 100)
    values = rng.normal(0.0, 0.5, 20)[window] + rng.normal(0.0, 1.0, len(window))
    ids = by_window(window)
    latencies = np.exp(values / 4 + 3)
    alone = each_alone(len(values))
    assert mean_summary(latencies, ids).se > 2 * mean_summary(latencies, alone).se
    tokens = np.round(latencies)
    cost = tokens * np.exp(values / 4)  # the price per token drifts with the windows
    assert ratio_summary(cost, tokens, ids).se > 2 * ratio_summary(cost, tokens, alone).se
    assert (
        SortedSample.of(latencies, ids).quantile(0.5).se
        > 2 * SortedSample.of(latencies, alone).quantile(0.5).se
    )
    events = (values > 1.0).astype(np.float64)
    assert RateSample(events, ids).summary().se > 2 * RateSample(events, alone).summary().se


def test_rare_and_absent_events_still_have_an_error() -> None:
    none = rate(
        RateSample(np.zeros(1000), each_alone(1000)), RateSample(np.zeros(200), each_alone(200))
    )
    assert abs(none.theta) < 0.01
    assert none.se > 0
    empty = RateSample(np.zeros(0), each_alone(0))
    assert math.isnan(rate(empty, RateSample(np.ones(5), each_alone(5))).reference)
    counted = counted_rate(0, 0, 1, 5)
    assert math.isnan(counted.reference)
    assert counted.candidate == 0.2


def test_zero_means_and_missing_costs_are_not_compared() -> None:
    ids = each_alone(10)
    assert math.isnan(mean_summary(np.zeros(10), ids).scaled)
    assert math.isnan(ratio_summary(np.zeros(10), np.ones(10), ids).scaled)
    assert math.isnan(ratio_summary(np.ones(10), np.zeros(10), ids).scaled)


def test_the_rate_bound_is_the_root_of_the_arcsine_statistic_nearest_the_estimate() -> None:
    for sign, counts in (
        (1.0, RateCounts(100, 20_000, 72, 3600)),
        (1.0, RateCounts(2, 2000, 12, 400)),
        (-1.0, RateCounts(19_000, 20_000, 4250, 5000)),
    ):
        at_least = counts.harm_at_least(4.0, sign=sign)
        assert counts.statistic(at_least, sign=sign) == pytest.approx(4.0, abs=1e-4)
        # Every harm between it and the estimate is exceeded by less.
        observed = sign * (counts.events_candidate / counts.n_candidate)
        observed -= sign * (counts.events_reference / counts.n_reference)
        for harm in np.linspace(at_least, observed, 7)[1:]:
            assert counts.statistic(float(harm), sign=sign) < 4.0
    # Nothing is exceeded when the data say little: the least harm possible comes back.
    assert RateCounts(0, 500, 3, 400).harm_at_least(4.0, sign=1.0) == pytest.approx(-0.375 / 500.75)


def test_a_rate_well_past_its_margin_is_shown_so_where_the_wald_bound_is_not() -> None:
    # 2% errors on 1,200 requests against 0.5% on 20,000: the Wald error reads the candidate's
    # spread at 2%, and four of them reach below the 0.1-point margin; on the arcsine scale the
    # spread is that of the count whatever its level.
    reference, candidate = 100, 24
    counts = RateCounts(reference, 20_000, candidate, 1200)
    wald = math.sqrt(0.02 * 0.98 / 1200 + 0.005 * 0.995 / 20_000)
    assert 0.015 - 4 * wald < 0.001 < counts.harm_at_least(4.0, sign=1.0)
    # A design effect (dependent requests) widens it as it widens the Wald error.
    wider = RateCounts(reference, 20_000, candidate, 1200, design_effect=1.5)
    assert wider.harm_at_least(4.0, sign=1.0) < counts.harm_at_least(4.0, sign=1.0)


def test_a_rare_rate_at_its_margin_read_every_look_crosses_within_alpha() -> None:
    # The rollout's error rate exactly at its fail margin (0.5% -> 0.6%), read at every look of
    # the 5% and 25% steps (the reference pooled with the control), at the error rate's alpha.
    # A test that reads the spread at the margin (a score test) crosses here at about ten times
    # alpha: a handful of events is too skewed for a normal bound at alpha 0.001.
    rng = np.random.default_rng(20261202)
    alpha, margin, runs = 0.001, 0.001, 4000
    looks = [(20, 380)] * 15 + [(200, 600)] * 15  # requests per look: candidate, reference
    crossed = 0
    for _ in range(runs):
        events_c = events_r = 0.0
        n_c = n_r = 0
        for candidate, reference in looks:
            events_c += rng.binomial(candidate, 0.006)
            events_r += rng.binomial(reference, 0.005)
            n_c, n_r = n_c + candidate, n_r + reference
            if n_c < 200:
                continue
            counts = RateCounts(events_r, n_r, events_c, n_c)
            share_c, share_r = (events_c + 1) / (n_c + 2), (events_r + 1) / (n_r + 2)
            se = math.sqrt(share_c * (1 - share_c) / (n_c + 2) + share_r * (1 - share_r) / n_r)
            z = mixture_bound(se, alpha=alpha, scale=0.01) / se
            if counts.statistic(margin, sign=1.0) > z:
                crossed += 1
                break
    assert crossed <= alpha * runs


def persistent_replicas(rng: np.random.Generator, spread: float) -> Estimate:
    """An A/A difference of mean log-latencies over four replicas an arm, each replica off by
    its own offset (sd `spread`) for the whole comparison, over 60 windows."""
    names = [np.array([f"{arm}{i % 4}" for i in range(2000)]) for arm in "ab"]
    ts = np.arange(2000) / 3.3
    one, two = shared_clusters([(names[0], ts, None), (names[1], ts, None)])
    values = [
        np.exp(rng.normal(0, spread, 4)[np.arange(2000) % 4] + rng.normal(0, 0.3, 2000))
        for _ in range(2)
    ]
    return compare(mean_summary(values[0], one), mean_summary(values[1], two))


def test_the_replica_levels_share_sets_the_degrees_of_freedom() -> None:
    rng = np.random.default_rng(21)
    alike = [persistent_replicas(rng, 0.0).read()[1] for _ in range(20)]
    apart = [persistent_replicas(rng, 0.1).read()[1] for _ in range(20)]
    # Replicas alike: the replica level adds nothing, or mostly a sliver read with many
    # degrees of freedom.
    assert np.mean(np.array(alike) > 30) >= 0.75
    # Replicas apart: the replica level stands out, and the variance is read from eight
    # replicas of two arms, each arm's centred on its own mean: about six degrees of freedom.
    assert 5.5 <= np.median(apart) <= 6.5


def replicas_apart_in_a_tail(rng: np.random.Generator) -> tuple[Estimate, Estimate]:
    """An A/A difference of p95 log-latencies over four replicas an arm, 150 requests each,
    each replica off by its own offset (sd 0.1, as drift that lasts a 5% step) against a
    spread within a replica of 0.12 (TPOT's): the estimate as the judge reads it, and read with
    each replica's first-order contributions alone."""
    n = 600
    names = [np.array([f"{arm}{i % 4}" for i in range(n)]) for arm in "ab"]
    ts = np.arange(n) / 2.0
    one, two = shared_clusters([(names[0], ts, None), (names[1], ts, None)])
    values = [
        np.exp(rng.normal(0, 0.1, 4)[np.arange(n) % 4] + rng.normal(0, 0.12, n)) for _ in range(2)
    ]
    reference = SortedSample.of(values[0], one).quantile(0.95)
    candidate = SortedSample.of(values[1], two).quantile(0.95)
    first_order = compare(replace(reference, left_out=None), replace(candidate, left_out=None))
    return compare(reference, candidate), first_order


def test_a_tails_replica_level_is_read_at_its_size_where_replicas_drift_a_spread_apart() -> None:
    rng = np.random.default_rng(23)
    draws = [replicas_apart_in_a_tail(rng) for _ in range(300)]
    spread = float(np.std([judged.theta for judged, _ in draws]))

    def rms_se(which: int) -> float:
        return math.sqrt(float(np.mean([pair[which].se ** 2 for pair in draws])))

    # Leaving each replica out reads the p95's replica level as it is...
    assert 0.85 < rms_se(0) / spread < 1.15
    # ...where the first-order contributions, which only count a replica's requests above the
    # p95, read it about a quarter too small.
    assert rms_se(1) / spread < 0.8


def test_a_bound_widened_for_few_replicas_keeps_its_alpha_where_the_normal_one_does_not() -> None:
    # Four replicas an arm, persistently apart: the normal bound at alpha 0.01 is crossed about
    # three times as often as it should be; widened by Student's t at the variance's degrees of
    # freedom, at about its alpha.
    rng = np.random.default_rng(22)
    alpha, normal, widened, runs = 0.01, 0, 0, 3000
    for _ in range(runs):
        estimate = persistent_replicas(rng, 0.1)
        bound = fixed_bound(estimate.se, alpha=alpha)
        normal += estimate.theta > bound
        widened += estimate.theta > bound * few_clusters_factor(estimate.read()[1], alpha=alpha)
    assert normal / runs > 2 * alpha
    assert widened / runs < 1.5 * alpha


def test_a_quantiles_replica_level_is_read_after_the_prompt_adjustment() -> None:
    # Each replica is sent prompts of its own range (a router that pins long contexts to some
    # hosts), and TTFT is the prompt's prefill alone: the replicas differ only by their prompts,
    # which the adjustment accounts for. Left out one at a time, each replica moves its arm's
    # mix of prompts too, so the adjusted replica level is a fraction of the raw one.
    rng = np.random.default_rng(25)
    n = 2000
    replica = np.arange(n) % 4
    names = [np.array([f"{arm}{r}" for r in replica]) for arm in "ab"]
    ts = np.arange(n) / 5.0
    prompts = [rng.integers(100 + 400 * replica, 500 + 400 * replica) for _ in range(2)]
    one, two = shared_clusters([(names[0], ts, prompts[0]), (names[1], ts, prompts[1])])
    ttft = [0.05 * p * rng.lognormal(0, 0.1, n) for p in prompts]
    reference = SortedSample.of(ttft[0], one).quantile(0.5)
    candidate = SortedSample.of(ttft[1], two).quantile(0.5)
    raw = compare(reference, candidate).replica_level
    adjusted = compare(reference, candidate, adjust=True)
    assert adjusted.adjusted
    assert raw is not None
    assert adjusted.replica_level is not None
    assert adjusted.replica_level.by_replica < raw.by_replica / 4
