"""Differences between two arms with standard errors that hold when requests are not independent.

Each estimator returns the difference on the scale it is tested on (the log of a ratio for
quantiles, means and cost ratios; points for rates) and a standard error from the estimator's
influence function: each request's contribution to the estimate, to first order. Requests are
not independent: latency drifts together over seconds (load, batch composition, a neighbour's
job) and differs by replica (a slow host, a noisy neighbour, for the whole rollout). So the
contributions are summed within clusters and the variance is read from the cluster sums (the
cluster-robust, or sandwich, variance) at two levels: one replica over one `WINDOW_S` window
(drift), and one replica over the whole window (a replica unlike the others, which the judge
must take for chance, not for the model). The larger of the two is used, and never less than the
variance under independence: correlation that happens to be negative in a sample is noise, not
information. Nothing here
resamples: the engine judges every live rollout every 2 s over tens of thousands of requests, and
these cost a sort and a few sums.

Quantiles read their density from the order statistics (the values at ranks n*q -/+ 2
sqrt(n*q*(1-q))), which needs no kernel and stays honest on heavy tails.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
# Latencies are compared on the log scale; a recorded 0 ms would be -inf there.
_FLOOR = 1e-6
# Requests of one replica within this many seconds form one cluster. Drift that outlasts it
# shows up as a difference between neighbouring clusters; ten seconds holds a few hundred
# requests of a busy arm and a handful of a 5% canary's.
WINDOW_S = 10.0
# A level of clustering counts from this many clusters (an arm on fewer replicas is read for
# drift by its windows alone).
MIN_CLUSTERS = 4


@dataclass(frozen=True)
class Estimate:
    reference: float  # on the natural scale (ms, tokens, dollars, share)
    candidate: float
    theta: float  # the difference on the tested scale
    se: float
    n_reference: int
    n_candidate: int


@dataclass(frozen=True)
class Summary:
    """One arm's estimate of a statistic, on the tested scale, with its standard error."""

    value: float  # natural scale
    scaled: float  # tested scale
    se: float
    n: int


def cluster_ids(replica: npt.NDArray[np.str_], ts: Floats) -> Ints:
    """Two small integers per request, for `variance_of_mean`: its (replica, time window)
    cluster, and its replica."""
    if len(ts) == 0:
        return np.empty((0, 2), dtype=np.int64)
    _, replica_code = np.unique(replica, return_inverse=True)
    window = np.floor((ts - ts.min()) / WINDOW_S).astype(np.int64)
    keys = replica_code.astype(np.int64) * (int(window.max()) + 1) + window
    _, ids = np.unique(keys, return_inverse=True)
    clusters: Ints = np.stack([ids, replica_code]).T.astype(np.int64)
    return clusters


def variance_of_mean(contributions: Floats, clusters: Ints) -> float:
    """The variance of mean(contributions), contributions centred: cluster-robust with the usual
    G / (G - 1) correction at each level of `clusters` (one column a level, or one level as a
    1-D array), the largest of them, and at least the variance under independence."""
    n = len(contributions)
    if n == 0:
        return math.nan
    variance = float(np.dot(contributions, contributions)) / (n * n)
    levels = clusters.reshape(n, -1)
    for level in range(levels.shape[1]):
        ids = levels[:, level]
        sums = np.bincount(ids, weights=contributions)
        groups = int(np.count_nonzero(np.bincount(ids)))
        # Two or three clusters give one or two degrees of freedom: an estimate that noisy, and
        # doubled by the correction, says more about chance than about how replicas differ.
        if groups >= MIN_CLUSTERS:
            clustered = float(np.dot(sums, sums)) / (n * n) * groups / (groups - 1)
            variance = max(variance, clustered)
    return variance


@dataclass(frozen=True)
class SortedSample:
    """One arm's values of a column on the log scale, sorted once, so that every quantile of
    that column in one judge call costs a binary search."""

    logs: Floats  # in the arm's order, for the contributions
    ordered: Floats
    clusters: Ints

    @classmethod
    def of(cls, values: Floats, clusters: Ints) -> SortedSample:
        logs = np.log(np.maximum(values, _FLOOR))
        return cls(logs, np.sort(logs), clusters)

    def at(self, p: float) -> float:
        n = len(self.ordered)
        index = math.ceil(min(max(p, 0.0), 1.0) * n) - 1
        return float(self.ordered[min(max(index, 0), n - 1)])

    def quantile(self, q: float) -> Summary:
        """The q-quantile on the log scale. Its influence is (q - 1{y <= Q}) / f(Q), with
        1 / f(Q) read from the order statistics at q -/+ 2 sqrt(q (1 - q) / n) (a z = 2 span:
        a narrower one reads fewer order statistics, and in a lumpy tail its width swings from
        look to look, which looking every tick then finds)."""
        n = len(self.ordered)
        half = 2 * math.sqrt(q * (1 - q) / n)
        scaled = self.at(q)
        inverse_density = (self.at(q + half) - self.at(q - half)) / (2 * half)
        below = (self.logs <= scaled).astype(np.float64)
        variance = variance_of_mean(below - float(below.mean()), self.clusters)
        return Summary(math.exp(scaled), scaled, math.sqrt(variance) * inverse_density, n)


def mean_summary(values: Floats, clusters: Ints) -> Summary:
    """The mean on the log scale (the delta method: se(log m) = se(m) / m)."""
    n = len(values)
    mean = float(values.mean())
    if mean <= 0:
        return Summary(mean, math.nan, math.nan, n)
    variance = variance_of_mean(values - mean, clusters) * n / max(n - 1, 1)
    return Summary(mean, math.log(mean), math.sqrt(variance) / mean, n)


def ratio_summary(numerator: Floats, denominator: Floats, clusters: Ints) -> Summary:
    """sum(numerator) / sum(denominator) on the log scale (dollars per token), by the delta
    method for a ratio of means."""
    n = len(numerator)
    total = float(denominator.sum())
    if n == 0 or total <= 0 or float(numerator.sum()) <= 0:
        return Summary(math.nan, math.nan, math.nan, n)
    ratio = float(numerator.sum()) / total
    # The contribution of a request to log(ratio), to first order.
    contributions = (numerator - ratio * denominator) / (ratio * total / n)
    variance = variance_of_mean(contributions, clusters)
    return Summary(ratio, math.log(ratio), math.sqrt(variance), n)


def compare(reference: Summary, candidate: Summary) -> Estimate:
    """The arms are independent of each other (their requests are assigned at random by
    session, and run on their own replicas), so their variances add."""
    return Estimate(
        reference=reference.value,
        candidate=candidate.value,
        theta=candidate.scaled - reference.scaled,
        se=math.hypot(reference.se, candidate.se),
        n_reference=reference.n,
        n_candidate=candidate.n,
    )


@dataclass(frozen=True)
class RateSample:
    """One arm's events among its eligible requests, with the clusters of those requests."""

    events: Floats  # 1.0 for an event, 0.0 otherwise, one per eligible request
    clusters: Ints

    def summary(self) -> Summary:
        """The share, with one success and one failure added (Agresti-Caffo), which keeps its
        error honest when events are rare or absent."""
        n = len(self.events)
        count = float(self.events.sum())
        adjusted = (count + 1) / (n + 2)
        variance = adjusted * (1 - adjusted) / (n + 2)
        if n > 1:
            clustered = variance_of_mean(self.events - count / n, self.clusters)
            variance = max(variance, clustered)
        return Summary(count / n if n else math.nan, adjusted, math.sqrt(variance), n)


def rate(reference: RateSample, candidate: RateSample) -> Estimate:
    """A difference of two shares, in points."""
    ref, cand = reference.summary(), candidate.summary()
    return Estimate(
        reference=ref.value,
        candidate=cand.value,
        theta=cand.scaled - ref.scaled,
        se=math.hypot(ref.se, cand.se),
        n_reference=ref.n,
        n_candidate=cand.n,
    )


def counted_rate(
    reference_events: int, reference_n: int, candidate_events: int, candidate_n: int
) -> Estimate:
    """A difference of two shares known only as counts (user feedback): independent requests."""

    def sample(events: int, n: int) -> RateSample:
        flags = np.zeros(n, dtype=np.float64)
        flags[:events] = 1.0
        return RateSample(flags, np.arange(n, dtype=np.int64))

    return rate(sample(reference_events, reference_n), sample(candidate_events, candidate_n))
