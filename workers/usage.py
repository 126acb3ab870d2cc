"""Usage accounting: the gateway's request records into per-tenant rollups, and their upkeep."""

from __future__ import annotations

from celery import shared_task

from tenants import usage


@shared_task(name="tenants.consume_usage", time_limit=30, soft_time_limit=25)
def consume_usage() -> None:
    # Drain what is there now, a batch at a time, within the time limit; idempotent on replay.
    while usage.consume() > 0:
        pass


@shared_task(name="tenants.compact_usage", time_limit=300, soft_time_limit=280)
def compact_usage() -> None:
    usage.compact()
