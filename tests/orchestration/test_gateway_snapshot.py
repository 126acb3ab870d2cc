"""What the control plane publishes for the gateway, and a real gateway applying it."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import requests
from django.conf import settings

from core.redis import get_redis
from gateway.snapshot import CHANGED_CHANNEL, SNAPSHOT_KEY, Snapshot
from orchestration.gateway_snapshot import (
    EPOCH_KEY,
    PUBLISH_IF_NEWER,
    PUBLISHED_VERSION_KEY,
    VERSION_KEY,
    publish_snapshot,
    publish_snapshot_if_lost,
)
from tenants.models import Tenant
from tenants.services.budgets import budget_set
from tenants.services.gateway_keys import api_key_create, api_key_revoke
from tenants.tokens import hash_secret
from tests.conftest import RedisServer
from tests.factories import DeploymentFactory, FleetFactory, ReplicaFactory, RouteFactory
from tests.gateway.conftest import GatewayLauncher, wait_for_version
from tests.simfleet.harness import Fleet as SimFleet
from tests.simfleet.harness import FleetLauncher, model, request, wait_until


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


def publish_if_newer(client: redis.Redis, version: int, epoch: str) -> int:
    keys = (SNAPSHOT_KEY, PUBLISHED_VERSION_KEY, EPOCH_KEY)
    return int(client.eval(PUBLISH_IF_NEWER, 3, *keys, version, "{}", CHANGED_CHANNEL, epoch))


def test_an_older_snapshot_never_replaces_a_newer_one(
    tenant_a: Tenant, redis_client: redis.Redis
) -> None:
    newer = publish_snapshot()
    assert newer is not None
    assert publish_if_newer(redis_client, newer - 1, published(redis_client).epoch) == 0
    assert published(redis_client).version == newer


def test_a_redis_that_lost_its_data_begins_a_new_epoch_and_refuses_the_old_one(
    tenant_a: Tenant, redis_client: redis.Redis
) -> None:
    for _ in range(3):
        publish_snapshot()
    before = published(redis_client)
    assert before.epoch.startswith(str(redis_client.info("server")["run_id"]) + ":")

    redis_client.flushdb()  # what a restart without persistence leaves
    assert publish_snapshot() == 1
    after = published(redis_client)
    assert after.epoch != before.epoch
    # A publication drawn before the loss, however high its version, stays out.
    assert publish_if_newer(redis_client, before.version + 100, before.epoch) == 0
    assert published(redis_client) == after


def test_a_redis_restarted_from_an_older_save_begins_a_new_epoch(
    tenant_a: Tenant, redis_client: redis.Redis
) -> None:
    publish_snapshot()
    old_run = "0" * 40 + ":ab12"  # the epoch a save of a previous run brings back
    redis_client.set(EPOCH_KEY, old_run)
    redis_client.set(VERSION_KEY, 1)  # the save was taken before the latest versions
    assert publish_snapshot_if_lost() == 2
    assert published(redis_client).epoch not in ("", old_run)
    assert publish_snapshot_if_lost() is None  # current now: three reads, nothing published


def test_a_redis_that_came_back_empty_is_published_to_by_the_next_check(
    tenant_a: Tenant, redis_client: redis.Redis
) -> None:
    assert publish_snapshot_if_lost() == 1  # nothing was there
    assert publish_snapshot_if_lost() is None
    redis_client.delete(SNAPSHOT_KEY)
    assert publish_snapshot_if_lost() == 2
    assert published(redis_client).version == 2


def test_the_check_for_a_lost_snapshot_runs_on_every_beat_tick() -> None:
    beat: dict[str, dict[str, Any]] = settings.CELERY_BEAT_SCHEDULE
    schedule = {entry["task"]: entry["schedule"] for entry in beat.values()}
    assert schedule["gateway.republish_if_lost"] <= 2.0


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
    from tests.registry.factories import register

    fleet = FleetFactory.create(name="gpu-a")
    ReplicaFactory.create(fleet=fleet, name="r0", base_url="http://10.0.0.1:8000")
    ReplicaFactory.create(fleet=fleet, name="r1", base_url="http://10.0.0.2:8000", healthy=False)
    ReplicaFactory.create(fleet=fleet, name="r2", base_url="http://10.0.0.3:8000", state="draining")
    baseline = DeploymentFactory.create(
        artifact=register(version="v1"), fleet=fleet, served_model_name="chat-v1"
    )
    canary = DeploymentFactory.create(
        artifact=register(version="v2"), fleet=fleet, served_model_name="chat-v2"
    )
    route = RouteFactory.create(
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


@pytest.fixture(scope="module")
def simfleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimFleet]:
    launcher = FleetLauncher(tmp_path_factory.mktemp("fleets"))
    yield launcher.start([model("tiny", answer_tokens=4)], replicas=1)
    launcher.stop_all()


class Traffic:
    """Chat completions through the gateway, one after another on a thread, until stopped."""

    def __init__(self, gateway_url: str, secret: str) -> None:
        self.url = f"{gateway_url}/v1/chat/completions"
        self.secret = secret
        self.statuses: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

    def _run(self) -> None:
        body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        headers = {"Authorization": f"Bearer {self.secret}"}
        with requests.Session() as session:
            while not self._stop.is_set():
                try:
                    reply = session.post(self.url, json=body, headers=headers, timeout=5)
                    status = reply.status_code
                except requests.RequestException:
                    status = 0
                self.statuses.append((time.monotonic(), status))
                time.sleep(0.01)

    def since(self, moment: float) -> list[int]:
        return [status for at, status in self.statuses if at >= moment]


@pytest.mark.django_db(transaction=True)
def test_after_a_redis_restart_without_persistence_a_revoked_key_stops_within_2_s(
    tenant_a: Tenant,
    simfleet: SimFleet,
    restartable_redis: RedisServer,
    use_redis_url: Callable[[str], None],
    gateways: GatewayLauncher,
) -> None:
    from tests.registry.factories import register

    use_redis_url(restartable_redis.url)
    fleet = FleetFactory.create(name="sim")
    ReplicaFactory.create(fleet=fleet, name="r0", base_url=simfleet.url)
    deployment = DeploymentFactory.create(
        artifact=register(version="v1"), fleet=fleet, served_model_name="tiny", state="ready"
    )
    RouteFactory.create(name="chat", baseline=deployment)
    key, secret = api_key_create(actor=None, tenant=tenant_a, name="prod")
    _, other = api_key_create(actor=None, tenant=tenant_a, name="batch")
    gateway = gateways.start(redis_url=restartable_redis.url)
    # Versions well past what the restarted Redis will count to before the revocation (each key
    # created published one already).
    for _ in range(5):
        version = publish_snapshot()
    assert version == 7
    wait_for_version(gateway, version)

    with Traffic(gateway.url, secret) as traffic, Traffic(gateway.url, other) as untouched:
        wait_until(lambda: traffic.since(0).count(200) >= 5, seconds=10)
        restartable_redis.restart(down_s=0.5)
        back = time.monotonic()
        # What beat's republish_if_lost does within a tick: the first snapshot of a new epoch.
        assert publish_snapshot_if_lost() == 1
        wait_for_version(gateway, 1, seconds=5)
        wait_until(lambda: traffic.since(back).count(200) >= 5, seconds=10)

        revoked = time.monotonic()
        api_key_revoke(actor=None, key_id=key.pk)  # publishes version 2 once committed
        assert int(get_redis().get(PUBLISHED_VERSION_KEY) or 0) == 2
        wait_until(lambda: 401 in traffic.since(revoked), seconds=5)
        first_refusal = min(at for at, status in traffic.statuses if status == 401)
        assert first_refusal - revoked < 2.0
        time.sleep(0.3)
        assert set(traffic.since(first_refusal)) == {401}
        assert untouched.since(revoked).count(200) > 0  # the other key goes on being served
    assert set(untouched.since(revoked)) == {200}
