"""What the control plane publishes for the gateway, and a real gateway applying it."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from controlplane.gateway_config import PUBLISH_IF_NEWER, PUBLISHED_VERSION_KEY, publish_snapshot
from gateway.snapshot import CHANGED_CHANNEL, SNAPSHOT_KEY, Snapshot
from tenants.models import Tenant
from tenants.services import api_key_create, api_key_revoke, budget_set
from tenants.tokens import hash_secret
from tests.gateway.conftest import GatewayLauncher, wait_for_version
from tests.simfleet.harness import request, wait_until


def published(client: redis.Redis) -> Snapshot:
    return Snapshot.model_validate_json(client.get(SNAPSHOT_KEY) or b"")


def test_tenants_keys_and_budgets_are_published(
    tenant_a: Tenant, redis_client: redis.Redis
) -> None:
    budget_set(actor=None, tenant=tenant_a, requests_per_minute=42, tokens_per_day=10_000)
    _, secret = api_key_create(actor=None, tenant=tenant_a, name="prod", can_force_arm=True)
    version = publish_snapshot()
    snapshot = published(redis_client)
    assert snapshot.version == version
    tenant = snapshot.tenants[str(tenant_a.pk)]
    assert (tenant.slug, tenant.budget.requests_per_minute, tenant.budget.tokens_per_day) == (
        "tenant-a",
        42,
        10_000,
    )
    key = snapshot.keys[hash_secret(secret)]
    assert key.tenant_id == str(tenant_a.pk)
    assert key.can_force_arm
    assert secret not in str(redis_client.get(SNAPSHOT_KEY))


def test_revoked_keys_are_left_out(tenant_a: Tenant, redis_client: redis.Redis) -> None:
    key, secret = api_key_create(actor=None, tenant=tenant_a, name="old")
    api_key_revoke(actor=None, key_id=key.pk)
    publish_snapshot()
    assert hash_secret(secret) not in published(redis_client).keys


def test_an_older_snapshot_never_replaces_a_newer_one(
    tenant_a: Tenant, redis_client: redis.Redis
) -> None:
    newer = publish_snapshot()
    assert newer is not None
    stale = redis_client.eval(
        PUBLISH_IF_NEWER, 2, SNAPSHOT_KEY, PUBLISHED_VERSION_KEY, newer - 1, "{}", CHANGED_CHANNEL
    )
    assert stale == 0
    assert published(redis_client).version == newer


def test_each_publication_is_announced(tenant_a: Tenant, redis_client: redis.Redis) -> None:
    pubsub = redis_client.pubsub()  # type: ignore[no-untyped-call]
    pubsub.subscribe(CHANGED_CHANNEL)
    pubsub.get_message(timeout=1)  # the subscription confirmation
    version = publish_snapshot()
    message = pubsub.get_message(timeout=2)
    pubsub.close()
    assert message is not None
    assert message["data"] == str(version)


@pytest.fixture
def gateways(tmp_path: Path) -> Iterator[GatewayLauncher]:
    launcher = GatewayLauncher(tmp_path)
    yield launcher
    launcher.stop_all()


@pytest.mark.django_db(transaction=True)
def test_a_running_gateway_follows_key_changes(
    tenant_a: Tenant, redis_client: redis.Redis, gateways: GatewayLauncher
) -> None:
    gateway = gateways.start(redis_url=os.environ["REDIS_URL"])
    key, secret = api_key_create(actor=None, tenant=tenant_a, name="prod")
    version = publish_snapshot()
    assert version is not None
    wait_for_version(gateway, version)

    def models_status() -> int:
        port = int(gateway.url.rsplit(":", 1)[1])
        import http.client

        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        connection.request("GET", "/v1/models", headers={"Authorization": f"Bearer {secret}"})
        status = connection.getresponse().status
        connection.close()
        return status

    assert models_status() == 200
    started = time.monotonic()
    api_key_revoke(actor=None, key_id=key.pk)
    publish_snapshot()
    wait_until(lambda: models_status() == 401, seconds=5)
    assert time.monotonic() - started < 1.5  # pub/sub, not the polling fallback
    assert request("GET", f"{gateway.url}/readyz").status == 200


def test_routes_are_published_with_their_arms_and_active_replicas(
    tenant_a: Tenant, redis_client: redis.Redis
) -> None:
    from rollouts.models import Deployment, Fleet, Replica, Route
    from tests.registry.factories import register

    fleet = Fleet.objects.create(name="gpu-a")
    Replica.objects.create(fleet=fleet, name="r0", base_url="http://10.0.0.1:8000")
    Replica.objects.create(fleet=fleet, name="r1", base_url="http://10.0.0.2:8000", healthy=False)
    Replica.objects.create(
        fleet=fleet, name="r2", base_url="http://10.0.0.3:8000", state="draining"
    )
    baseline = Deployment.objects.create(
        artifact=register(version="v1"), fleet=fleet, served_model_name="chat-v1"
    )
    canary = Deployment.objects.create(
        artifact=register(version="v2"), fleet=fleet, served_model_name="chat-v2"
    )
    route = Route.objects.create(
        name="chat", baseline=baseline, canary=canary, canary_weight=25, salt="r7"
    )
    route.tenants.add(tenant_a)
    publish_snapshot()
    snapshot = published(redis_client)
    chat = snapshot.routes["chat"]
    assert [(a.name, a.weight) for a in chat.arms] == [("baseline", 75.0), ("canary", 25.0)]
    assert chat.tenant_ids == (str(tenant_a.pk),)
    assert chat.salt == "r7"
    deployment = snapshot.deployments[str(canary.pk)]
    assert deployment.served_model_name == "chat-v2"
    assert [(r.id, r.healthy) for r in deployment.replicas] == [
        ("gpu-a/r0", True),
        ("gpu-a/r1", False),
    ]
