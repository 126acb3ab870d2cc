"""Keeping the gateway's configuration in step with the control plane."""

from __future__ import annotations

from celery import shared_task

from orchestration.gateway_snapshot import publish_snapshot, publish_snapshot_if_lost


@shared_task(name="gateway.publish", time_limit=30, soft_time_limit=20)
def publish() -> None:
    """Idempotent: publishes the current rows; runs after changes and on a schedule."""
    publish_snapshot()


@shared_task(name="gateway.republish_if_lost", time_limit=30, soft_time_limit=20)
def republish_if_lost() -> None:
    """Every 2 s: a Redis that came back without its data gets a snapshot again at once, so a
    gateway started meanwhile is not left without configuration until the next publication."""
    publish_snapshot_if_lost()
