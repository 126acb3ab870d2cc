"""The estimators' standard errors against theory and simulation, and their edge cases."""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import norm

from evaluation.judge.estimators import (
    RateSample,
    SortedSample,
    cluster_ids,
    counted_rate,
    mean_summary,
    rate,
    ratio_summary,
    variance_of_mean,
)


def each_alone(n: int) -> np.ndarray:
    """Clusters of one request each: requests read as independent."""
    return np.arange(n, dtype=np.int64)


def independent_variance(centred: np.ndarray) -> float:
    """The variance of the mean of independent values (centred), by the textbook formula."""
    return float(centred @ centred) / len(centred) ** 2


def drifting(
    rng: np.random.Generator, *, clusters: int, size: int, drift: float
) -> tuple[np.ndarray, np.ndarray]:
    """Values whose clusters share an offset of spread `drift` (plus independent noise of 1)."""
    ids = np.repeat(np.arange(clusters, dtype=np.int64), size)
    values = rng.normal(0.0, drift, clusters)[ids] + rng.normal(0.0, 1.0, clusters * size)
    return values, ids


def test_quantile_error_matches_the_asymptotic_formula() -> None:
    rng = np.random.default_rng(1)
    n, q, sigma = 20_000, 0.95, 0.5
    summary = SortedSample.of(rng.lognormal(0, sigma, n), each_alone(n)).quantile(q)
    # On the log scale the values are normal: se = sigma * sqrt(q (1 - q) / n) / phi(z_q).
    theory = sigma * math.sqrt(q * (1 - q) / n) / norm.pdf(norm.ppf(q))
    assert abs(summary.scaled - sigma * norm.ppf(q)) < 4 * theory
    assert 0.8 * theory < summary.se < 1.25 * theory


def test_it_gives_each_request_its_replica_and_10_s_window_and_its_replica() -> None:
    replica = np.array(["a", "a", "b", "a", "b", "a"])
    ts = np.array([100.0, 109.9, 105.0, 110.0, 101.0, 135.0])
    ids = cluster_ids(replica, ts)
    assert ids.shape == (6, 2)
    windows, replicas = ids[:, 0].tolist(), ids[:, 1].tolist()
    assert windows[0] == windows[1]  # one replica within 10 s
    assert windows[2] == windows[4]
    assert len({windows[0], windows[2], windows[3], windows[5]}) == 4  # another replica or window
    assert replicas[0] == replicas[1] == replicas[3] == replicas[5] != replicas[2] == replicas[4]
    assert cluster_ids(np.array([], dtype=np.str_), np.array([])).shape == (0, 2)


def test_a_replica_unlike_the_others_for_the_whole_window_widens_the_error() -> None:
    # Eight replicas, each slower or faster than the rest by its own constant offset, for
    # 60 windows: no drift within a replica, so windows alone see little.
    rng = np.random.default_rng(6)
    replica = np.repeat(np.arange(8), 600)
    window = np.tile(np.repeat(np.arange(60), 10), 8)
    values = rng.normal(0.0, 0.5, 8)[replica] + rng.normal(0.0, 1.0, len(replica))
    centred = values - values.mean()
    by_window = variance_of_mean(centred, window + 60 * replica)
    both = variance_of_mean(centred, np.stack([window + 60 * replica, replica]).T)
    assert both > 5 * by_window
    assert both == variance_of_mean(centred, replica)  # the larger level is the one used


def test_a_drift_shared_within_clusters_widens_the_error_to_what_the_mean_really_varies_by() -> (
    None
):
    rng = np.random.default_rng(3)
    means, clustered, independent = [], [], []
    for _ in range(300):
        values, ids = drifting(rng, clusters=40, size=50, drift=1.0)
        centred = values - values.mean()
        means.append(values.mean())
        clustered.append(math.sqrt(variance_of_mean(centred, ids)))
        independent.append(math.sqrt(independent_variance(centred)))
    spread = float(np.std(means))  # how much the mean of such a sample truly varies
    assert float(np.mean(independent)) < 0.3 * spread  # reading requests as independent...
    assert 0.85 * spread < float(np.mean(clustered)) < 1.2 * spread  # ...but not clusters
    assert min(c / i for c, i in zip(clustered, independent, strict=True)) > 2


def test_the_clustered_error_is_never_below_the_independent_one() -> None:
    rng = np.random.default_rng(4)
    ratios = []
    for _ in range(200):  # independent data in random clusters: about equal, never below
        values = rng.normal(0.0, 1.0, 400)
        ids = rng.integers(0, 30, 400)
        centred = values - values.mean()
        ratios.append(variance_of_mean(centred, ids) / independent_variance(centred))
    assert min(ratios) >= 1
    assert float(np.mean(ratios)) < 1.3  # no drift to find: it finds little
    # Clusters whose requests cancel out (sums of zero) read as independent, not as certain.
    pairs = np.array([1.0, -1.0] * 50)
    ids = np.repeat(np.arange(50, dtype=np.int64), 2)
    assert variance_of_mean(pairs, ids) == independent_variance(pairs) > 0
    # One cluster has no spread between clusters to read: the independent variance.
    assert variance_of_mean(pairs, np.zeros(100, dtype=np.int64)) == independent_variance(pairs)


def test_means_ratios_quantiles_and_rates_all_read_the_clusters() -> None:
    rng = np.random.default_rng(5)
    values, ids = drifting(rng, clusters=20, size=100, drift=0.5)
    latencies = np.exp(values / 4 + 3)
    alone = each_alone(len(values))
    assert mean_summary(latencies, ids).se > 2 * mean_summary(latencies, alone).se
    tokens = np.round(latencies)
    cost = tokens * np.exp(values / 4)  # the price per token drifts with the clusters
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
