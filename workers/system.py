"""Housekeeping tasks of the control plane itself."""

from __future__ import annotations

import time

from celery import shared_task

from controlplane.health import WORKER_HEARTBEAT_KEY
from core import idempotency
from core.redis import get_redis


@shared_task(name="system.heartbeat", time_limit=10, soft_time_limit=5)
def heartbeat() -> None:
    """Proves that beat schedules and a worker executes; /readyz reports its age."""
    get_redis().set(WORKER_HEARTBEAT_KEY, str(time.time()), ex=3600)


@shared_task(name="system.prune_idempotency_keys", time_limit=300, soft_time_limit=240)
def prune_idempotency_keys() -> int:
    """Idempotent: forgets the API's idempotency keys older than a day."""
    return idempotency.prune()
