"""Reads of rollouts, for the API and the UI."""

from __future__ import annotations

from django.db.models import QuerySet

from rollouts.choices import LIVE_STATES
from rollouts.engine import ArmStats, arm_stats
from rollouts.models import Rollout


def rollout_list(*, state: str = "", route: str = "") -> QuerySet[Rollout]:
    queryset = Rollout.objects.select_related(
        "route", "candidate__artifact", "baseline__artifact"
    ).order_by("-created_at")
    if state == "live":
        queryset = queryset.filter(state__in=LIVE_STATES)
    elif state:
        queryset = queryset.filter(state=state)
    if route:
        queryset = queryset.filter(route__name=route)
    return queryset


def step_stats(rollout: Rollout) -> dict[str, ArmStats] | None:
    """The current step's samples per arm, while a step is running."""
    if rollout.step_started_at is None or rollout.state not in LIVE_STATES:
        return None
    return {
        arm: arm_stats(rollout.pk, arm, rollout.step_started_at) for arm in ("baseline", "canary")
    }
