"""Manual control of a rollout, and the signed webhooks that announce every change."""

from __future__ import annotations

import hashlib
import hmac
import http.server
import threading
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import redis

from controlplane.errors import Conflict, DomainError, PermissionDenied
from rollouts.choices import RolloutState
from rollouts.models import Deployment, Rollout, RolloutEvent, Route
from rollouts.plans import Plan, Step
from rollouts.services.rollouts import rollout_control, rollout_create, rollout_start
from rollouts.webhooks import SIGNATURE_HEADER, webhook_create
from tenants.models import User
from workers import rollouts as rollout_tasks

S = RolloutState
PLAN = Plan(steps=(Step(weight=5), Step(weight=50), Step(weight=100)))


@pytest.fixture
def running(route: Route, candidate: Deployment, redis_client: redis.Redis) -> Rollout:
    rollout = rollout_create(actor=None, route=route, candidate=candidate, plan=PLAN)
    return rollout_start(actor=None, rollout_id=rollout.pk)


def test_pause_resume_skip_and_promote_by_hand(running: Rollout, release_manager: User) -> None:
    def act(action: str) -> Rollout:
        return rollout_control(
            actor=release_manager, rollout_id=running.pk, action=action, reason="by hand"
        )

    assert act("pause").state == S.PAUSED
    assert act("resume").state == S.RUNNING
    skipped = act("skip")
    assert (skipped.state, skipped.step_index) == (S.RUNNING, 1)
    assert act("promote").state == S.PROMOTED
    reasons = list(RolloutEvent.objects.values_list("reason", flat=True))
    assert reasons[-4:] == [
        "pause: by hand",
        "resume: by hand",
        "skip: by hand",
        "promote: by hand",
    ]


def test_manual_control_needs_a_release_manager_and_a_reason(
    running: Rollout, viewer: User, release_manager: User
) -> None:
    with pytest.raises(PermissionDenied):
        rollout_control(actor=viewer, rollout_id=running.pk, action="rollback", reason="no")
    with pytest.raises(DomainError, match="reason"):
        rollout_control(actor=release_manager, rollout_id=running.pk, action="rollback", reason="")
    with pytest.raises(Conflict, match="not paused"):
        rollout_control(actor=release_manager, rollout_id=running.pk, action="resume", reason="x")
    with pytest.raises(DomainError, match="unknown action"):
        rollout_control(actor=release_manager, rollout_id=running.pk, action="yolo", reason="x")


class Receiver(http.server.BaseHTTPRequestHandler):
    received: list[tuple[dict[str, str], bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Receiver.received.append((dict(self.headers), body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[str]:
    Receiver.received = []
    server = http.server.HTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()
    server.server_close()


def test_each_change_is_announced_with_a_verifiable_signature(
    running: Rollout, release_manager: User, receiver: str
) -> None:
    webhook, secret = webhook_create(name="chat", url=receiver)
    rollout_control(actor=release_manager, rollout_id=running.pk, action="rollback", reason="p95")
    event = RolloutEvent.objects.get(to_state=S.ROLLED_BACK)
    rollout_tasks.notify(event_id=event.pk, webhook_id=webhook.pk)
    headers, body = Receiver.received[-1]
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    assert headers[SIGNATURE_HEADER] == expected
    payload = orjson.loads(body)
    assert (payload["to_state"], payload["route"], payload["reason"]) == (
        "rolled_back",
        "chat",
        "rollback: p95",
    )
    assert secret not in body.decode()
