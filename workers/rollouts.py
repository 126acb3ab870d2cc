"""The rollout loop: a beat tick fans out one `advance` per running rollout."""

from __future__ import annotations

import secrets
from typing import Any

import requests
from celery import Task, shared_task

from core.redis import get_redis
from orchestration.engine import advance as advance_rollout
from rollouts.choices import RolloutState
from rollouts.models import Rollout, RolloutEvent, Webhook
from rollouts.services.deployments import (
    deployment_prepare,
    deployment_retire,
    pending_deployments,
)
from rollouts.services.replicas import replicas_probe
from rollouts.services.saturation import deployments_saturation_update
from rollouts.webhooks import deliver

# A lease, not a lock held by the broker: two workers that both receive an advance for the same
# rollout (a tick delivered twice, a redelivery after a crash) never decide it at once. The lease
# outlives a normal advance and expires on its own if its holder dies.
LEASE_MS = 15_000
# A prepare's lease outlives its task's time limit.
PREPARE_LEASE_MS = 130_000
RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


@shared_task(name="rollouts.tick", time_limit=10, soft_time_limit=8)
def tick() -> None:
    live = (RolloutState.PREFLIGHT, RolloutState.RUNNING)
    for rollout_id in Rollout.objects.filter(state__in=live).values_list("pk", flat=True):
        advance.delay(rollout_id=rollout_id)


@shared_task(name="rollouts.advance", acks_late=True, time_limit=30, soft_time_limit=25)
def advance(*, rollout_id: int) -> None:
    client = get_redis()
    key = f"tollgate:rollouts:lease:{rollout_id}"
    token = secrets.token_hex(8)
    if not client.set(key, token, nx=True, px=LEASE_MS):
        return  # another worker is deciding this rollout right now
    try:
        advance_rollout(rollout_id)
    finally:
        client.eval(RELEASE, 1, key, token)


@shared_task(
    name="rollouts.notify",
    bind=True,
    acks_late=True,
    time_limit=30,
    soft_time_limit=25,
    autoretry_for=(requests.RequestException,),
    retry_backoff=2,
    retry_jitter=True,
    max_retries=6,
)
def notify(self: Task[Any, Any], *, event_id: int, webhook_id: int) -> None:
    """Delivers one event to one webhook; gone rows mean nothing is left to say."""
    event = (
        RolloutEvent.objects.select_related("rollout__route", "rollout__candidate__artifact")
        .filter(pk=event_id)
        .first()
    )
    webhook = Webhook.objects.filter(pk=webhook_id, active=True).first()
    if event is None or webhook is None:
        return
    deliver(webhook, event)


@shared_task(name="rollouts.retire", acks_late=True, time_limit=60, soft_time_limit=50)
def retire(*, deployment_id: int) -> None:
    """Unloads a deployment that no route uses any more and marks it retired (idempotent)."""
    deployment_retire(deployment_id=deployment_id)


@shared_task(
    name="rollouts.prepare_deployment", acks_late=True, time_limit=120, soft_time_limit=100
)
def prepare_deployment(*, deployment_id: int) -> None:
    """Gets a pending deployment ready (idempotent). Under a lease, so that the task sent at
    create and the sweep's never load and probe the same deployment at once."""
    client = get_redis()
    key = f"tollgate:deployments:lease:{deployment_id}"
    token = secrets.token_hex(8)
    if not client.set(key, token, nx=True, px=PREPARE_LEASE_MS):
        return  # another worker is preparing it right now
    try:
        deployment_prepare(deployment_id=deployment_id)
    finally:
        client.eval(RELEASE, 1, key, token)


@shared_task(name="rollouts.prepare_deployments", time_limit=30, soft_time_limit=25)
def prepare_deployments() -> None:
    """Sends a prepare for every pending deployment (each its own task: one fleet of unreachable
    replicas does not hold up the others) until each is ready or past its deadline."""
    for deployment_id in pending_deployments():
        prepare_deployment.delay(deployment_id=deployment_id)


@shared_task(name="rollouts.probe_replicas", time_limit=60, soft_time_limit=50)
def probe_replicas() -> None:
    replicas_probe()


@shared_task(name="rollouts.update_saturation", time_limit=30, soft_time_limit=25)
def update_saturation() -> None:
    deployments_saturation_update()
