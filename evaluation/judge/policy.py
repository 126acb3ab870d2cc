"""What the judge compares and how strict it is: one `MetricPolicy` per metric, one `Policy`
per rollout.

Margins are practical thresholds: "p95 TTFT no more than 10% worse" is a relative margin of 0.10
on a quantile; "error rate no more than 1 point higher" is an absolute margin of 0.01 on a rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Kind(StrEnum):
    QUANTILE = "quantile"  # a quantile of a latency column, compared as a ratio
    MEAN = "mean"  # the mean of a column per request, compared as a ratio
    RATIO = "ratio"  # dollars per million output tokens, compared as a ratio
    SHIFT = "shift"  # a rank test: P(candidate > baseline) - 1/2, ties counted half
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
    Kind.SHIFT: frozenset({"ttft_ms", "tpot_ms", "e2e_ms", "output_tokens"}),
    Kind.RATE: frozenset(
        {"error", "timeout_abort", "truncation", "tool_success", "rejection", "feedback_positive"}
    ),
}
# Ratios and quantiles are relative (candidate / reference - 1); shifts and rates are absolute.
RELATIVE_KINDS = frozenset({Kind.QUANTILE, Kind.MEAN, Kind.RATIO})


@dataclass(frozen=True)
class MetricPolicy:
    name: str  # how reports call it, e.g. "ttft_p95"
    kind: Kind
    signal: str  # the column or named rate it measures (see SIGNALS)
    direction: Direction
    # The practical threshold: relative for quantiles, means and ratios (0.10 = 10% worse),
    # absolute for rates (0.01 = one point) and shifts (0.05 = P(worse) above 0.55).
    margin: float
    min_samples: int = 200  # per arm, after exclusions; fewer is "too few samples"
    quantile: float | None = None  # for Kind.QUANTILE only
    # Load-sensitive metrics (latencies) are compared within concurrency and prompt-length
    # strata, and against the control arm when there is one.
    load_sensitive: bool = False
    # Whether an unresolved verdict holds the last judged step for a person. Metrics that
    # rarely settle within a step (a p99; sparse user feedback) are better left non-blocking:
    # they can still roll a candidate back, but their silence does not stop a healthy one.
    blocking: bool = True

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
        if self.min_samples < 1:
            raise ValueError(f"metric {self.name!r}: min_samples must be at least 1")

    @property
    def relative(self) -> bool:
        return Kind(self.kind) in RELATIVE_KINDS


def _latency(signal: str, q: float, margin: float, *, blocking: bool = True) -> MetricPolicy:
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
    )


def _rate(
    signal: str,
    margin: float,
    *,
    higher_is_better: bool = False,
    min_samples: int = 200,
    blocking: bool = True,
) -> MetricPolicy:
    direction = Direction.HIGHER_IS_BETTER if higher_is_better else Direction.LOWER_IS_BETTER
    return MetricPolicy(
        f"{signal}_rate", Kind.RATE, signal, direction, margin, min_samples, blocking=blocking
    )


LOWER = Direction.LOWER_IS_BETTER


@dataclass(frozen=True)
class Policy:
    metrics: tuple[MetricPolicy, ...]
    # The family-wise false-rollback rate per rollout: the chance that a candidate no worse than
    # the baseline on every metric is rolled back at any look of any judged step. It is split
    # evenly over the judged steps and the metrics (Bonferroni).
    alpha: float = 0.01
    # The error of a "pass" at the end of a step (the chance of passing a metric that is worse
    # than its margin). Every metric must pass for the step to pass, so this needs no split over
    # the metrics (an intersection-union test).
    pass_alpha: float = 0.05
    # Concurrency strata with fewer samples than this in either arm are left out of the
    # comparison; if what is left holds less than `min_overlap` of either arm's samples the
    # arms ran at loads too different to compare, and the metric is inconclusive.
    min_stratum: int = 10
    min_overlap: float = 0.5

    def __post_init__(self) -> None:
        if not self.metrics:
            raise ValueError("a policy needs at least one metric")
        names = [m.name for m in self.metrics]
        if len(set(names)) != len(names):
            raise ValueError(f"metric names must be unique, got {names}")
        if not 0 < self.alpha < 1 or not 0 < self.pass_alpha < 1:
            raise ValueError("alpha and pass_alpha must be in (0, 1)")
        if self.min_stratum < 1 or not 0 < self.min_overlap <= 1:
            raise ValueError("min_stratum must be at least 1 and min_overlap in (0, 1]")

    def alpha_per_metric(self, steps: int) -> float:
        return self.alpha / steps / len(self.metrics)


DEFAULT_METRICS: tuple[MetricPolicy, ...] = (
    _latency("ttft_ms", 0.50, 0.10),
    _latency("ttft_ms", 0.95, 0.10),
    _latency("ttft_ms", 0.99, 0.15, blocking=False),
    _latency("tpot_ms", 0.50, 0.10),
    _latency("tpot_ms", 0.95, 0.10),
    # End-to-end time mixes TTFT, TPOT and output length, each judged on its own above; the
    # spread of output lengths keeps its p95 from settling within 10% in one step, so it may
    # roll back but does not hold a step.
    _latency("e2e_ms", 0.95, 0.10, blocking=False),
    MetricPolicy("output_tokens_mean", Kind.MEAN, "output_tokens", LOWER, 0.10),
    MetricPolicy("output_tokens_shift", Kind.SHIFT, "output_tokens", LOWER, 0.05),
    MetricPolicy("cost_per_request", Kind.MEAN, "cost", LOWER, 0.10),
    MetricPolicy("cost_per_mtok", Kind.RATIO, "cost_per_mtok", LOWER, 0.10),
    _rate("error", 0.01),
    _rate("timeout_abort", 0.01),
    _rate("truncation", 0.02),
    _rate("rejection", 0.02),
    _rate("tool_success", 0.03, higher_is_better=True),
    # Feedback comes from a few requests in a hundred, when an application sends it at all.
    _rate("feedback_positive", 0.05, higher_is_better=True, min_samples=50, blocking=False),
)

DEFAULT_POLICY = Policy(metrics=DEFAULT_METRICS)
