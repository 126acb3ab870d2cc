"""What the judge compares and how strict it is: one `MetricPolicy` per metric, one `Policy`
per rollout.

Margins are practical thresholds: "p95 TTFT no more than 10% worse" is a relative margin of 0.10
on a quantile; "error rate no more than 1 point higher" is an absolute margin of 0.01 on a rate.
Each metric states two hypotheses with them: the candidate is rolled back once it is shown worse
than its fail margin, and a step passes once it is shown worse by less than its pass margin. The
pass margin is the wider one: what lies between them is an indifference zone, where a candidate
may pass (the data did not show it worse than the pass margin) or be rolled back (it was shown
worse than the fail margin); below the fail margin a candidate is rolled back with chance at most
alpha, above the pass margin it passes with chance at most pass_alpha.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum


class Kind(StrEnum):
    QUANTILE = "quantile"  # a quantile of a latency column, compared as a ratio
    MEAN = "mean"  # the mean of a column per request, compared as a ratio
    RATIO = "ratio"  # dollars per million output tokens, compared as a ratio
    RATE = "rate"  # a share of requests, compared as a difference in points


class Direction(StrEnum):
    LOWER_IS_BETTER = "lower_is_better"
    HIGHER_IS_BETTER = "higher_is_better"


# What each kind may measure. Rates are named events; see `signals.RATES` for their
# numerators and denominators.
SIGNALS: dict[Kind, frozenset[str]] = {
    Kind.QUANTILE: frozenset({"ttft_ms", "tpot_ms", "e2e_ms"}),
    Kind.MEAN: frozenset({"ttft_ms", "tpot_ms", "e2e_ms", "output_tokens", "cost"}),
    Kind.RATIO: frozenset({"cost_per_mtok"}),
    Kind.RATE: frozenset(
        {"error", "timeout_abort", "truncation", "tool_success", "feedback_positive"}
    ),
}
# Ratios and quantiles are relative (candidate / reference - 1); rates are absolute.
RELATIVE_KINDS = frozenset({Kind.QUANTILE, Kind.MEAN, Kind.RATIO})


@dataclass(frozen=True)
class MetricPolicy:
    name: str  # how reports call it, e.g. "ttft_p95"
    kind: Kind
    signal: str  # the column or named rate it measures (see SIGNALS)
    direction: Direction
    # The fail margin: relative for quantiles, means and ratios (0.10 = 10% worse), absolute
    # for rates (0.01 = one point). A rollback needs the candidate shown worse than this.
    margin: float
    min_samples: int = 200  # per arm, after exclusions; fewer is "too few samples"
    quantile: float | None = None  # for Kind.QUANTILE only
    # Load-sensitive metrics (latencies) are compared against the control arm when there is one
    # (its replicas carry the candidate's share of the load); otherwise against the baseline.
    load_sensitive: bool = False
    # Whether an unresolved verdict holds the last judged step for a person. Metrics that
    # rarely settle within a step (a p99; sparse user feedback) are better left non-blocking:
    # they can still roll a candidate back, but their silence does not stop a healthy one.
    blocking: bool = True
    # The pass margin (same scale, at least the fail margin; the fail margin when not given): a
    # step passes this metric once the candidate is shown worse by less than this.
    pass_margin: float | None = None
    # This metric's share of the judge's alpha, relative to the others'.
    weight: float = 1.0

    def __post_init__(self) -> None:
        kind = Kind(self.kind)
        Direction(self.direction)
        if self.signal not in SIGNALS[kind]:
            raise ValueError(
                f"metric {self.name!r}: a {kind} metric measures one of "
                f"{sorted(SIGNALS[kind])}, not {self.signal!r}"
            )
        if (kind is Kind.QUANTILE) != (self.quantile is not None):
            raise ValueError(f"metric {self.name!r}: give quantile for quantile metrics only")
        if self.quantile is not None and not 0 < self.quantile < 1:
            raise ValueError(f"metric {self.name!r}: quantile must be in (0, 1)")
        if not self.margin > 0:
            raise ValueError(f"metric {self.name!r}: margin must be positive")
        if self.pass_margin is not None and self.pass_margin < self.margin:
            raise ValueError(f"metric {self.name!r}: pass_margin must be at least the margin")
        if not self.weight > 0:
            raise ValueError(f"metric {self.name!r}: weight must be positive")
        if self.min_samples < 1:
            raise ValueError(f"metric {self.name!r}: min_samples must be at least 1")

    @property
    def relative(self) -> bool:
        return Kind(self.kind) in RELATIVE_KINDS

    @property
    def passes_below(self) -> float:
        return self.margin if self.pass_margin is None else self.pass_margin


def _latency(
    signal: str,
    q: float,
    margin: float,
    *,
    pass_margin: float | None = None,
    blocking: bool = True,
    weight: float = 1.0,
) -> MetricPolicy:
    # A tail quantile's error is read from the samples beyond it: at least 50 of them (p95
    # needs 1,000 requests per arm, p99 5,000), or its error is itself too noisy to trust.
    name = f"{signal.removesuffix('_ms')}_p{round(q * 100)}"
    min_samples = max(200, round(50 / (1 - q)))
    return MetricPolicy(
        name,
        Kind.QUANTILE,
        signal,
        Direction.LOWER_IS_BETTER,
        margin,
        min_samples,
        quantile=q,
        load_sensitive=True,
        blocking=blocking,
        pass_margin=pass_margin,
        weight=weight,
    )


def _rate(
    signal: str,
    margin: float,
    *,
    pass_margin: float | None = None,
    higher_is_better: bool = False,
    min_samples: int = 200,
    blocking: bool = True,
    weight: float = 1.0,
) -> MetricPolicy:
    direction = Direction.HIGHER_IS_BETTER if higher_is_better else Direction.LOWER_IS_BETTER
    return MetricPolicy(
        f"{signal}_rate",
        Kind.RATE,
        signal,
        direction,
        margin,
        min_samples,
        blocking=blocking,
        pass_margin=pass_margin,
        weight=weight,
    )


LOWER = Direction.LOWER_IS_BETTER


@dataclass(frozen=True)
class Policy:
    metrics: tuple[MetricPolicy, ...]
    # The rollout's error budget: the chance that a candidate no worse than the baseline (and
    # within its SLO limits) is rolled back by anything the engine does, at any look of any
    # step. `guardrail_share` of it goes to the SLO guardrails (`guardrails`), the rest to the
    # judge, split over the metrics by weight (Bonferroni). Each metric's share is spent two
    # ways (`fail_alphas`): `scheduled_share` of it on a fixed schedule of looks, one at the end
    # of each judged step (the step's first final look, on the evidence of every judged step so
    # far), the rest on an anytime-valid bound that every other look reads (interim ticks, a
    # held or resumed step). The union of the two stays within the share: a fixed look reads a
    # bound of about 3.4 standard errors where the anytime one needs 4.2 or more, so the step's
    # end, where the evidence is, gets most of it, and a gross regression is still caught mid-step.
    # `scheduled_split` divides the scheduled share over a plan of that many judged steps (even
    # otherwise). The default plan's 25% step gets half: its look is where a regression must be
    # caught before half the traffic sees it. The 5% step's look reads a sixth of the 25% one's
    # evidence, so alpha there buys only regressions gross enough for the anytime bound too, and
    # the 50% one's reads 2.7 times as much, where a regression the 25% look nearly caught
    # stands 1.6 times as many standard errors out.
    alpha: float = 0.01
    guardrail_share: float = 0.2
    scheduled_share: float = 0.75
    scheduled_split: tuple[float, ...] = (0.25, 0.5, 0.25)
    # The error of a pass (the chance of passing a metric that is worse than its pass margin),
    # spent like each metric's fail alpha (`pass_alphas`): on the step's scheduled look and on an
    # anytime-valid bound, so that re-reading on every tick of a held or resumed step cannot
    # inflate it. Every metric must pass for a step to pass, so this needs no split over the
    # metrics (an intersection-union test).
    pass_alpha: float = 0.05

    def __post_init__(self) -> None:
        if not self.metrics:
            raise ValueError("a policy needs at least one metric")
        names = [m.name for m in self.metrics]
        if len(set(names)) != len(names):
            raise ValueError(f"metric names must be unique, got {names}")
        if not 0 < self.alpha < 1 or not 0 < self.pass_alpha < 1:
            raise ValueError("alpha and pass_alpha must be in (0, 1)")
        if not 0 < self.guardrail_share < 1:
            raise ValueError("guardrail_share must be in (0, 1)")
        if not 0 <= self.scheduled_share < 1:
            raise ValueError("scheduled_share must be in [0, 1)")
        split = self.scheduled_split
        if split and (min(split) <= 0 or not math.isclose(sum(split), 1.0)):
            raise ValueError(
                f"scheduled_split must be positive shares that add up to 1, got {split}"
            )

    @property
    def judge_alpha(self) -> float:
        return self.alpha * (1 - self.guardrail_share)

    @property
    def guardrail_alpha(self) -> float:
        return self.alpha * self.guardrail_share

    def alpha_of(self, metric: MetricPolicy) -> float:
        return self.judge_alpha * metric.weight / sum(m.weight for m in self.metrics)

    def fail_alphas(self, metric: MetricPolicy, look: ScheduledLook | None) -> tuple[float, float]:
        """The metric's fail alpha for its anytime-valid bound, and for this scheduled `look`
        (0 when the look is not a scheduled one: then nothing)."""
        return self._spent(self.alpha_of(metric), look, self.scheduled_split)

    def pass_alphas(self, look: ScheduledLook | None) -> tuple[float, float]:
        """The pass alpha spent the same two ways, the scheduled share evenly over the looks: a
        pass at a step's scheduled look reads a fixed bound, any other an anytime-valid one.
        (A wrong pass at any step costs alike: the next step's traffic.)"""
        return self._spent(self.pass_alpha, look, ())

    def _spent(
        self, alpha: float, look: ScheduledLook | None, split: tuple[float, ...]
    ) -> tuple[float, float]:
        """`alpha` for the anytime-valid bound and for `look`: the scheduled share by `split`
        where it has one share a look, evenly otherwise."""
        anytime = alpha * (1 - self.scheduled_share)
        if look is None:
            return anytime, 0.0
        share = split[look.index] if len(split) == look.looks else 1 / look.looks
        return anytime, alpha * self.scheduled_share * share


@dataclass(frozen=True)
class ScheduledLook:
    """One of a rollout's fixed looks: the first final look of a judged step, on the evidence of
    every judged step so far."""

    index: int  # among the plan's judged steps, from 0
    looks: int  # how many judged steps the plan has

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.looks:
            raise ValueError(f"look {self.index} of {self.looks}: no such scheduled look")

    def describe(self) -> str:
        return f"the scheduled look of judged step {self.index + 1} of {self.looks}"


# One metric a question: the mean of output tokens answers "longer answers?" (its rank shift
# asked the same), cost per million tokens answers "dearer to serve?" (cost per request is it
# times the length, already judged), and end-to-end time is TTFT, TPOT and length, each judged.
# Refusals by the gateway (budgets, shedding) are the tenants' policy, not the model's doing, and
# are no metric at all. Weights put the alpha where a regression hurts and evidence is dear.
# Fail margins are the smallest regression worth a rollback, pass margins the largest a step may
# pass with: 6% and 10% for the medians (a 5% slower median is no reason to roll back), 5% and
# 10% for the tails (a tail 20% worse must be caught within two steps, from a few thousand
# requests); for errors, timeouts and broken tool calls any increase shown beyond a tenth or
# half a point fails, and a step passes them within a point (tools: three).
# The weights (13 in all) give TTFT's tail 4 (p90 3, p95 1: the p90's error is two thirds of the
# p95's, so alpha there buys more of the tail), errors and tool calls 1.5 each, the other
# blocking metrics 1; a quarter each goes to what rarely decides a rollout on its
# own: the p99 (its error at the 25% step is twice the p95's, so only a tail several times worse
# shows in it, and such a tail shows in the p90 and p95 first), cost per token (it moves with
# the output length, judged on its own), truncation (it moves with the length too) and user
# feedback (sparse).
DEFAULT_METRICS: tuple[MetricPolicy, ...] = (
    _latency("ttft_ms", 0.50, 0.06, pass_margin=0.10),
    # TTFT's tail rolls back beyond 5% but does not hold a step: with stalls in it, showing it
    # within 10% at every look takes many thousands of requests an arm (measured: an equal
    # candidate held at 50% on 8,000), and its silence must not stop a healthy candidate. The
    # p90 watches the same tail where it is denser: stalls (3% of requests here, as on real
    # vLLM) sit above it, so its standard error at 3,600 requests an arm is two thirds of the
    # p95's, and a slower tail that starts below the p95 (queueing, long prompts) shows in it
    # a step earlier. p90 TTFT is also the percentile many serving SLOs are written on.
    _latency("ttft_ms", 0.90, 0.05, pass_margin=0.10, blocking=False, weight=3.0),
    _latency("ttft_ms", 0.95, 0.05, pass_margin=0.10, blocking=False, weight=1.0),
    _latency("ttft_ms", 0.99, 0.15, blocking=False, weight=0.25),
    _latency("tpot_ms", 0.50, 0.06, pass_margin=0.10),
    _latency("tpot_ms", 0.95, 0.05, pass_margin=0.10),
    MetricPolicy("output_tokens_mean", Kind.MEAN, "output_tokens", LOWER, 0.10),
    MetricPolicy("cost_per_mtok", Kind.RATIO, "cost_per_mtok", LOWER, 0.10, weight=0.25),
    _rate("error", 0.001, pass_margin=0.01, weight=1.5),
    _rate("timeout_abort", 0.001, pass_margin=0.01),
    _rate("truncation", 0.005, pass_margin=0.02, weight=0.25),
    _rate("tool_success", 0.005, pass_margin=0.03, higher_is_better=True, weight=1.5),
    # Feedback comes from a few requests in a hundred, when an application sends it at all.
    _rate(
        "feedback_positive",
        0.05,
        higher_is_better=True,
        min_samples=50,
        blocking=False,
        weight=0.25,
    ),
)

DEFAULT_POLICY = Policy(metrics=DEFAULT_METRICS)
