"""Differences between two arms with standard errors that hold when requests are not independent.

Each estimator gives, per arm, the estimate on the scale it is tested on (the log of a ratio for
quantiles, means and cost ratios; points for rates) and each request's contribution to its error
to first order (its influence function over n). Requests are not independent: latency moves
together over seconds (load, a burst of traffic, batch composition) and differs by replica (a slow
host, a noisy neighbour, for the whole rollout). So the contributions of the difference, the
candidate's minus the reference's, are summed within clusters and the variance read from the
cluster sums (the cluster-robust, or sandwich, variance), two ways at once (Cameron, Gelbach and
Miller's two-way clustering):

- by time window (`WINDOW_S`), across both arms: what moves every replica of every arm at once (a
  burst, the fleet's load) moves both estimates alike and cancels in their difference, so the
  window's sum is taken over the difference, not over each arm alone;
- by replica, across the whole rollout: what persists on one replica (a slow host, drift slower
  than a window) does not average away within an arm of four replicas. Replicas that serve both
  arms (adapters on one server) cancel like windows do. Only what lies beyond the (replica,
  window) cells, which the window level already counts, is added.

The variance is never less than what independence gives for the spread within each (replica,
window) cell: a correlation that happens to be negative in a sample is noise, not information,
while what the whole fleet's load moves at once is left to the windows, where it cancels. With
four replicas an arm the replica level is read from eight clusters, each arm's centred on its own
estimate, and is itself noisy: it comes with the degrees of freedom it was read from
(`ReplicaLevel`), and the judge's fail bounds, at alphas of 1e-4, widen to Student's t at them
(`sequential.few_clusters_factor`). A quantile's replica level is read by leaving each replica
out in turn (the jackknife, `_replica_sums`), where its first-order contributions would read
replicas that drift apart as closer than they are. Nothing else resamples: the engine judges
every live rollout every 2 s over tens of thousands of requests, and these cost a few sums and
a binary search a replica.

Latencies, lengths and costs are compared adjusted for the prompt's size (`adjusted`): the
prefill of a long prompt is much of TTFT's spread, and it is the traffic's, not the model's.

Rates are tested for "worse beyond the fail margin" on the arcsine-square-root scale, where a
count's spread no longer depends on its level (see `RateCounts`), with the clustered variance's
excess over independence carried as a design effect.

Quantiles read their density from the order statistics (the values at ranks n*q -/+ 2
sqrt(n*q*(1-q))), which needs no kernel and stays honest on heavy tails.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
import numpy.typing as npt
from scipy.optimize import brentq
from scipy.stats import chi2

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]
# Latencies are compared on the log scale; a recorded 0 ms would be -inf there.
_FLOOR = 1e-6
# Requests within this many seconds share a time cluster. Drift that outlasts it shows up as a
# difference between neighbouring windows and, where it persists, between replicas; ten seconds
# holds a few hundred requests of a busy arm and a handful of a 5% canary's.
WINDOW_S = 10.0
# A comparison is adjusted for the prompt's size in up to this many bins (deciles), with at least
# this many requests a bin in the smaller arm: fewer bins there, none under two.
PROMPT_BINS = 10
MIN_PER_BIN = 100
# The replica level counts from this many replicas: fewer give a variance so noisy (one or two
# degrees of freedom, doubled by the small-sample correction) that it says more about chance than
# about how replicas differ.
MIN_CLUSTERS = 4
# A quantile's replica level is read by leaving each replica out when an arm has at most this many
# (a pass over the arm's requests each); beyond, each is a sliver of its arm, and the first-order
# contributions read it (`_replica_sums`).
MAX_LEFT_OUT = 64
# A replica level stands out where it exceeds what the spread within replicas gives by chance at
# this level (`ReplicaLevel.stands_out`).
REPLICA_LEVEL_ALPHA = 0.001


@dataclass(frozen=True)
class Clusters:
    """Each request's time window and replica, as small integers shared by the arms of one
    comparison (so that a window or a replica common to two arms is one cluster), and its bin of
    prompt size (`prompt_bins`), the covariate a comparison is adjusted for."""

    window: Ints
    replica: Ints
    windows: int  # how many window codes there are (cells are replica * windows + window)
    prompt_bin: Ints | None = None  # None: no sizes known

    def __len__(self) -> int:
        return len(self.window)

    def __getitem__(self, keep: Mask | Ints) -> Clusters:
        bins = None if self.prompt_bin is None else self.prompt_bin[keep]
        return Clusters(self.window[keep], self.replica[keep], self.windows, bins)

    @cached_property
    def cells(self) -> tuple[Ints, Ints]:
        """Each request's (replica, window) cell, numbered from 0, and each cell's size: read by
        every summary of the arm, so found once."""
        raw = self.replica * self.windows + self.window
        present = np.bincount(raw) > 0
        cells: Ints = (np.cumsum(present) - 1)[raw]
        return cells, np.bincount(cells)


def shared_clusters(
    arms: Sequence[tuple[npt.NDArray[np.str_], Floats, Ints | None]],
) -> list[Clusters]:
    """The clusters of several arms' requests (replica names, arrival times, the gateway's prompt
    estimates or None) on one numbering."""
    if not arms:
        return []
    names = np.concatenate([replica for replica, _, _ in arms])
    ts = np.concatenate([times for _, times, _ in arms])
    _, replica = np.unique(names, return_inverse=True)
    _, window = np.unique(np.floor(ts / WINDOW_S).astype(np.int64), return_inverse=True)
    windows = int(window.max()) + 1 if len(window) else 1
    bins = None
    if all(sizes is not None for _, _, sizes in arms):
        bins = prompt_bins(np.concatenate([sizes for _, _, sizes in arms]))
    out, start = [], 0
    for arm_replica, _, _ in arms:
        end = start + len(arm_replica)
        out.append(
            Clusters(
                window[start:end].astype(np.int64),
                replica[start:end].astype(np.int64),
                windows,
                None if bins is None else bins[start:end],
            )
        )
        start = end
    return out


def prompt_bins(sizes: Ints) -> Ints | None:
    """Each request's decile of prompt size among the known sizes pooled (1-10; 0: not known),
    or None when too few sizes are known to adjust for."""
    known = sizes > 0
    if np.count_nonzero(known) < PROMPT_BINS * MIN_PER_BIN:
        return None
    edges = np.quantile(sizes[known], np.linspace(0, 1, PROMPT_BINS + 1)[1:-1])
    bins: Ints = np.where(known, np.searchsorted(edges, sizes, side="right") + 1, 0)
    return bins.astype(np.int64)


@dataclass(frozen=True)
class Summary:
    """One arm's estimate of a statistic, with each request's contribution to its error."""

    value: float  # natural scale
    scaled: float  # tested scale
    n: int
    # Each request's first-order contribution to (scaled - truth): the influence over n, centred.
    # None when the error is known only under independence (counts without their requests).
    contributions: Floats | None = None
    clusters: Clusters | None = None
    # The variance under independence (rates: the Agresti-Caffo one, honest when events are rare).
    independent: float = math.nan
    # Quantiles only: the estimate with each replica's requests left out (by replica code; NaN
    # where the arm has none), from which the replica level is read (`_replica_sums`).
    left_out: Floats | None = None

    @property
    def se(self) -> float:
        """The standard error of this arm's estimate alone."""
        return math.sqrt(variance_of([(self, 1.0)]))


@dataclass(frozen=True)
class RateCounts:
    """Two shares as counts, for the fail test of a rate.

    The Wald error of a difference of shares reads each arm's spread at its observed share: for a
    candidate that errs on 2% of requests against a reference's 0.5%, the candidate's spread is
    that of 2%, four times the variance the candidate would have at the fail margin, which is what
    a test of "no worse than the margin" has to hold against. Read at the margin instead (a score
    test), the normal approximation fails for rare events: a handful of events is skewed, and
    read every tick such a test rolled back ten times its alpha at the margin (0.5% -> 0.6%,
    looks every 2 s through the 5%, 25% and 50% steps). On the arcsine-square-root scale a
    count's variance is 1 / (4 n) whatever the share (Anscombe's 3/8 keeps it so for small
    counts) and its skew is small: the same simulation crossed at a sixth of alpha, and a
    2% candidate is caught at about 7.7 standard errors where the Wald test has 5.9.
    """

    events_reference: float
    n_reference: int
    events_candidate: float
    n_candidate: int
    # The clustered variance over the variance under independence (at least 1): what the
    # requests' dependence adds, carried over to the arcsine scale.
    design_effect: float = 1.0

    def statistic(self, harm: float, *, sign: float) -> float:
        """The standardized distance of the candidate's share beyond `harm` (positive: worse),
        where harm is sign * (candidate - reference), on the arcsine-square-root scale."""
        candidate = (self.events_candidate + 0.375) / (self.n_candidate + 0.75)
        reference = (self.events_reference + 0.375) / (self.n_reference + 0.75)
        edge = min(max(reference + sign * harm, _RATE_EDGE), 1 - _RATE_EDGE)
        # The reference's error carried to the arcsine scale at the edge (the delta method).
        # Below a harm of 0, which no fail margin reaches, at the reference's own share: the
        # slope at an edge near 0 or 1 grows without bound and would turn the statistic back.
        slope_at = edge if harm >= 0 else reference
        variance = 1 / (4 * self.n_candidate + 2) + reference * (1 - reference) / (
            4 * slope_at * (1 - slope_at) * (self.n_reference + 0.75)
        )
        gap = _arcsine(candidate) - _arcsine(edge)
        return sign * gap / math.sqrt(variance * self.design_effect)

    def harm_at_least(self, z: float, *, sign: float) -> float:
        """The largest harm that `z` standard errors on the arcsine scale still exceed: the lower
        end of a one-sided interval for the harm. Searched downwards from the observed harm (where
        the statistic is 0), in steps that double, so that the root found is the one nearest the
        estimate. When no harm down to the least possible is exceeded, the least possible (the
        reference moved to a share of 0 or 1) is returned."""
        candidate = (self.events_candidate + 0.375) / (self.n_candidate + 0.75)
        reference = (self.events_reference + 0.375) / (self.n_reference + 0.75)
        least = -reference if sign > 0 else reference - 1
        observed = sign * (candidate - reference)
        spread = math.sqrt(
            candidate * (1 - candidate) / self.n_candidate
            + reference * (1 - reference) / self.n_reference
        )
        step = max(spread, 1e-6)

        def excess(harm: float) -> float:
            return self.statistic(harm, sign=sign) - z

        upper = observed
        while upper > least:
            lower = max(upper - step, least)
            if excess(lower) > 0:
                return float(brentq(excess, lower, upper, xtol=1e-7))
            upper, step = lower, 2 * step
        return least


# Shares are kept this far from 0 and 1 on the arcsine scale, where its slope is infinite.
_RATE_EDGE = 1e-9


def _arcsine(share: float) -> float:
    return math.asin(math.sqrt(min(max(share, 0.0), 1.0)))


@dataclass(frozen=True)
class ReplicaLevel:
    """What a variance's replica level was read from, and so how far it can be trusted.

    `by_replica` is the variance read from the replicas' sums (`_replica_sums`): it carries the
    spread within replicas as well as between them, and it is what is uncertain, read from `df`
    degrees of freedom (four to ten replicas, less the arms' centring); `cells` is the part of
    it the (replica, window) cells hold, which the window level counts already. The variance
    adds what is left, `by_replica - cells`.
    """

    by_replica: float
    cells: float
    df: int

    @property
    def adds(self) -> float:
        return max(self.by_replica - self.cells, 0.0)

    def stands_out(self) -> bool:
        """Whether the replicas differ by more than their requests' own spread gives by chance
        (the ratio's F test at `REPLICA_LEVEL_ALPHA`)."""
        if self.cells <= 0:
            return self.by_replica > 0
        chance = float(chi2.isf(REPLICA_LEVEL_ALPHA, self.df)) / self.df
        return self.by_replica / self.cells > chance

    def read(self, variance: float, *, shown: bool) -> tuple[float, float]:
        """The variance to read, and its degrees of freedom.

        Where the replica level is `shown` to be there, the replicas are the unit: the variance
        is at least `by_replica` (the nested design's error term, within replicas and between
        them), read with the replicas' own `df`. Satterthwaite's degrees of freedom would be
        larger wherever `by_replica` came out small beside the windows' variance, by chance as
        much as not, and the bound would narrow where it is least reliable. Where the replica
        level is not shown, reading it that way would give up what the windows know in the
        looks where replicas alike happen to read apart, so the share it adds is read as a share
        of one from `df` instead (infinite where it adds nothing)."""
        if shown:
            return max(variance, self.by_replica), float(self.df)
        if self.adds == 0:
            return variance, math.inf
        return variance, self.df * (variance / self.adds) ** 2


@dataclass(frozen=True)
class Estimate:
    reference: float  # on the natural scale (ms, tokens, dollars, share)
    candidate: float
    theta: float  # the difference on the tested scale
    se: float
    n_reference: int
    n_candidate: int
    counts: RateCounts | None = None  # rates only: their fail test reads these
    adjusted: bool = False  # for the prompt's size (`adjusted`)
    # What the variance's replica level rests on; None where it has none (too few replicas).
    replica_level: ReplicaLevel | None = None

    def read(self, *, replicas_differ: bool = False) -> tuple[float, float]:
        """The standard error to read, and its degrees of freedom: `se` and infinite but for the
        replica level (`ReplicaLevel.read`), taken as shown where it stands out here or where
        the caller knows from another metric of theirs that the replicas `differ`."""
        level = self.replica_level
        if level is None:
            return self.se, math.inf
        variance, df = level.read(self.se**2, shown=replicas_differ or level.stands_out())
        return math.sqrt(variance), df


def variance_of(terms: Sequence[tuple[Summary, float]]) -> float:
    """The variance of sum(sign * estimate) over the terms, two-way cluster-robust (see the
    module's docstring), and at least the variance under independence."""
    return variance_and_level(terms)[0]


def variance_and_level(
    terms: Sequence[tuple[Summary, float]],
) -> tuple[float, ReplicaLevel | None]:
    """`variance_of`, and what its replica level rests on (None: too few replicas to read one)."""
    independent = sum(summary.independent for summary, _ in terms)
    if not all(s.contributions is not None and s.clusters is not None for s, _ in terms):
        return independent, None
    signed = np.concatenate([sign * s.contributions for s, sign in terms])  # type: ignore[operator]
    window = np.concatenate([s.clusters.window for s, _ in terms])  # type: ignore[union-attr]
    replica = np.concatenate([s.clusters.replica for s, _ in terms])  # type: ignore[union-attr]
    windows = max(s.clusters.windows for s, _ in terms)  # type: ignore[union-attr]
    if len(signed) == 0:
        return independent, None
    variance = _clustered(signed, window)
    replicas_seen = np.bincount(replica)
    replicas = int(np.count_nonzero(replicas_seen))
    if replicas < MIN_CLUSTERS:
        return max(variance, independent), None
    # Arms on replicas of their own each centre theirs (two constraints for two arms); arms that
    # share a replica (adapters on one server) centre their sums together.
    arms_on = np.zeros(len(replicas_seen), dtype=np.int64)
    for s, _ in terms:
        arms_on += np.bincount(s.clusters.replica, minlength=len(arms_on)) > 0  # type: ignore[union-attr]
    centred = len(terms) if int(arms_on.max()) <= 1 else 1
    sums = _replica_sums(terms, len(replicas_seen))
    by_replica = float(np.dot(sums, sums)) * replicas / (replicas - centred)
    cells = _clustered(signed, replica * windows + window)
    if by_replica <= 0:
        return max(variance, independent), None
    level = ReplicaLevel(by_replica, cells, replicas - centred)
    return max(variance + level.adds, independent), level


def _replica_sums(terms: Sequence[tuple[Summary, float]], replicas: int) -> Floats:
    """Each replica's share of the signed sum's error, each arm's centred on its own estimate:
    the sum of its requests' contributions or, for a quantile, the jackknife's (the estimate
    less the estimate without that replica, times the share of requests left). A quantile's
    first-order contributions count how many of a replica's requests lie on either side of it,
    which stops growing once a replica sits a spread away from its siblings: where replicas
    drift apart by about a request's own spread (TPOT's), they read the replica level's
    standard error about a quarter too small, and deleting each replica in turn reads it as it
    is."""
    total = np.zeros(replicas)
    for summary, sign in terms:
        replica = summary.clusters.replica  # type: ignore[union-attr]
        counts = np.bincount(replica, minlength=replicas)[:replicas]
        present = counts > 0
        if summary.left_out is None:
            sums = np.bincount(replica, weights=summary.contributions, minlength=replicas)
        else:
            left_out = np.full(replicas, np.nan)
            left_out[: len(summary.left_out)] = summary.left_out[:replicas]
            sums = (summary.scaled - left_out) * (summary.n - counts) / summary.n
            sums = np.where(present & np.isfinite(sums), sums, 0.0)
            sums[present] -= sums[present].mean()
        total += sign * sums[:replicas]
    return total


def _clustered(signed: Floats, ids: Ints) -> float:
    """The sandwich variance of sum(signed) with clusters `ids`, with the G / (G - 1)
    correction; one cluster has no spread between clusters to read (independence then)."""
    sums = np.bincount(ids, weights=signed)
    groups = int(np.count_nonzero(np.bincount(ids)))
    if groups <= 1:
        return float(np.dot(signed, signed))
    return float(np.dot(sums, sums)) * groups / (groups - 1)


def _summary(value: float, scaled: float, contributions: Floats, clusters: Clusters) -> Summary:
    """A summary whose floor is the variance under independence of what varies within the
    (replica, window) cells: what the whole fleet's load moves at once is left to the windows,
    where a comparison's arms cancel it."""
    ids, sizes = clusters.cells
    means = np.bincount(ids, weights=contributions) / sizes
    within = contributions - means[ids]
    n, replicated = len(contributions), len(contributions) - len(sizes)
    independent = float(np.dot(contributions, contributions))
    # Cells of one or two requests say little about the spread within them.
    if replicated >= n / 4:
        independent = min(independent, float(np.dot(within, within)) * n / replicated)
    return Summary(value, scaled, len(contributions), contributions, clusters, independent)


@dataclass(frozen=True)
class SortedSample:
    """One arm's values of a column on the log scale, sorted once, so that every quantile of
    that column in one judge call costs a binary search."""

    logs: Floats  # in the arm's order, for the contributions
    ordered: Floats
    clusters: Clusters
    order: Ints  # logs[order] is ordered

    @classmethod
    def of(cls, values: Floats, clusters: Clusters) -> SortedSample:
        logs = np.log(np.maximum(values, _FLOOR))
        order = np.argsort(logs, kind="stable")
        return cls(logs, logs[order], clusters, order)

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
        contributions = (float(below.mean()) - below) * inverse_density / n
        summary = _summary(math.exp(scaled), scaled, contributions, self.clusters)
        return replace(summary, left_out=self._left_out(q))

    def _left_out(self, q: float) -> Floats | None:
        """The q-quantile with each replica's values left out, by replica code (NaN: none of
        its values here), or None for fewer than two replicas."""
        if self._kept is None:
            return None
        codes, kept = self._kept
        out = np.full(int(codes.max()) + 1, np.nan)
        for code, below in zip(codes.tolist(), kept, strict=True):
            rest = int(below[-1])
            if rest == 0:
                continue
            rank = min(max(math.ceil(q * rest), 1), rest)  # the rank `at` reads
            out[code] = self.ordered[int(np.searchsorted(below, rank))]
        return out

    @cached_property
    def _kept(self) -> tuple[Ints, list[Ints]] | None:
        """For each replica present, how many of the other replicas' values lie at or below
        each position of `ordered`."""
        replica = self.clusters.replica[self.order]
        codes = np.unique(replica)
        if not 2 <= len(codes) <= MAX_LEFT_OUT:
            return None
        positions = np.arange(1, len(replica) + 1)
        return codes, [positions - np.cumsum(replica == code) for code in codes.tolist()]


def mean_summary(values: Floats, clusters: Clusters) -> Summary:
    """The mean on the log scale (the delta method: se(log m) = se(m) / m)."""
    n = len(values)
    mean = float(values.mean())
    if mean <= 0:
        return Summary(mean, math.nan, n)
    contributions = (values - mean) / (mean * n)
    return _summary(mean, math.log(mean), contributions, clusters)


def ratio_summary(numerator: Floats, denominator: Floats, clusters: Clusters) -> Summary:
    """sum(numerator) / sum(denominator) on the log scale (dollars per token), by the delta
    method for a ratio of means."""
    n = len(numerator)
    total = float(denominator.sum())
    if n == 0 or total <= 0 or float(numerator.sum()) <= 0:
        return Summary(math.nan, math.nan, n)
    ratio = float(numerator.sum()) / total
    # The contribution of a request to log(ratio), to first order.
    contributions = (numerator - ratio * denominator) / (ratio * total)
    return _summary(ratio, math.log(ratio), contributions, clusters)


def compare(reference: Summary, candidate: Summary, *, adjust: bool = False) -> Estimate:
    """The candidate's estimate less the reference's, with the variance of that difference;
    `adjust`: for the prompt's size, where both arms know it (`adjusted`)."""
    adjusted_for_prompts = False
    if adjust and (found := adjusted(reference, candidate)) is not None:
        reference, candidate = found
        adjusted_for_prompts = True
    variance, level = variance_and_level([(candidate, 1.0), (reference, -1.0)])
    return Estimate(
        reference=reference.value,
        candidate=candidate.value,
        theta=candidate.scaled - reference.scaled,
        se=math.sqrt(variance),
        n_reference=reference.n,
        n_candidate=candidate.n,
        adjusted=adjusted_for_prompts,
        replica_level=level,
    )


def adjusted(reference: Summary, candidate: Summary) -> tuple[Summary, Summary] | None:
    """Both arms' summaries adjusted for the prompt's size (regression adjustment, as CUPED does
    for means).

    A long prompt takes long to prefill, so much of TTFT's spread between requests is the
    prompts', not the model's. The arms are drawn from the same traffic, so their mix of prompt
    sizes differs only by chance: each request's contribution to its arm's error is regressed on
    its bin of prompt size (one slope per bin, the same in both arms, fitted on both), and each
    arm's estimate moves by what its mix of bins, against the arms' pooled mix, predicts. The
    difference keeps its meaning (the shift has mean zero) and loses the part of its variance the
    bins explain: for p90 TTFT about a tenth of the standard error, as the calibration measures.
    The size is the gateway's estimate from what the client sent, made before an arm was
    chosen, so no model can move it; the prompt tokens the replica reports could not serve (a
    candidate with another tokenizer counts the same prompts differently, and its slower prefill
    would be adjusted away). None when either arm lacks sizes or has too few requests."""
    if reference.contributions is None or candidate.contributions is None:
        return None
    if reference.clusters is None or candidate.clusters is None:
        return None
    ref_bins, cand_bins = reference.clusters.prompt_bin, candidate.clusters.prompt_bin
    groups = min(PROMPT_BINS, min(reference.n, candidate.n) // MIN_PER_BIN)
    if ref_bins is None or cand_bins is None or groups < 2:
        return None

    def merged(bins: Ints) -> Ints:
        # Deciles merged into `groups` bins of about equal size; the unknown size is its own.
        codes: Ints = np.ceil(bins * groups / PROMPT_BINS).astype(np.int64)
        return codes

    width = groups + 1
    ref_codes, cand_codes = merged(ref_bins), merged(cand_bins)
    ref_mix = np.bincount(ref_codes, minlength=width) / reference.n
    cand_mix = np.bincount(cand_codes, minlength=width) / candidate.n
    # Least squares of the contributions on the bins' indicators centred within each arm (and
    # over n, as contributions are influences over n: the fit then minimises the variance of the
    # adjusted difference), from its normal equations: a few sums, not a matrix a request a bin.
    # A centred indicator's covariance in one arm is diag(mix) - mix mix'.
    gram, moment = np.zeros((width, width)), np.zeros(width)
    for arm, contributions, codes, mix in (
        (reference, reference.contributions, ref_codes, ref_mix),
        (candidate, candidate.contributions, cand_codes, cand_mix),
    ):
        gram += (np.diag(mix) - np.outer(mix, mix)) / arm.n
        sums = np.bincount(codes, weights=contributions, minlength=width)
        moment += (sums - mix * float(contributions.sum())) / arm.n
    # The centred indicators sum to zero, so the slope is found up to a constant, which moves
    # neither the contributions nor the estimates.
    slope, *_ = np.linalg.lstsq(gram, moment, rcond=None)
    pooled = (ref_mix * reference.n + cand_mix * candidate.n) / (reference.n + candidate.n)

    def moved(summary: Summary, codes: Ints, mix: Floats) -> Summary:
        contributions = summary.contributions - (slope[codes] - float(mix @ slope)) / summary.n  # type: ignore[operator]
        scaled = summary.scaled - float((mix - pooled) @ slope)
        moved = _summary(summary.value, scaled, contributions, summary.clusters)  # type: ignore[arg-type]
        if summary.left_out is None:
            return moved
        # Each replica's requests left out change the arm's mix of prompt sizes, and with it
        # the adjustment: the pooled mix is both arms' and cancels in their difference.
        replica = summary.clusters.replica  # type: ignore[union-attr]
        slots = len(summary.left_out)
        counts = np.bincount(replica * width + codes, minlength=slots * width)
        by_replica = counts[: slots * width].reshape(slots, width)
        rest = (np.bincount(codes, minlength=width) - by_replica).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            rest_mix = rest / rest.sum(axis=1, keepdims=True)
        left_out = summary.left_out - (rest_mix - pooled) @ slope
        return replace(moved, left_out=left_out)

    return moved(reference, ref_codes, ref_mix), moved(candidate, cand_codes, cand_mix)


@dataclass(frozen=True)
class RateSample:
    """One arm's events among its eligible requests, with the clusters of those requests."""

    events: Floats  # 1.0 for an event, 0.0 otherwise, one per eligible request
    clusters: Clusters | None  # None: independent requests

    def summary(self) -> Summary:
        """The share, with one success and one failure added (Agresti-Caffo), which keeps its
        error honest when events are rare or absent."""
        n = len(self.events)
        count = float(self.events.sum())
        adjusted = (count + 1) / (n + 2)
        independent = adjusted * (1 - adjusted) / (n + 2)
        share = count / n if n else math.nan
        if n < 2 or self.clusters is None:
            return Summary(share, adjusted, n, independent=independent)
        contributions = (self.events - count / n) / n
        return Summary(share, adjusted, n, contributions, self.clusters, independent)


def rate(reference: RateSample, candidate: RateSample) -> Estimate:
    """A difference of two shares, in points, with their counts (see `RateCounts`)."""
    ref, cand = reference.summary(), candidate.summary()
    estimate = compare(ref, cand)
    independent = ref.independent + cand.independent
    counts = RateCounts(
        float(reference.events.sum()),
        len(reference.events),
        float(candidate.events.sum()),
        len(candidate.events),
        max(estimate.se**2 / independent, 1.0) if independent > 0 else 1.0,
    )
    return replace(estimate, counts=counts)


def counted_rate(
    reference_events: int, reference_n: int, candidate_events: int, candidate_n: int
) -> Estimate:
    """A difference of two shares known only as counts (user feedback): independent requests."""

    def sample(events: int, n: int) -> RateSample:
        flags = np.zeros(n, dtype=np.float64)
        flags[:events] = 1.0
        return RateSample(flags, None)

    return rate(sample(reference_events, reference_n), sample(candidate_events, candidate_n))
