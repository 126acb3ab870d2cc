"""Keeping the gateway's configuration in step with the control plane."""

from __future__ import annotations

from celery import shared_task

from controlplane.gateway_config import publish_snapshot


@shared_task(name="gateway.publish", time_limit=30, soft_time_limit=20)
def publish() -> None:
    """Idempotent: publishes the current rows; runs after changes and on a schedule."""
    publish_snapshot()
