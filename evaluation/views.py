"""The A/B report page of a rollout: per-arm table with verdict badges, charts, cost and fleet
signals. While the rollout is live the page polls its report fragment; it stops (286) once the
rollout has ended."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HTMX_STOP_POLLING

from evaluation import charts, report, selectors
from rollouts.choices import TERMINAL_STATES
from tenants.web import domain_errors_as_http

POLL_EVERY = "5s"
FLEET_ROWS = (
    ("kv_cache_usage", "KV-cache usage", "{:.0%}"),
    ("waiting_requests", "Waiting requests", "{:.0f}"),
    ("preemptions_per_min", "Preemptions per minute", "{:.1f}"),
)


def show(value: float | None, unit: str) -> str:
    if value is None:
        return ""
    if unit == "%":
        return f"{value:.2%}"
    if unit == "$":
        return f"${value:.6g}"
    if unit == "ms":
        return f"{value:.1f} ms"
    return f"{value:.1f}"


def show_change(value: float | None, relative: bool) -> str:
    if value is None:
        return ""
    return f"{value:+.1%}" if relative else f"{value:+.3g}"


def table_rows(built: report.Report) -> list[dict[str, Any]]:
    verdicts = built.metric_verdicts
    rows = []
    for name, label, unit in report.ROWS:
        verdict = verdicts.get(name) or {}
        relative = bool(verdict.get("relative", True))
        low, high = (verdict.get("interval") or [None, None])[:2]
        difference = show_change(verdict.get("difference"), relative)
        if difference and low is not None and high is not None:
            difference += f" ({show_change(low, relative)} to {show_change(high, relative)})"
        rows.append(
            {
                "name": name,
                "label": label,
                "baseline": show(built.arms["baseline"].metric(name), unit),
                "canary": show(built.arms["canary"].metric(name), unit),
                "outcome": verdict.get("outcome", ""),
                "rule": verdict.get("rule", ""),
                "difference": difference,
                "threshold": _margins(verdict, relative),
            }
        )
    return rows


def _margins(verdict: dict[str, Any], relative: bool) -> str:
    """The fail margin, and the pass margin where it differs (verdicts stored before the two
    were told apart have one)."""
    fail = show_change(verdict.get("threshold"), relative)
    passes = show_change(verdict.get("pass_threshold"), relative)
    if not passes or passes == fail:
        return fail
    return f"fail {fail}, pass {passes}"


def fleet_arms(built: report.Report) -> tuple[str, ...]:
    """The arms the fleet table has a column for: a control arm only when the rollout has one."""
    return selectors.ARMS if built.rollout.control_id is not None else selectors.ARMS[:2]


def fleet_rows(built: report.Report) -> list[tuple[str, list[str | None]]]:
    rows = []
    for name, label, form in FLEET_ROWS:
        cells: list[str | None] = []
        for arm in fleet_arms(built):
            signals = built.signals.get(arm)
            latest = signals.latest(name) if signals and signals.available else None
            if signals is None or not signals.available:
                cells.append(None)
            else:
                cells.append("—" if latest is None else form.format(latest))
        rows.append((label, cells))
    return rows


def _step(request: HttpRequest, steps: int) -> int | None:
    raw = request.GET.get("step", "")
    if not raw:
        return None
    if not raw.isdigit() or not 1 <= int(raw) <= steps:
        raise Http404(f"no step {raw!r}: this rollout has steps 1 to {steps}")
    return int(raw) - 1


@require_GET
@login_required
@vary_on_headers("HX-Request")
def rollout_report(request: HttpRequest, rollout_id: int) -> HttpResponse:
    with domain_errors_as_http():
        rollout = selectors.report_rollout(request.user, rollout_id)
    steps = rollout.parsed_plan.steps
    built = report.build(rollout, step=_step(request, len(steps)))
    context: dict[str, Any] = {
        "rollout": rollout,
        "report": built,
        "steps": [(i + 1, s.weight, i in built.judged_steps) for i, s in enumerate(steps)],
        "step_number": built.step + 1,
        "rows": table_rows(built),
        "fleet_arms": fleet_arms(built),
        "fleet_rows": fleet_rows(built),
        "charts": charts.all_charts(built),
        "is_live": rollout.state not in TERMINAL_STATES,
        "poll_every": POLL_EVERY,
    }
    if request.headers.get("HX-Request"):
        response = render(request, "evaluation/rollout_report.html#report-body", context)
        if not context["is_live"]:
            response.status_code = HTMX_STOP_POLLING
        return response
    return render(request, "evaluation/rollout_report.html", context)
