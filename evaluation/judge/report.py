"""What the judge says: a verdict per metric and one decision, serialisable to JSON and back so
that a stored verdict can be compared with one recomputed from the stored samples."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Outcome(StrEnum):
    PASS = "pass"  # noqa: S105 (a verdict, not a password)
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"


class Decision(StrEnum):
    CONTINUE = "continue"  # keep collecting (interim), or go on to the next step (see judge())
    PROMOTE = "promote"  # every metric passed: the step passed
    HOLD = "hold"  # the last judged step ended with something unresolved: a person decides
    ROLLBACK = "rollback"  # a metric is worse beyond doubt and beyond its margin


@dataclass(frozen=True)
class MetricVerdict:
    metric: str
    outcome: Outcome
    n_baseline: int  # samples of the reference arm (baseline, control, or both) after exclusions
    n_candidate: int
    baseline: float  # the estimate per arm (ms, tokens, dollars, or a share); NaN when no data
    candidate: float
    # candidate / baseline - 1 for relative metrics, candidate - baseline for rates and shifts
    difference: float
    # The anytime-valid interval of the difference at this metric's share of alpha: the
    # rollback rule reads its better end against the fail margin. (NaN, NaN) when there was
    # too little data.
    interval: tuple[float, float]
    threshold: float  # the fail margin, signed in the worse direction
    rule: str  # one sentence: which rule fired, or why none could
    relative: bool = True
    # How much worse the candidate could be (positive = worse, whatever the direction), from the
    # anytime-valid bound at pass_alpha that a pass reads against the pass margin.
    pass_bound: float = math.nan
    reference: str = "baseline"  # which arm the candidate was compared with
    pass_threshold: float = math.nan  # the pass margin, signed in the worse direction
    alpha: float = math.nan  # this metric's share of the rollout's alpha

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "outcome": str(self.outcome),
            "n_baseline": self.n_baseline,
            "n_candidate": self.n_candidate,
            "baseline": _json_float(self.baseline),
            "candidate": _json_float(self.candidate),
            "difference": _json_float(self.difference),
            "interval": [_json_float(self.interval[0]), _json_float(self.interval[1])],
            "threshold": _json_float(self.threshold),
            "rule": self.rule,
            "relative": self.relative,
            "pass_bound": _json_float(self.pass_bound),
            "reference": self.reference,
            "pass_threshold": _json_float(self.pass_threshold),
            "alpha": _json_float(self.alpha),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MetricVerdict:
        low, high = data["interval"]
        return cls(
            metric=str(data["metric"]),
            outcome=Outcome(data["outcome"]),
            n_baseline=int(data["n_baseline"]),
            n_candidate=int(data["n_candidate"]),
            baseline=_float(data["baseline"]),
            candidate=_float(data["candidate"]),
            difference=_float(data["difference"]),
            interval=(_float(low), _float(high)),
            threshold=_float(data["threshold"]),
            rule=str(data["rule"]),
            relative=bool(data.get("relative", True)),
            pass_bound=_float(data.get("pass_bound")),
            reference=str(data.get("reference", "baseline")),
            pass_threshold=_float(data.get("pass_threshold")),
            alpha=_float(data.get("alpha")),
        )


@dataclass(frozen=True)
class Report:
    verdicts: tuple[MetricVerdict, ...]
    decision: Decision
    reason: str
    final: bool = False
    scheduled: bool = False  # one of the rollout's scheduled looks (see `Policy.fail_alphas`)
    # The judge's share of the rollout's alpha, split over the metrics by weight (each verdict
    # names its own).
    alpha_per_metric: float = math.nan
    # Replicas judged without, each with why (`replicas`): a host for a person to look at.
    set_aside: tuple[str, ...] = ()

    def verdict(self, metric: str) -> MetricVerdict:
        for verdict in self.verdicts:
            if verdict.metric == metric:
                return verdict
        raise KeyError(f"no verdict for metric {metric!r}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: NaN and infinities become None."""
        return {
            "decision": str(self.decision),
            "reason": self.reason,
            "final": self.final,
            "scheduled": self.scheduled,
            "alpha_per_metric": _json_float(self.alpha_per_metric),
            "verdicts": [v.to_dict() for v in self.verdicts],
            "set_aside": list(self.set_aside),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        return cls(
            verdicts=tuple(MetricVerdict.from_dict(v) for v in data["verdicts"]),
            decision=Decision(data["decision"]),
            reason=str(data["reason"]),
            final=bool(data.get("final", False)),
            scheduled=bool(data.get("scheduled", False)),
            alpha_per_metric=_float(data.get("alpha_per_metric")),
            set_aside=tuple(str(line) for line in data.get("set_aside", ())),
        )


def _json_float(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def _float(value: object) -> float:
    return math.nan if value is None else float(value)  # type: ignore[arg-type]
