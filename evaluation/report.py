"""The A/B report of one rollout step: a per-arm table with the judge's verdicts beside it, the
data for the charts, the cost, and the fleet signals. The page and the API read the same report.

Every figure is computed in Postgres over the step's stored samples (a handful of aggregate
queries, whatever the number of samples); the verdicts are the judge's, as last stored. The
table's figures follow the judge's definitions (refusals and clients that left are kept out of
latencies and errors) so that a badge sits beside the number it judged.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field
from typing import Any

from django.db import connection
from django.utils import timezone

from evaluation import fleet, selectors
from evaluation.costs import UnitCost, deployment_unit_cost
from evaluation.judging import judged_steps
from evaluation.models import Verdict
from rollouts.models import Rollout

ARMS = selectors.ARMS
# Quantiles read per arm in one pass: the table's and the CDF's (every 2.5%).
CDF_QS = tuple(round(i / 40, 4) for i in range(1, 40))
QS = tuple(sorted({*CDF_QS, 0.5, 0.95, 0.99}))
SERIES_POINTS = 30
HISTOGRAM_BINS = 20

_SERVED = "status < 400 AND finish NOT IN ('rejected', 'abort', 'error')"
_NOT_REJECTED = "finish <> 'rejected'"
_LEFT = "(status = 499 OR finish = 'abort')"
_WHERE = "rollout_id = %(rollout)s AND step = %(step)s AND arm IN ('baseline', 'canary')"

_ARM_TABLE = f"""
SELECT arm,
       count(*),
       count(*) FILTER (WHERE finish = 'rejected'),
       count(*) FILTER (WHERE {_NOT_REJECTED} AND NOT {_LEFT}),
       count(*) FILTER (WHERE {_NOT_REJECTED} AND NOT {_LEFT}
                        AND (status >= 500 OR finish = 'error')),
       count(*) FILTER (WHERE {_NOT_REJECTED}),
       count(*) FILTER (WHERE {_NOT_REJECTED} AND ({_LEFT} OR status IN (408, 504))),
       count(*) FILTER (WHERE {_SERVED}),
       count(*) FILTER (WHERE {_SERVED} AND finish = 'length'),
       count(*) FILTER (WHERE {_NOT_REJECTED} AND tool NOT IN ('', 'unchecked')),
       count(*) FILTER (WHERE {_NOT_REJECTED} AND tool IN ('valid', 'no_call')),
       percentile_cont(%(qs)s::float8[]) WITHIN GROUP (ORDER BY ttft_ms) FILTER (WHERE {_SERVED}),
       percentile_cont(%(qs)s::float8[]) WITHIN GROUP (ORDER BY tpot_ms) FILTER (WHERE {_SERVED}),
       percentile_cont(%(qs)s::float8[]) WITHIN GROUP (ORDER BY e2e_ms) FILTER (WHERE {_SERVED}),
       avg(output_tokens) FILTER (WHERE {_SERVED}),
       max(output_tokens) FILTER (WHERE {_SERVED}),
       count(*) FILTER (WHERE {_SERVED} AND cost > 0),
       sum(cost) FILTER (WHERE {_SERVED} AND cost > 0),
       sum(output_tokens) FILTER (WHERE {_SERVED} AND cost > 0),
       min(ts), max(ts)
FROM evaluation_requestsample WHERE {_WHERE}
GROUP BY arm
"""  # noqa: S608 -- constant fragments only; every value is a bound parameter

_SERIES = f"""
SELECT arm, floor(extract(epoch FROM ts) / %(width)s) * %(width)s AS t,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY ttft_ms),
       percentile_cont(0.95) WITHIN GROUP (ORDER BY tpot_ms),
       count(*)
FROM evaluation_requestsample WHERE {_WHERE} AND {_SERVED}
GROUP BY arm, t ORDER BY t
"""  # noqa: S608 -- constant fragments only; every value is a bound parameter

_HISTOGRAM = f"""
SELECT arm, least(output_tokens / %(width)s, %(bins)s - 1) AS bin, count(*)
FROM evaluation_requestsample WHERE {_WHERE} AND {_SERVED}
GROUP BY arm, bin
"""  # noqa: S608 -- constant fragments only; every value is a bound parameter


@dataclass
class ArmRow:
    """One arm's figures in the step (None where it has no data)."""

    arm: str
    samples: int = 0
    rejected: int = 0
    served: int = 0
    quantiles: dict[str, dict[float, float | None]] = field(default_factory=dict)
    error_rate: float | None = None
    timeout_abort_rate: float | None = None
    truncation_rate: float | None = None
    tool_success_rate: float | None = None
    rejection_rate: float | None = None
    output_tokens_mean: float | None = None
    output_tokens_max: int | None = None
    cost_per_request: float | None = None
    cost_per_mtok: float | None = None
    feedback_positive: int = 0
    feedback_negative: int = 0
    first: dt.datetime | None = None
    last: dt.datetime | None = None

    def q(self, signal: str, q: float) -> float | None:
        return self.quantiles.get(signal, {}).get(q)

    @property
    def feedback_positive_rate(self) -> float | None:
        total = self.feedback_positive + self.feedback_negative
        return self.feedback_positive / total if total else None

    def metric(self, name: str) -> float | None:
        """The figure a judge metric of that name measures, for this arm."""
        signal, _, tail = name.rpartition("_")
        if tail.startswith("p") and tail[1:].isdigit():
            return self.q(f"{signal}_ms", int(tail[1:]) / 100)
        value = getattr(self, name, None)
        return value if isinstance(value, int | float) else None


# The table's rows: (judge metric name, label, unit).
ROWS: tuple[tuple[str, str, str], ...] = (
    ("ttft_p50", "TTFT p50", "ms"),
    ("ttft_p95", "TTFT p95", "ms"),
    ("ttft_p99", "TTFT p99", "ms"),
    ("tpot_p50", "TPOT p50", "ms"),
    ("tpot_p95", "TPOT p95", "ms"),
    ("e2e_p95", "End-to-end p95", "ms"),
    ("output_tokens_mean", "Output tokens per request", "tokens"),
    ("truncation_rate", "Truncated (finish length)", "%"),
    ("tool_success_rate", "Tool-call success", "%"),
    ("error_rate", "Errors", "%"),
    ("timeout_abort_rate", "Timeouts and aborts", "%"),
    ("rejection_rate", "Budget rejections", "%"),
    ("cost_per_request", "Cost per request", "$"),
    ("cost_per_mtok", "Cost per million output tokens", "$"),
    ("feedback_positive_rate", "Positive feedback", "%"),
)


@dataclass
class Report:
    rollout: Rollout
    step: int
    judged_steps: list[int]
    arms: dict[str, ArmRow]
    verdict: Verdict | None
    verdicts: list[Verdict]
    costs: dict[str, UnitCost]
    series: dict[str, list[tuple[float, float | None, float | None, int]]]
    histogram: dict[str, list[int]]
    histogram_width: int
    signals: dict[str, fleet.FleetSignals]

    @property
    def metric_verdicts(self) -> dict[str, dict[str, Any]]:
        if self.verdict is None:
            return {}
        return {v["metric"]: v for v in self.verdict.report.get("verdicts", [])}


def _rate(events: int, eligible: int) -> float | None:
    return events / eligible if eligible else None


def _query(sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def arm_rows(rollout_id: int, step: int) -> dict[str, ArmRow]:
    params = {"rollout": rollout_id, "step": step, "qs": list(QS)}
    rows = {arm: ArmRow(arm) for arm in ARMS}
    for record in _query(_ARM_TABLE, params):
        (arm, n, rejected, err_eligible, errors, not_rejected, timeouts, served, truncated,
         tools, tools_ok, ttft, tpot, e2e, out_mean, out_max, cost_n, cost_sum, cost_out,
         first, last) = record  # fmt: skip
        row = rows[arm]
        row.samples, row.rejected, row.served = n, rejected, served
        row.quantiles = {
            name: dict(zip(QS, values, strict=True)) if values else {}
            for name, values in (("ttft_ms", ttft), ("tpot_ms", tpot), ("e2e_ms", e2e))
        }
        row.error_rate = _rate(errors, err_eligible)
        row.timeout_abort_rate = _rate(timeouts, not_rejected)
        row.truncation_rate = _rate(truncated, served)
        row.tool_success_rate = _rate(tools_ok, tools)
        row.rejection_rate = _rate(rejected, n)
        row.output_tokens_mean = float(out_mean) if out_mean is not None else None
        row.output_tokens_max = out_max
        row.cost_per_request = cost_sum / cost_n if cost_n else None
        row.cost_per_mtok = cost_sum / cost_out * 1e6 if cost_n and cost_out else None
        row.first, row.last = first, last
    return rows


def _series(
    rollout_id: int, step: int, rows: dict[str, ArmRow]
) -> dict[str, list[tuple[float, float | None, float | None, int]]]:
    starts = [r.first for r in rows.values() if r.first]
    ends = [r.last for r in rows.values() if r.last]
    if not starts:
        return {arm: [] for arm in ARMS}
    span = (max(ends) - min(starts)).total_seconds()
    width = max(5, math.ceil(span / SERIES_POINTS))
    series: dict[str, list[tuple[float, float | None, float | None, int]]] = {a: [] for a in ARMS}
    params = {"rollout": rollout_id, "step": step, "width": width}
    for arm, t, ttft, tpot, n in _query(_SERIES, params):
        series[arm].append((float(t), ttft, tpot, n))
    return series


def _histogram(
    rollout_id: int, step: int, rows: dict[str, ArmRow]
) -> tuple[dict[str, list[int]], int]:
    top = max((r.output_tokens_max or 0 for r in rows.values()), default=0)
    width = max(1, math.ceil((top + 1) / HISTOGRAM_BINS))
    counts = {arm: [0] * HISTOGRAM_BINS for arm in ARMS}
    if top:
        params = {"rollout": rollout_id, "step": step, "width": width, "bins": HISTOGRAM_BINS}
        for arm, bin_, n in _query(_HISTOGRAM, params):
            counts[arm][int(bin_)] = n
    return counts, width


def default_step(rollout: Rollout, judged: list[int]) -> int:
    """The step a report opens on: the current one while the judge compares arms in it, else
    the last judged step the rollout reached."""
    if rollout.step_index in judged or not judged:
        return rollout.step_index
    reached = [s for s in judged if s <= rollout.step_index]
    return reached[-1] if reached else judged[0]


def step_window(
    rollout: Rollout, step: int, rows: dict[str, ArmRow]
) -> tuple[dt.datetime, dt.datetime]:
    firsts = [r.first for r in rows.values() if r.first]
    lasts = [r.last for r in rows.values() if r.last]
    end = max(lasts) if lasts else timezone.now()
    start = min(firsts) if firsts else end - dt.timedelta(minutes=5)
    return start, max(end, start + dt.timedelta(seconds=60))


def build(rollout: Rollout, *, step: int | None = None, with_signals: bool = True) -> Report:
    """`rollout` with its deployments' fleets, costs and replicas loaded (as
    `selectors.report_rollout` loads it)."""
    judged = judged_steps(rollout)
    step = default_step(rollout, judged) if step is None else step
    rows = arm_rows(rollout.pk, step)
    if rollout.control_id is None:
        del rows["control"]
    feedback = selectors.feedback_counts(rollout.pk, (step, step), max_sample_id=2**62)
    for arm, (positive, negative) in feedback.items():
        if arm in rows:
            rows[arm].feedback_positive, rows[arm].feedback_negative = positive, negative
    verdicts = list(selectors.rollout_verdicts(rollout.pk).filter(step=step))
    histogram, width = _histogram(rollout.pk, step, rows)
    deployments = {"baseline": rollout.baseline, "canary": rollout.candidate}
    if rollout.control is not None:
        deployments["control"] = rollout.control
    signals: dict[str, fleet.FleetSignals] = {}
    if with_signals:
        start, end = step_window(rollout, step, rows)
        for arm, deployment in deployments.items():
            signals[arm] = fleet.fleet_signals(fleet.deployment_instances(deployment), start, end)
    return Report(
        rollout=rollout,
        step=step,
        judged_steps=judged,
        arms=rows,
        verdict=verdicts[-1] if verdicts else None,
        verdicts=verdicts,
        costs={arm: deployment_unit_cost(d) for arm, d in deployments.items()},
        series=_series(rollout.pk, step, rows),
        histogram=histogram,
        histogram_width=width,
        signals=signals,
    )


def _json(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def as_json(report: Report) -> dict[str, Any]:
    """The report as the API returns it."""
    rollout, verdict = report.rollout, report.verdict
    arms = {}
    for arm, row in report.arms.items():
        arms[arm] = {
            "samples": row.samples,
            "rejected": row.rejected,
            "served": row.served,
            **{
                signal: {f"p{round(q * 100)}": _json(row.q(signal, q)) for q in (0.5, 0.95, 0.99)}
                for signal in ("ttft_ms", "tpot_ms", "e2e_ms")
            },
            "output_tokens_mean": _json(row.output_tokens_mean),
            "truncation_rate": _json(row.truncation_rate),
            "tool_success_rate": _json(row.tool_success_rate),
            "error_rate": _json(row.error_rate),
            "timeout_abort_rate": _json(row.timeout_abort_rate),
            "rejection_rate": _json(row.rejection_rate),
            "cost_per_request": _json(row.cost_per_request),
            "cost_per_million_output_tokens": _json(row.cost_per_mtok),
            "feedback": {"positive": row.feedback_positive, "negative": row.feedback_negative},
        }
    return {
        "rollout": {
            "id": rollout.pk,
            "state": rollout.state,
            "step_index": rollout.step_index,
            "route": rollout.route.name,
            "baseline": str(rollout.baseline.artifact),
            "candidate": str(rollout.candidate.artifact),
        },
        "step": report.step,
        "judged_steps": report.judged_steps,
        "decision": None
        if verdict is None
        else {
            "decision": verdict.decision,
            "reason": verdict.reason,
            "final": verdict.final,
            "looked_at": verdict.looked_at.isoformat(),
            "verdict_id": verdict.pk,
            "window": verdict.window,
        },
        "verdicts": verdict.report.get("verdicts", []) if verdict else [],
        "arms": arms,
        "cost": {
            arm: {
                "dollars_per_million_tokens": cost.dollars_per_million_tokens,
                "source": cost.source,
                "tokens_per_s_per_replica": cost.tokens_per_s,
                "utilisation": cost.utilisation,
            }
            for arm, cost in report.costs.items()
        },
        "fleet_signals": {
            arm: {
                "available": signals.available,
                "latest": {name: _json(signals.latest(name)) for name in fleet.SIGNALS}
                if signals.available
                else None,
            }
            for arm, signals in report.signals.items()
        },
        "history": [
            {
                "looked_at": v.looked_at.isoformat(),
                "decision": v.decision,
                "final": v.final,
                "reason": v.reason,
            }
            for v in report.verdicts
        ],
    }
