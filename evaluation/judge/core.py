"""The judge: one verdict per metric and one decision for the step.

Rules, per metric, with "harm" the difference signed so that positive means the candidate is
worse, and `bound` the anytime-valid bound at the metric's share of alpha (see `sequential`):

- fail: harm - bound > 0 (worse beyond doubt, at any look) and harm > margin (worse by more than
  the practical threshold). A rollback therefore needs statistical and practical significance.
- pass: harm + the fixed-sample bound < margin (worse by less than the margin, with
  1 - pass_alpha confidence). Read once, at the end of the step.
- inconclusive: otherwise; and always when an arm has too few samples, when neither has any, or
  when the arms ran at loads too different to compare.

The guarantee: for a candidate no worse than the reference on every metric, the chance that any
look of any judged step rolls it back is at most `policy.alpha` (alpha is split over the `steps`
judged in the rollout and over the metrics; within a step the confidence sequence covers every
look, however many).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from evaluation.judge import signals
from evaluation.judge.estimators import (
    Estimate,
    Floats,
    SortedSample,
    compare,
    mean_summary,
    rate,
    ratio_summary,
    shift,
    stratum_weights,
)
from evaluation.judge.policy import DEFAULT_POLICY, Direction, Kind, MetricPolicy, Policy
from evaluation.judge.report import Decision, MetricVerdict, Outcome, Report
from evaluation.judge.samples import ArmSamples
from evaluation.judge.sequential import fixed_bound, mixture_bound

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


class _Unresolved(Exception):
    """A metric that cannot be judged on this data; its message is the verdict's rule."""


def judge(
    baseline: ArmSamples,
    candidate: ArmSamples,
    policy: Policy = DEFAULT_POLICY,
    *,
    final: bool,
    steps: int,
    control: ArmSamples | None = None,
    last_step: bool = False,
) -> Report:
    """Compares the candidate's samples of one step with the baseline's.

    `final=False` is an interim look (every engine tick): the decision is ROLLBACK when a metric
    fails, else CONTINUE. `final=True` is the end of the step (bake time and minimum samples
    met): ROLLBACK when a metric fails; PROMOTE when every blocking metric with data passes (the
    step passed: the engine goes on to the next step, or promotes after the last); otherwise
    CONTINUE when more steps follow (a larger share will settle what this one could not; nothing
    failed) or HOLD for a person when this is the `last_step` judged. A metric neither arm has
    data for (no tool calls on the route, no feedback) does not apply; a step with no data at
    all HOLDs.

    `steps` is how many steps of this rollout are judged (the default plan's 5%, 25% and 50%:
    3); each gets an equal share of `policy.alpha`. Looks need no count: the bounds hold at
    every look (see `sequential`).

    `control` is a second deployment of the baseline at the candidate's weight on its own
    replicas. When given, load-sensitive metrics compare the candidate with it like for like, and
    the others with the baseline and control pooled.
    """
    if steps < 1:
        raise ValueError("steps must be at least 1 (the number of judged steps in the rollout)")
    alpha = policy.alpha_per_metric(steps)
    pooled = baseline if control is None else ArmSamples.concat(baseline, control)
    load_arms = _Arms(
        control if control is not None else baseline,
        candidate,
        "control" if control is not None else "baseline",
    )
    other_arms = _Arms(pooled, candidate, "baseline" if control is None else "baseline+control")
    prepared = _Prepared(policy)
    verdicts = tuple(
        _verdict(
            metric,
            load_arms if metric.load_sensitive else other_arms,
            prepared,
            alpha=alpha,
            final=final,
        )
        for metric in policy.metrics
    )
    decision, reason = _decide(verdicts, policy.metrics, final=final, last_step=last_step)
    return Report(verdicts, decision, reason, final=final, alpha_per_metric=alpha)


def _verdict(
    metric: MetricPolicy, arms: _Arms, prepared: _Prepared, *, alpha: float, final: bool
) -> MetricVerdict:
    policy = prepared.policy
    margin = math.log1p(metric.margin) if metric.relative else metric.margin
    sign = 1.0 if metric.direction == Direction.LOWER_IS_BETTER else -1.0
    try:
        estimate = _estimate(metric, arms, prepared)
    except _Unresolved as unresolved:
        return _inconclusive(metric, arms, str(unresolved))
    if estimate.n_reference < metric.min_samples or estimate.n_candidate < metric.min_samples:
        return _inconclusive(
            metric,
            arms,
            f"{TOO_FEW_SAMPLES}: {metric.min_samples} per arm needed, "
            f"{estimate.n_reference} ({arms.name}) and {estimate.n_candidate} (candidate) so far",
            estimate,
        )
    bound = mixture_bound(estimate.se, alpha=alpha, scale=margin)
    harm = sign * estimate.theta
    pass_bound = harm + fixed_bound(estimate.se, alpha=policy.pass_alpha)
    low, high = estimate.theta - bound, estimate.theta + bound
    difference = _difference(metric, estimate)
    if harm - bound > 0 and harm > margin:
        outcome = Outcome.FAIL
        rule = (
            f"worse beyond doubt (a bound valid at every look): {_show(metric, difference)} "
            f"against the "
            f"{arms.name}, interval {_show(metric, _natural(metric, low))} to "
            f"{_show(metric, _natural(metric, high))} excludes no change, beyond the "
            f"{_show_margin(metric)} margin"
        )
    elif pass_bound < margin:
        outcome = Outcome.PASS
        rule = (
            f"within the {_show_margin(metric)} margin: worse by at most "
            f"{_show(metric, _natural(metric, pass_bound))} with "
            f"{1 - policy.pass_alpha:.0%} confidence"
            + ("" if final else " (provisional until the step ends)")
        )
    else:
        outcome = Outcome.INCONCLUSIVE
        rule = (
            f"not settled: {_show(metric, difference)} against the {arms.name}; could be worse "
            f"by up to {_show(metric, _natural(metric, pass_bound))}, margin "
            f"{_show_margin(metric)}"
        )
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
        pass_bound=_natural(metric, pass_bound),
        reference=arms.name,
    )


class _Prepared:
    """What the metrics of one call share, computed once: each arm's masks and strata, and each
    column's values sorted (the three TTFT quantiles read one sort)."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self._cache: dict[tuple[object, ...], object] = {}

    def masks(self, arm: ArmSamples) -> signals.ArmMasks:
        key = ("masks", id(arm))
        if key not in self._cache:
            self._cache[key] = signals.ArmMasks.of(arm)
        return self._cache[key]  # type: ignore[return-value]

    def served(self, arm: ArmSamples) -> signals.Mask:
        return self.masks(arm).served

    def strata(self, arm: ArmSamples) -> npt.NDArray[np.int64]:
        key = ("strata", id(arm))
        if key not in self._cache:
            self._cache[key] = signals.strata(arm)
        return self._cache[key]  # type: ignore[return-value]

    def column(self, arm: ArmSamples, signal: str) -> tuple[Floats, signals.Mask]:
        values = np.asarray(getattr(arm, signal), dtype=np.float64)
        return values, self.served(arm) & np.isfinite(values)

    def paired(self, arms: _Arms, signal: str, *, stratified: bool) -> _Paired:
        """Both arms' values of a column, the reference weighted to the candidate's strata."""
        key = ("paired", id(arms.reference), id(arms.candidate), signal, stratified)
        if key not in self._cache:
            self._cache[key] = self._pair(arms, signal, stratified=stratified)
        paired = self._cache[key]
        if isinstance(paired, _Unresolved):
            raise paired
        return paired  # type: ignore[return-value]

    def _pair(self, arms: _Arms, signal: str, *, stratified: bool) -> _Paired | _Unresolved:
        ref_values, ref_mask = self.column(arms.reference, signal)
        cand_values, cand_mask = self.column(arms.candidate, signal)
        if not ref_mask.any() and not cand_mask.any():
            return _Unresolved(NO_DATA)
        if not ref_mask.any() or not cand_mask.any():
            return _Unresolved(f"no data in the {arms.name if not ref_mask.any() else 'candidate'}")
        if not stratified:
            return _Paired(ref_values[ref_mask], None, cand_values[cand_mask])
        policy = self.policy
        weights = stratum_weights(
            self.strata(arms.reference)[ref_mask],
            self.strata(arms.candidate)[cand_mask],
            min_stratum=policy.min_stratum,
        )
        if min(weights.cover_reference, weights.cover_candidate) < policy.min_overlap:
            return _Unresolved(
                f"the arms ran at different loads: the concurrency and prompt-length strata "
                f"both fill hold {weights.cover_reference:.0%} of the {arms.name}'s and "
                f"{weights.cover_candidate:.0%} of the candidate's requests (at least "
                f"{policy.min_overlap:.0%} needed); a control arm compares like for like"
            )
        ref_keep, cand_keep = weights.reference > 0, weights.candidate > 0
        return _Paired(
            ref_values[ref_mask][ref_keep],
            weights.reference[ref_keep],
            cand_values[cand_mask][cand_keep],
        )

    def sorted(
        self, arms: _Arms, signal: str, *, stratified: bool
    ) -> tuple[SortedSample, SortedSample]:
        key = ("sorted", id(arms.reference), id(arms.candidate), signal, stratified)
        if key not in self._cache:
            paired = self.paired(arms, signal, stratified=stratified)
            self._cache[key] = (
                SortedSample.of(paired.reference, paired.reference_weights),
                SortedSample.of(paired.candidate),
            )
        return self._cache[key]  # type: ignore[return-value]


@dataclass(frozen=True)
class _Paired:
    reference: Floats
    reference_weights: Floats | None
    candidate: Floats


def _estimate(metric: MetricPolicy, arms: _Arms, prepared: _Prepared) -> Estimate:
    reference, candidate = arms.reference, arms.candidate
    kind = Kind(metric.kind)
    if kind is Kind.RATE:
        ref = signals.rate_counts(reference, metric.signal, prepared.masks(reference))
        cand = signals.rate_counts(candidate, metric.signal, prepared.masks(candidate))
        if ref.eligible == 0 and cand.eligible == 0:
            raise _Unresolved(NO_DATA)
        return rate(ref.events, ref.eligible, cand.events, cand.eligible)
    if kind is Kind.RATIO:
        ref_mask, cand_mask = prepared.served(reference), prepared.served(candidate)
        ref_summary = ratio_summary(
            reference.cost[ref_mask], reference.output_tokens[ref_mask] / 1e6
        )
        cand_summary = ratio_summary(
            candidate.cost[cand_mask], candidate.output_tokens[cand_mask] / 1e6
        )
        if math.isnan(ref_summary.scaled) and math.isnan(cand_summary.scaled):
            raise _Unresolved(NO_DATA)
        if math.isnan(ref_summary.scaled) or math.isnan(cand_summary.scaled):
            raise _Unresolved("no cost or no output tokens recorded in one arm")
        return compare(ref_summary, cand_summary)
    # Strata adjust quantiles and means of load-sensitive columns; a rank shift is read plain.
    stratified = metric.load_sensitive and kind is not Kind.SHIFT
    if kind is Kind.QUANTILE:
        ref_sorted, cand_sorted = prepared.sorted(arms, metric.signal, stratified=stratified)
        q = float(metric.quantile or 0.5)  # MetricPolicy makes sure a quantile metric has one
        return compare(ref_sorted.quantile(q), cand_sorted.quantile(q))
    paired = prepared.paired(arms, metric.signal, stratified=stratified)
    if kind is Kind.SHIFT:
        return shift(paired.reference, paired.candidate)
    ref_summary = mean_summary(paired.reference, paired.reference_weights)
    cand_summary = mean_summary(paired.candidate, None)
    if math.isnan(ref_summary.scaled) or math.isnan(cand_summary.scaled):
        raise _Unresolved("a mean of zero cannot be compared as a ratio")
    return compare(ref_summary, cand_summary)


def _inconclusive(
    metric: MetricPolicy, arms: _Arms, rule: str, estimate: Estimate | None = None
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


def _show_margin(metric: MetricPolicy) -> str:
    return _show(metric, metric.margin).lstrip("+")
