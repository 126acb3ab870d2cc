"""Announcing rollout events to webhooks, signed so receivers can trust them."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any

import orjson
import requests

from rollouts.models import RolloutEvent, Webhook

SIGNATURE_HEADER = "X-Tollgate-Signature"


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def webhook_create(*, name: str, url: str) -> tuple[Webhook, str]:
    secret = secrets.token_urlsafe(32)
    return Webhook.objects.create(name=name, url=url, secret=secret), secret


def event_payload(event: RolloutEvent) -> dict[str, Any]:
    rollout = event.rollout
    return {
        "event_id": event.pk,
        "rollout_id": rollout.pk,
        "route": rollout.route.name,
        "candidate": str(rollout.candidate.artifact),
        "from_state": event.from_state,
        "to_state": event.to_state,
        "step": event.step_index,
        "weight": rollout.current_weight,
        "actor": event.actor_name,
        "reason": event.reason,
        "evidence": event.evidence,
        "at": event.created_at.isoformat(),
    }


def deliver(webhook: Webhook, event: RolloutEvent, *, timeout_s: float = 5.0) -> None:
    """One signed POST; raises requests.RequestException on failure (the task retries)."""
    body = orjson.dumps(event_payload(event))
    response = requests.post(
        webhook.url,
        data=body,
        headers={
            "Content-Type": "application/json",
            SIGNATURE_HEADER: sign(webhook.secret, body),
            "X-Tollgate-Event-Id": str(event.pk),
        },
        timeout=timeout_s,
    )
    response.raise_for_status()
