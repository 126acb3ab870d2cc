"""Usage accounting: the gateway's request records into per-tenant rollups, and their upkeep."""

from __future__ import annotations

from celery import shared_task

from tenants.budget_counters import budget_counters_rebuild_if_lost
from tenants.services import usage
from tenants.services.soft_limits import soft_limits_check


@shared_task(name="tenants.consume_usage", time_limit=30, soft_time_limit=25)
def consume_usage() -> None:
    # Drain what is there now, a batch at a time, within the time limit; idempotent on replay.
    while usage.usage_consume() > 0:
        pass


@shared_task(name="tenants.compact_usage", time_limit=300, soft_time_limit=280)
def compact_usage() -> None:
    usage.usage_compact()


@shared_task(name="tenants.check_soft_limits", time_limit=10, soft_time_limit=8)
def check_soft_limits() -> None:
    """Flags tenants past their soft limit; publishes to the gateway only when a flag changed."""
    soft_limits_check()


@shared_task(name="tenants.rebuild_budget_counters", time_limit=60, soft_time_limit=50)
def rebuild_budget_counters() -> None:
    """Every 2 s: after a Redis restart, the day and month counters are raised from the rows."""
    budget_counters_rebuild_if_lost()
