"""Differences between two arms with their standard errors, cheap enough for every tick.

Each estimator returns the difference on the scale it is tested on (the log of a ratio for
quantiles, means and cost ratios; points for rates and the rank shift) and a standard error from
asymptotic theory, not from resampling: the engine judges every live rollout every 2 s over tens
of thousands of requests, and a 2,000-resample bootstrap would cost seconds where these cost a few
sorts. Quantile errors come from the distribution-free order-statistic interval (the values at
ranks n*q -/+ 2 sqrt(n*q*(1-q))), which needs no density estimate and stays honest on heavy tails.

Weights carry the stratum adjustment: the reference arm is reweighted to the candidate's mix of
concurrency and prompt-length strata, and the effective sample size (Kish) replaces n.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.stats import rankdata

Floats = npt.NDArray[np.float64]
# Latencies are compared on the log scale; a recorded 0 ms would be -inf there.
_FLOOR = 1e-6


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


def _effective_n(weights: Floats) -> float:
    total = float(weights.sum())
    return total * total / float(np.square(weights).sum())


@dataclass(frozen=True)
class SortedSample:
    """One arm's values of a column on the log scale, sorted once, so that every quantile of
    that column in one judge call costs a binary search."""

    ordered: Floats
    cumulative: Floats | None  # normalised cumulative weights; None when all weigh the same
    n_eff: float

    @classmethod
    def of(cls, values: Floats, weights: Floats | None = None) -> SortedSample:
        logs = np.log(np.maximum(values, _FLOOR))
        if weights is None:
            return cls(np.sort(logs), None, float(len(logs)))
        order = np.argsort(logs)
        cumulative = np.cumsum(weights[order])
        cumulative /= cumulative[-1]
        return cls(logs[order], cumulative, _effective_n(weights))

    def at(self, p: float) -> float:
        n = len(self.ordered)
        p = min(max(p, 0.0), 1.0)
        if self.cumulative is None:
            index = math.ceil(p * n) - 1
        else:
            index = int(np.searchsorted(self.cumulative, p, side="left"))
        return float(self.ordered[min(max(index, 0), n - 1)])

    def quantile(self, q: float) -> Summary:
        """The q-quantile with its order-statistic standard error: a quarter of the distance
        between the values at q -/+ 2 sqrt(q (1 - q) / n), a z = 2 interval.

        A z = 1 interval would read fewer order statistics, and in a lumpy tail its width
        swings from look to look; looking every tick then finds the looks where it is too
        narrow (measured: A/A rollbacks rose above alpha at a 2 s cadence).
        """
        half = 2 * math.sqrt(q * (1 - q) / self.n_eff)
        scaled = self.at(q)
        se = (self.at(q + half) - self.at(q - half)) / 4
        return Summary(math.exp(scaled), scaled, se, len(self.ordered))


def mean_summary(values: Floats, weights: Floats | None) -> Summary:
    """The mean on the log scale (the delta method: se(log m) = se(m) / m)."""
    n = len(values)
    if weights is None:
        mean = float(values.mean())
        variance = float(values.var(ddof=1)) if n > 1 else 0.0
        n_eff = float(n)
    else:
        mean = float(np.average(values, weights=weights))
        variance = float(np.average(np.square(values - mean), weights=weights))
        n_eff = _effective_n(weights)
    if mean <= 0:
        return Summary(mean, math.nan, math.nan, n)
    return Summary(mean, math.log(mean), math.sqrt(variance / n_eff) / mean, n)


def ratio_summary(numerator: Floats, denominator: Floats) -> Summary:
    """sum(numerator) / sum(denominator) on the log scale (dollars per token), by the delta
    method for a ratio of means."""
    n = len(numerator)
    total = float(denominator.sum())
    if n == 0 or total <= 0 or float(numerator.sum()) <= 0:
        return Summary(math.nan, math.nan, math.nan, n)
    ratio = float(numerator.sum()) / total
    residual = numerator - ratio * denominator
    se_ratio = math.sqrt(float(np.square(residual).sum())) / total
    return Summary(ratio, math.log(ratio), se_ratio / ratio, n)


def compare(reference: Summary, candidate: Summary) -> Estimate:
    return Estimate(
        reference=reference.value,
        candidate=candidate.value,
        theta=candidate.scaled - reference.scaled,
        se=math.hypot(reference.se, candidate.se),
        n_reference=reference.n,
        n_candidate=candidate.n,
    )


def shift(reference: Floats, candidate: Floats) -> Estimate:
    """The rank (Mann-Whitney) shift: P(candidate > reference) + P(tie) / 2 - 1/2, with the
    tie-corrected standard error of the U statistic under no shift."""
    n_r, n_c = len(reference), len(candidate)
    pooled = np.concatenate([reference, candidate])
    ranks = rankdata(pooled)
    u = float(ranks[n_r:].sum()) - n_c * (n_c + 1) / 2
    auc = u / (n_r * n_c)
    total = n_r + n_c
    _, tie_counts = np.unique(pooled, return_counts=True)
    ties = float(np.sum(tie_counts.astype(np.float64) ** 3 - tie_counts))
    tie_factor = 1 - ties / (total**3 - total) if total > 1 else 0.0
    se = math.sqrt(max(tie_factor, 0.0) * (total + 1) / (12 * n_r * n_c))
    return Estimate(
        reference=float(np.median(reference)),
        candidate=float(np.median(candidate)),
        theta=auc - 0.5,
        se=se,
        n_reference=n_r,
        n_candidate=n_c,
    )


def rate(
    reference_events: int, reference_n: int, candidate_events: int, candidate_n: int
) -> Estimate:
    """A difference of two shares (Agresti-Caffo: one success and one failure added to each
    arm, which keeps the interval honest when events are rare or absent)."""
    p_r = (reference_events + 1) / (reference_n + 2)
    p_c = (candidate_events + 1) / (candidate_n + 2)
    se = math.sqrt(p_r * (1 - p_r) / (reference_n + 2) + p_c * (1 - p_c) / (candidate_n + 2))
    return Estimate(
        reference=reference_events / reference_n if reference_n else math.nan,
        candidate=candidate_events / candidate_n if candidate_n else math.nan,
        theta=p_c - p_r,
        se=se,
        n_reference=reference_n,
        n_candidate=candidate_n,
    )


@dataclass(frozen=True)
class StratumWeights:
    reference: Floats  # per reference request; 0 outside the common strata
    candidate: Floats
    cover_reference: float  # share of each arm's requests inside the common strata
    cover_candidate: float


def stratum_weights(
    reference_keys: npt.NDArray[np.int64],
    candidate_keys: npt.NDArray[np.int64],
    *,
    min_stratum: int,
) -> StratumWeights:
    """Reweights the reference arm to the candidate's mix over the strata both arms fill.

    A stratum either arm has fewer than `min_stratum` requests in is left out: comparing there
    would rest on a handful of requests, or would compare a loaded arm with an idle one.
    """
    # Keys are small non-negative integers (see signals.strata): counting needs no sort.
    size = int(max(reference_keys.max(initial=0), candidate_keys.max(initial=0))) + 1
    in_reference = np.bincount(reference_keys, minlength=size)
    in_candidate = np.bincount(candidate_keys, minlength=size)
    common = (in_reference >= min_stratum) & (in_candidate >= min_stratum)
    per_stratum = np.where(common, in_candidate / np.maximum(in_reference, 1), 0.0)
    n_r = len(reference_keys)
    candidate_weights = common[candidate_keys].astype(np.float64)
    return StratumWeights(
        reference=per_stratum[reference_keys].astype(np.float64),
        candidate=candidate_weights,
        cover_reference=float(in_reference[common].sum() / n_r) if n_r else 0.0,
        cover_candidate=float(candidate_weights.sum() / len(candidate_keys))
        if len(candidate_keys)
        else 0.0,
    )
