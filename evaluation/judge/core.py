"""The judge: one verdict per metric and one decision for the step.

Two hypotheses per metric, with "harm" the difference signed so that positive means the candidate
is worse, and both bounds valid however often they are read (anytime-valid, see `sequential`, or
read once at a scheduled look), so that looking on every tick, holding a step or resuming it
cannot inflate them:

- fail: harm - bound > fail margin. The candidate is shown worse than its fail margin; the bound
  is at the metric's share of the rollout's alpha (`Policy.alpha_of`), spent partly on an
  anytime-valid bound and partly on a fixed schedule of one look per judged step
  (`Policy.fail_alphas`): a scheduled look reads the tighter of the two. For rates the same
  number of standard errors is read on the arcsine-square-root scale (`estimators.RateCounts`).
  Where the variance leans on a few replicas, the fail bounds widen to Student's t at its
  degrees of freedom; where the replicas' latencies differ beyond chance, every latency metric
  reads its replicas as the unit (`_replicas_differ`).
- pass: harm + bound < pass margin. The candidate is shown worse by less than its pass margin;
  the bound is at `pass_alpha`, spent the same two ways (`Policy.pass_alphas`). A pass counts
  at the end of a step only.
- inconclusive: otherwise; and always when an arm has too few samples or neither has any.

The guarantee: for a candidate no worse than its fail margins, the chance that any look of the
rollout rolls it back is at most the judge's share of `policy.alpha`; for one worse than a pass
margin, the chance that it passes is at most `pass_alpha`. The standard errors behind both hold
when requests of one replica and moment are alike (`estimators`). Evidence carries from one step
to the next: the caller gives every judged step's samples so far.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass

import numpy as np

from evaluation.judge import signals
from evaluation.judge.estimators import (
    Clusters,
    Estimate,
    Floats,
    RateSample,
    SortedSample,
    Summary,
    compare,
    counted_rate,
    mean_summary,
    rate,
    ratio_summary,
    shared_clusters,
)
from evaluation.judge.policy import (
    DEFAULT_POLICY,
    Direction,
    Kind,
    MetricPolicy,
    Policy,
    ScheduledLook,
)
from evaluation.judge.replicas import odd_replica, without
from evaluation.judge.report import Decision, MetricVerdict, Outcome, Report
from evaluation.judge.samples import ArmSamples
from evaluation.judge.sequential import few_clusters_factor, fixed_bound, mixture_bound

# Latencies are what a slow host changes; set-aside replicas leave only these.
LATENCY_SIGNALS = frozenset({"ttft_ms", "tpot_ms", "e2e_ms"})
# The starts of the rules that say why a metric could not be judged; callers may match on them
# (e.g. to keep looking while a blocking metric is short of samples).
NO_DATA = "no data in either arm"
TOO_FEW_SAMPLES = "too few samples"


@dataclass(frozen=True)
class _Arms:
    """The arms a metric is compared across, chosen once per call."""

    reference: ArmSamples
    candidate: ArmSamples
    name: str  # "baseline", "control" or "baseline+control"
    # Why neither arm has data, when it is not that neither produced any (see `NO_DATA`).
    empty: str = ""


class _Unresolved(Exception):
    """A metric that cannot be judged on this data; its message is the verdict's rule."""


def judge(
    baseline: ArmSamples,
    candidate: ArmSamples,
    policy: Policy = DEFAULT_POLICY,
    *,
    final: bool,
    control: ArmSamples | None = None,
    last_step: bool = False,
    equal_share_steps: Collection[int] | None = None,
    scheduled: ScheduledLook | None = None,
) -> Report:
    """Compares the candidate's samples with the baseline's.

    `final=False` is an interim look (every engine tick): the decision is ROLLBACK when a metric
    fails, else CONTINUE. `final=True` is the end of a step (bake time and minimum samples met):
    ROLLBACK when a metric fails; PROMOTE when every blocking metric with data passes (the step
    passed: the engine goes on to the next step, or promotes after the last); otherwise CONTINUE
    when more steps follow (a larger share will settle what this one could not; nothing failed)
    or HOLD for a person when this is the `last_step` judged. A metric neither arm has data for
    (no tool calls on the route, no feedback) does not apply; a step with no data at all HOLDs.

    `control` is a second deployment of the baseline at the candidate's weight on its own
    replicas. When given, load-sensitive metrics compare the candidate with it like for like, and
    the others with the baseline and control pooled. Without one, `equal_share_steps` names the
    steps where the candidate carried the baseline's share (50%): load-sensitive metrics then
    compare those steps' samples only (none named: every step's, across their loads). At 5% a
    candidate's replicas idle beside a baseline's carrying 95%, and a latency compared across
    that difference in load is the load's, not the model's: a candidate 30% slower looks faster,
    and pooled with the 50% step's samples the steps' difference also reads as noise that no
    step can settle (on the demo's fleet, p95 TPOT 54% "faster" with a standard error of 0.21 on
    the log scale, against +8% and 0.07 at 50% alone).

    `scheduled` says this is one of the rollout's scheduled looks (the first final look of each
    judged step: the caller keeps that schedule, one look a step), and which; its bounds may then
    read the fixed-look share of alpha.
    """
    odd = tuple(
        found
        for name, arm in (("baseline", baseline), ("control", control), ("candidate", candidate))
        if arm is not None and (found := odd_replica(arm, name)) is not None
    )
    prepared = _Prepared(policy, scheduled)
    everything = _arm_sets(baseline, control, candidate, prepared)
    # A replica odd in any arm is left out of every arm's latencies (one host may serve both,
    # as adapters on one server do); its errors, lengths and tool calls still count.
    aside = {found.replica for found in odd}
    latencies = everything
    if aside:
        latencies = _arm_sets(
            without(baseline, aside),
            None if control is None else without(control, aside),
            without(candidate, aside),
            prepared,
        )
    if control is None and equal_share_steps:
        steps = sorted(equal_share_steps)
        everything = (_at_equal_shares(everything[0], steps, prepared), everything[1])
        latencies = (_at_equal_shares(latencies[0], steps, prepared), latencies[1])
    compared = [
        (metric, arms, _estimate_or_why(metric, arms, prepared))
        for metric in policy.metrics
        for arms in [
            (latencies if metric.signal in LATENCY_SIGNALS else everything)[
                0 if metric.load_sensitive else 1
            ]
        ]
    ]
    # A replica set aside is itself a sign that this fleet's replicas differ: those left may
    # happen to agree, but are no more alike for it.
    replicas_differ = bool(aside) or _replicas_differ(latencies[0], prepared)
    verdicts = tuple(
        _verdict(
            metric,
            arms,
            estimate,
            prepared,
            replicas_differ=replicas_differ and metric.signal in LATENCY_SIGNALS,
        )
        for metric, arms, estimate in compared
    )
    decision, reason = _decide(verdicts, policy.metrics, final=final, last_step=last_step)
    return Report(
        verdicts,
        decision,
        reason,
        final=final,
        scheduled=scheduled is not None,
        alpha_per_metric=policy.judge_alpha,
        set_aside=tuple(found.describe() for found in odd),
    )


def _arm_sets(
    baseline: ArmSamples,
    control: ArmSamples | None,
    candidate: ArmSamples,
    prepared: _Prepared,
) -> tuple[_Arms, _Arms]:
    """The arms load-sensitive metrics compare (the candidate with the control, when there is
    one) and those the others compare (with the baseline and control pooled)."""
    pooled = baseline if control is None else ArmSamples.concat(baseline, control)
    prepared.share_clusters(baseline, control, candidate, pooled)
    load = _Arms(
        control if control is not None else baseline,
        candidate,
        "control" if control is not None else "baseline",
    )
    other = _Arms(pooled, candidate, "baseline" if control is None else "baseline+control")
    return load, other


NOT_AT_EQUAL_SHARES = (
    "not compared at this share: without a control arm the candidate and the baseline carry the "
    "same load only at a 50% step"
)


def _at_equal_shares(arms: _Arms, steps: list[int], prepared: _Prepared) -> _Arms:
    """The arms' samples from `steps` alone, on the clusters numbered for the whole call."""
    parts = []
    for arm in (arms.reference, arms.candidate):
        keep = np.isin(arm.step, steps)
        part = arm.take(keep)
        prepared.adopt_clusters(part, prepared.clusters(arm)[keep])
        parts.append(part)
    return _Arms(parts[0], parts[1], arms.name, empty=NOT_AT_EQUAL_SHARES)


def _replicas_differ(arms: _Arms, prepared: _Prepared) -> bool:
    """Whether the replicas' median TTFT or TPOT differ by more than chance gives.

    Replicas that differ differ in every latency of theirs: a host that drifts slow is slower to
    a first token and between tokens alike. TPOT, steady within a replica, shows it where TTFT's
    wide spread hides it, and a latency quantile whose own replica level came out small by
    chance is then read as what it is, the few replicas' (`Estimate.read`). Read on the medians,
    whose replica level is read from dense order statistics (a tail's, from a few dozen values
    a replica, stands out by chance far more often than its level says)."""
    for signal in ("ttft_ms", "tpot_ms"):
        reference = prepared.column(arms.reference, signal)[0]
        candidate = prepared.column(arms.candidate, signal)[0]
        if len(reference) == 0 or len(candidate) == 0:
            continue
        level = prepared.quantiles(arms, signal, 0.5).replica_level
        if level is not None and level.stands_out():
            return True
    return False


def _estimate_or_why(metric: MetricPolicy, arms: _Arms, prepared: _Prepared) -> Estimate | str:
    try:
        return _estimate(metric, arms, prepared)
    except _Unresolved as unresolved:
        return str(unresolved)


def _verdict(
    metric: MetricPolicy,
    arms: _Arms,
    estimate: Estimate | str,
    prepared: _Prepared,
    *,
    replicas_differ: bool,
) -> MetricVerdict:
    policy = prepared.policy
    fail_margin = _scaled(metric, metric.margin)
    pass_margin = _scaled(metric, metric.passes_below)
    sign = 1.0 if metric.direction == Direction.LOWER_IS_BETTER else -1.0
    alpha = policy.alpha_of(metric)
    anytime_alpha, look_alpha = policy.fail_alphas(metric, prepared.scheduled)
    if isinstance(estimate, str):
        return _inconclusive(metric, arms, estimate, alpha=alpha)
    if estimate.n_reference < metric.min_samples or estimate.n_candidate < metric.min_samples:
        return _inconclusive(
            metric,
            arms,
            f"{TOO_FEW_SAMPLES}: {metric.min_samples} per arm needed, "
            f"{estimate.n_reference} ({arms.name}) and {estimate.n_candidate} (candidate) so far",
            estimate,
            alpha=alpha,
        )
    # Both mixtures spread over changes the size of the pass margin: that is where decisions are
    # made (a spread the size of a tight fail margin, a tenth of a point, would make the bound
    # several times wider at the sample sizes where a margin-sized change shows).
    # A variance read from a few replicas is itself uncertain, and at a fail alpha of 1e-4 or
    # less that matters (`few_clusters_factor`): the fail bounds widen by it. The pass bound, at
    # 0.05, is left as it is: widened, it would hold healthy rollouts whenever replicas are few,
    # and the calibration's at-the-margin row measures what it lets through.
    look = prepared.scheduled
    se, df = estimate.read(replicas_differ=replicas_differ)
    fail_bound, valid = _bound(
        se, (anytime_alpha, look_alpha), of=alpha, look=look, scale=pass_margin, df=df
    )
    if math.isfinite(df):
        valid += f", read with {df:.0f} degrees of freedom"
    pass_bound, pass_valid = _bound(
        se, policy.pass_alphas(look), of=policy.pass_alpha, look=look, scale=pass_margin
    )
    harm = sign * estimate.theta
    if estimate.counts is not None and estimate.se > 0:
        # Rates: the same bound in standard errors of the estimate, read on the arcsine scale
        # (`RateCounts`).
        at_least = estimate.counts.harm_at_least(fail_bound / estimate.se, sign=sign)
        fail_bound = max(harm - at_least, 0.0)
    else:
        at_least = harm - fail_bound
    at_most = harm + pass_bound
    low, high = estimate.theta - fail_bound, estimate.theta + fail_bound
    difference = _difference(metric, estimate)
    shown = f"{_show(metric, difference)} against the {arms.name}"
    if estimate.adjusted:
        shown += " (adjusted for prompt size)"
    if at_least > fail_margin:
        outcome = Outcome.FAIL
        rule = (
            f"worse than the {_show_margin(metric, metric.margin)} fail margin beyond doubt: "
            f"{shown}, worse by at least {_show(metric, _natural(metric, at_least))} ({valid})"
        )
    elif at_most < pass_margin:
        outcome = Outcome.PASS
        rule = (
            f"within the {_show_margin(metric, metric.passes_below)} pass margin: {shown}, "
            f"worse by at most {_show(metric, _natural(metric, at_most))} "
            f"({pass_valid})"
        )
    else:
        outcome = Outcome.INCONCLUSIVE
        rule = (
            f"not settled: {shown}; worse by between {_show(metric, _natural(metric, at_least))}"
            f" and {_show(metric, _natural(metric, at_most))}; fails beyond "
            f"{_show_margin(metric, metric.margin)}, passes under "
            f"{_show_margin(metric, metric.passes_below)}"
        )
        if math.isfinite(df):
            rule += f" (the lower end read with {df:.0f} degrees of freedom)"
    return MetricVerdict(
        metric=metric.name,
        outcome=outcome,
        n_baseline=estimate.n_reference,
        n_candidate=estimate.n_candidate,
        baseline=estimate.reference,
        candidate=estimate.candidate,
        difference=difference,
        interval=(_natural(metric, low), _natural(metric, high)),
        threshold=sign * metric.margin,
        rule=rule,
        relative=metric.relative,
        pass_bound=_natural(metric, at_most),
        reference=arms.name,
        pass_threshold=sign * metric.passes_below,
        alpha=alpha,
    )


def _bound(
    se: float,
    alphas: tuple[float, float],
    *,
    of: float,
    look: ScheduledLook | None,
    scale: float,
    df: float = math.inf,
) -> tuple[float, str]:
    """The tighter of the anytime-valid bound and, at a scheduled look, the fixed one, at the
    (anytime, per look) `alphas` spent of the alpha `of`, widened for a variance read with `df`
    degrees of freedom. With the words that say which it is."""
    anytime, per_look = alphas
    bound = mixture_bound(se, alpha=anytime, scale=scale) * few_clusters_factor(df, alpha=anytime)
    valid = f"alpha {anytime:.2g} of its {of:.2g}, valid at every look"
    if per_look and look is not None:
        scheduled = fixed_bound(se, alpha=per_look) * few_clusters_factor(df, alpha=per_look)
        if scheduled < bound:
            bound = scheduled
            valid = f"{look.describe()}, alpha {per_look:.2g} of its {of:.2g}"
    return bound, valid


class _Prepared:
    """What the metrics of one call share, computed once: each arm's masks and clusters, and
    each column's values sorted (the three TTFT quantiles read one sort)."""

    def __init__(self, policy: Policy, scheduled: ScheduledLook | None = None) -> None:
        self.policy = policy
        self.scheduled = scheduled
        self._cache: dict[tuple[object, ...], object] = {}

    def masks(self, arm: ArmSamples) -> signals.ArmMasks:
        key = ("masks", id(arm))
        if key not in self._cache:
            self._cache[key] = signals.ArmMasks.of(arm)
        return self._cache[key]  # type: ignore[return-value]

    def served(self, arm: ArmSamples) -> signals.Mask:
        return self.masks(arm).served

    def share_clusters(
        self,
        baseline: ArmSamples,
        control: ArmSamples | None,
        candidate: ArmSamples,
        pooled: ArmSamples,
    ) -> None:
        """Numbers the windows and replicas of the arms of this call as one, so that a window
        (or a replica) two compared arms share is one cluster, and bins their prompt sizes on
        the same edges."""
        arms = [baseline, candidate] + ([] if control is None else [control])
        numbered = shared_clusters([(arm.replica, arm.ts, arm.prompt_estimate) for arm in arms])
        for arm, clusters in zip(arms, numbered, strict=True):
            self._cache[("clusters", id(arm))] = clusters
        if control is not None:
            first, second = numbered[0], numbered[2]
            bins = None
            if first.prompt_bin is not None and second.prompt_bin is not None:
                bins = np.concatenate([first.prompt_bin, second.prompt_bin])
            self._cache[("clusters", id(pooled))] = Clusters(
                np.concatenate([first.window, second.window]),
                np.concatenate([first.replica, second.replica]),
                first.windows,
                bins,
            )

    def clusters(self, arm: ArmSamples) -> Clusters:
        return self._cache[("clusters", id(arm))]  # type: ignore[return-value]

    def adopt_clusters(self, arm: ArmSamples, clusters: Clusters) -> None:
        """Clusters for an arm cut out of one already numbered (the caller keeps it alive: the
        cache is keyed by identity)."""
        self._cache[("clusters", id(arm))] = clusters

    def column(self, arm: ArmSamples, signal: str) -> tuple[Floats, Clusters]:
        """A column's values over served requests with a finite value, and their clusters."""
        key = ("column", id(arm), signal)
        if key not in self._cache:
            values = np.asarray(getattr(arm, signal), dtype=np.float64)
            keep = self.served(arm) & np.isfinite(values)
            self._cache[key] = (values[keep], self.clusters(arm)[keep])
        return self._cache[key]  # type: ignore[return-value]

    def sorted(self, arm: ArmSamples, signal: str) -> SortedSample:
        key = ("sorted", id(arm), signal)
        if key not in self._cache:
            self._cache[key] = SortedSample.of(*self.column(arm, signal))
        return self._cache[key]  # type: ignore[return-value]

    def quantiles(self, arms: _Arms, signal: str, q: float) -> Estimate:
        """The arms' q-quantiles of a column compared, adjusted for prompt size (the medians are
        read by a metric and by `_replicas_differ` alike)."""
        key = ("quantiles", id(arms.reference), id(arms.candidate), signal, q)
        if key not in self._cache:
            self._cache[key] = compare(
                self.sorted(arms.reference, signal).quantile(q),
                self.sorted(arms.candidate, signal).quantile(q),
                adjust=True,
            )
        return self._cache[key]  # type: ignore[return-value]

    def rate(self, arm: ArmSamples, signal: str) -> RateSample:
        eligible, event = signals.rate_masks(arm, signal, self.masks(arm))
        return RateSample(event[eligible].astype(np.float64), self.clusters(arm)[eligible])


def _estimate(metric: MetricPolicy, arms: _Arms, prepared: _Prepared) -> Estimate:
    reference, candidate = arms.reference, arms.candidate
    kind = Kind(metric.kind)
    if kind is Kind.RATE:
        if metric.signal == "feedback_positive":
            ref = signals.rate_counts(reference, metric.signal)
            cand = signals.rate_counts(candidate, metric.signal)
            if ref.eligible == 0 and cand.eligible == 0:
                raise _Unresolved(NO_DATA)
            return counted_rate(ref.events, ref.eligible, cand.events, cand.eligible)
        ref_rate = prepared.rate(reference, metric.signal)
        cand_rate = prepared.rate(candidate, metric.signal)
        if len(ref_rate.events) == 0 and len(cand_rate.events) == 0:
            raise _Unresolved(NO_DATA)
        return rate(ref_rate, cand_rate)
    if kind is Kind.RATIO:
        ref_summary = _cost_per_mtok(reference, prepared)
        cand_summary = _cost_per_mtok(candidate, prepared)
        if math.isnan(ref_summary.scaled) and math.isnan(cand_summary.scaled):
            raise _Unresolved(NO_DATA)
        if math.isnan(ref_summary.scaled) or math.isnan(cand_summary.scaled):
            raise _Unresolved("no cost or no output tokens recorded in one arm")
        return compare(ref_summary, cand_summary, adjust=True)
    ref_values, ref_clusters = prepared.column(reference, metric.signal)
    cand_values, cand_clusters = prepared.column(candidate, metric.signal)
    if len(ref_values) == 0 and len(cand_values) == 0:
        raise _Unresolved(arms.empty or NO_DATA)
    if len(ref_values) == 0 or len(cand_values) == 0:
        raise _Unresolved(f"no data in the {arms.name if len(ref_values) == 0 else 'candidate'}")
    if kind is Kind.QUANTILE:
        q = float(metric.quantile or 0.5)  # MetricPolicy makes sure a quantile metric has one
        return prepared.quantiles(arms, metric.signal, q)
    ref_summary = mean_summary(ref_values, ref_clusters)
    cand_summary = mean_summary(cand_values, cand_clusters)
    if math.isnan(ref_summary.scaled) or math.isnan(cand_summary.scaled):
        raise _Unresolved("a mean of zero cannot be compared as a ratio")
    return compare(ref_summary, cand_summary, adjust=True)


def _cost_per_mtok(arm: ArmSamples, prepared: _Prepared) -> Summary:
    served = prepared.served(arm)
    return ratio_summary(
        arm.cost[served], arm.output_tokens[served] / 1e6, prepared.clusters(arm)[served]
    )


def _inconclusive(
    metric: MetricPolicy,
    arms: _Arms,
    rule: str,
    estimate: Estimate | None = None,
    *,
    alpha: float,
) -> MetricVerdict:
    sign = 1.0 if metric.direction == Direction.LOWER_IS_BETTER else -1.0
    return MetricVerdict(
        metric=metric.name,
        outcome=Outcome.INCONCLUSIVE,
        n_baseline=estimate.n_reference if estimate else 0,
        n_candidate=estimate.n_candidate if estimate else 0,
        baseline=estimate.reference if estimate else math.nan,
        candidate=estimate.candidate if estimate else math.nan,
        difference=_difference(metric, estimate) if estimate else math.nan,
        interval=(math.nan, math.nan),
        threshold=sign * metric.margin,
        rule=rule,
        relative=metric.relative,
        reference=arms.name,
        pass_threshold=sign * metric.passes_below,
        alpha=alpha,
    )


def _decide(
    verdicts: tuple[MetricVerdict, ...],
    metrics: tuple[MetricPolicy, ...],
    *,
    final: bool,
    last_step: bool,
) -> tuple[Decision, str]:
    failed = [v.metric for v in verdicts if v.outcome is Outcome.FAIL]
    if failed:
        return Decision.ROLLBACK, f"worse beyond doubt and beyond the margin: {', '.join(failed)}"
    if not final:
        return Decision.CONTINUE, "interim look: no metric is worse beyond doubt"
    # A metric neither arm produced (no tool calls on this route, no feedback) does not apply.
    judged = [v for v in verdicts if v.rule != NO_DATA]
    if not judged:
        return Decision.HOLD, "no data: neither arm produced anything to compare"
    blocking = {m.name for m in metrics if m.blocking}
    unresolved = [v.metric for v in judged if v.outcome is Outcome.INCONCLUSIVE]
    open_ = [name for name in unresolved if name in blocking]
    advisory = [name for name in unresolved if name not in blocking]
    also = f"; not blocking, unresolved: {', '.join(advisory)}" if advisory else ""
    if not open_:
        passed = sum(v.outcome is Outcome.PASS for v in judged)
        return Decision.PROMOTE, f"every blocking metric with data passed ({passed} passed{also})"
    if last_step:
        return Decision.HOLD, f"unresolved at the last judged step: {', '.join(open_)}{also}"
    return (
        Decision.CONTINUE,
        f"nothing failed; unresolved, left to the next step's larger share: {', '.join(open_)}"
        f"{also}",
    )


def _scaled(metric: MetricPolicy, margin: float) -> float:
    """A margin on the tested scale (the log of a ratio for relative metrics)."""
    return math.log1p(margin) if metric.relative else margin


def _natural(metric: MetricPolicy, scaled: float) -> float:
    """From the tested scale back to what a person reads: a relative change or a difference."""
    if not math.isfinite(scaled):
        return scaled
    return math.expm1(scaled) if metric.relative else scaled


def _difference(metric: MetricPolicy, estimate: Estimate) -> float:
    """The difference shown: for rates the plain difference of the observed shares (the test
    reads the adjusted one, which differs by a fraction of a point)."""
    if Kind(metric.kind) is Kind.RATE:
        return estimate.candidate - estimate.reference
    return _natural(metric, estimate.theta)


def _show(metric: MetricPolicy, value: float) -> str:
    if metric.relative:
        return f"{value:+.1%}"
    if Kind(metric.kind) is Kind.RATE:
        return f"{value * 100:+.2f} points"
    return f"{value:+.3f}"


def _show_margin(metric: MetricPolicy, margin: float) -> str:
    return _show(metric, margin).lstrip("+")
