"""The rollouts tasks: `advance` under its lease, `notify` with signed webhooks, `retire` of what
nothing uses any more."""

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

from rollouts.choices import RolloutState
from rollouts.models import Deployment, Rollout, RolloutEvent, Route
from rollouts.plans import Plan, Step
from rollouts.services.rollouts import (
    rollout_control,
    rollout_create,
    rollout_start,
    rollout_transition,
)
from rollouts.services.rules import route_rule_create
from rollouts.webhooks import SIGNATURE_HEADER, webhook_create
from tenants.models import User
from tests.conftest import stored
from tests.factories import DeploymentFactory
from workers import rollouts as rollout_tasks

S = RolloutState
PLAN = Plan(steps=(Step(weight=5), Step(weight=50), Step(weight=100)))


def test_a_held_lease_makes_a_second_advance_a_no_op(
    running: Rollout, redis_client: redis.Redis
) -> None:
    stored(running, "canary", 25, short=True, status=500)
    redis_client.set(f"tollgate:rollouts:lease:{running.pk}", "someone-else", px=5000)
    rollout_tasks.advance(rollout_id=running.pk)
    running.refresh_from_db()
    assert running.state == S.RUNNING
    redis_client.delete(f"tollgate:rollouts:lease:{running.pk}")
    rollout_tasks.advance(rollout_id=running.pk)
    running.refresh_from_db()
    assert running.state == S.ROLLED_BACK


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


def test_after_promotion_the_old_baseline_drains_then_retires(
    route: Route,
    candidate: Deployment,
    redis_client: redis.Redis,
) -> None:
    old = route.baseline
    rollout = rollout_create(actor=None, route=route, candidate=candidate, plan=PLAN)
    rollout_start(actor=None, rollout_id=rollout.pk)
    rollout_tasks.retire(deployment_id=candidate.pk)  # still the canary: kept
    candidate.refresh_from_db()
    assert candidate.state == "ready"
    rollout_transition(rollout_id=rollout.pk, to=S.PROMOTED, actor=None, reason="ok")
    old.refresh_from_db()
    assert old.state == "draining"
    rollout_tasks.retire(deployment_id=old.pk)
    old.refresh_from_db()
    assert old.state == "retired"


def test_promoting_a_route_whose_old_baseline_a_rule_targets_keeps_it_serving(
    route: Route, candidate: Deployment, release_manager: User, redis_client: redis.Redis
) -> None:
    old = route.baseline
    Deployment.objects.filter(pk=old.pk).update(state="ready")
    old.refresh_from_db()
    route_rule_create(actor=release_manager, route=route, name="batch", target=old, tiers=["batch"])
    rollout = rollout_create(actor=None, route=route, candidate=candidate, plan=PLAN)
    rollout_start(actor=None, rollout_id=rollout.pk)
    rollout_transition(rollout_id=rollout.pk, to=S.PROMOTED, actor=None, reason="ok")
    rollout_tasks.retire(deployment_id=old.pk)  # what the drain timer would run
    old.refresh_from_db()
    assert old.state == "ready"  # the rule still sends traffic to it


def test_a_deployment_nothing_uses_is_retired(
    route: Route, candidate: Deployment, redis_client: redis.Redis
) -> None:
    rollout_tasks.retire(deployment_id=candidate.pk)
    candidate.refresh_from_db()
    assert candidate.state == "retired"


def test_a_held_lease_makes_a_second_prepare_a_no_op_and_the_sweep_sends_one_each(
    db: None, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    pending = DeploymentFactory.create(state="pending")  # its fleet has no replica
    redis_client.set(f"tollgate:deployments:lease:{pending.pk}", "someone-else", px=5000)
    rollout_tasks.prepare_deployment(deployment_id=pending.pk)
    pending.refresh_from_db()
    assert pending.problems == []  # not looked at while another worker holds it
    redis_client.delete(f"tollgate:deployments:lease:{pending.pk}")
    rollout_tasks.prepare_deployment(deployment_id=pending.pk)
    pending.refresh_from_db()
    assert (pending.state, pending.problems) == ("pending", ["no active replica in the fleet"])
    assert not redis_client.exists(f"tollgate:deployments:lease:{pending.pk}")

    sent: list[int] = []
    monkeypatch.setattr(
        rollout_tasks.prepare_deployment, "delay", lambda deployment_id: sent.append(deployment_id)
    )
    DeploymentFactory.create(state="ready")
    rollout_tasks.prepare_deployments()
    assert sent == [pending.pk]
