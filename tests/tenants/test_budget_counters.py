"""The day and month budget counters, rebuilt from the usage rows after Redis lost them."""

from __future__ import annotations

import datetime as dt
import io
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import requests
from django.conf import settings
from django.core.management import call_command

from gateway.budget_keys import DAY_TTL_S, day_key, month_key
from orchestration.gateway_snapshot import publish_snapshot, publish_snapshot_if_lost
from tenants.budget_counters import budget_counters_rebuild, budget_counters_rebuild_if_lost
from tenants.models import Tenant
from tenants.services import usage
from tenants.services.budgets import budget_set
from tenants.services.gateway_keys import api_key_create
from tests.conftest import RedisServer
from tests.factories import DeploymentFactory, FleetFactory, ReplicaFactory, RouteFactory
from tests.gateway.conftest import GatewayLauncher, GatewayProcess, wait_for_version
from tests.registry.factories import register
from tests.simfleet.harness import Fleet as SimFleet
from tests.simfleet.harness import FleetLauncher, model, wait_until
from tests.tenants.conftest import sample, send

NOW = dt.datetime(2026, 11, 30, 12, 34, 56, tzinfo=dt.UTC)


def counters(client: redis.Redis, tenant: Tenant, now: dt.datetime = NOW) -> tuple[int, int]:
    day = client.get(day_key(str(tenant.pk), now))
    month = client.get(month_key(str(tenant.pk), now))
    return int(day or 0), int(month or 0)


@pytest.fixture
def usage_this_month(tenant_a: Tenant, tenant_b: Tenant, redis_client: redis.Redis) -> None:
    """Tenant A: 120 tokens today, 240 on the 3rd, 120 last month. Tenant B: 120 on the 3rd."""
    send(
        redis_client,
        sample(tenant_a, NOW - dt.timedelta(hours=2)),
        sample(tenant_a, dt.datetime(2026, 11, 3, 8, tzinfo=dt.UTC), route="chat-lite"),
        sample(tenant_a, dt.datetime(2026, 11, 3, 9, tzinfo=dt.UTC)),
        sample(tenant_a, dt.datetime(2026, 10, 31, 23, 59, tzinfo=dt.UTC)),
        # Refusals cost nothing: their prompt estimate is not usage.
        sample(tenant_a, NOW, status=429, finish="rejected", ot=0, reason="tokens_per_day"),
        sample(tenant_b, dt.datetime(2026, 11, 3, 8, tzinfo=dt.UTC)),
    )
    redis_client.flushdb()  # the rows stay; Redis comes back empty


def test_counters_lost_with_redis_are_raised_to_the_tokens_of_the_usage_rows(
    tenant_a: Tenant, tenant_b: Tenant, usage_this_month: None, redis_client: redis.Redis
) -> None:
    assert budget_counters_rebuild(now=NOW) == 2
    assert counters(redis_client, tenant_a) == (120, 360)
    assert counters(redis_client, tenant_b) == (0, 120)
    assert 0 < redis_client.ttl(day_key(str(tenant_a.pk), NOW)) <= DAY_TTL_S


def test_a_counter_already_above_the_rows_is_left_alone_and_a_second_run_adds_nothing(
    tenant_a: Tenant, usage_this_month: None, redis_client: redis.Redis
) -> None:
    # Requests admitted since Redis came back, in flight or not yet counted in the rows.
    redis_client.set(day_key(str(tenant_a.pk), NOW), 500, ex=60)
    redis_client.set(month_key(str(tenant_a.pk), NOW), 100, ex=60)
    budget_counters_rebuild(now=NOW)
    budget_counters_rebuild(now=NOW)
    assert counters(redis_client, tenant_a) == (500, 360)
    assert redis_client.ttl(day_key(str(tenant_a.pk), NOW)) <= 60  # the counter's own expiry


def test_the_counters_are_rebuilt_once_per_redis_run(
    tenant_a: Tenant, usage_this_month: None, redis_client: redis.Redis
) -> None:
    assert budget_counters_rebuild_if_lost(now=NOW) is True
    redis_client.delete(day_key(str(tenant_a.pk), NOW))
    assert budget_counters_rebuild_if_lost(now=NOW) is False  # same run: two reads, nothing else
    redis_client.flushdb()  # a restart without persistence loses the mark with the counters
    assert budget_counters_rebuild_if_lost(now=NOW) is True
    assert counters(redis_client, tenant_a) == (120, 360)


def test_the_command_rebuilds_the_counters_of_this_month(
    tenant_a: Tenant, redis_client: redis.Redis
) -> None:
    send(redis_client, sample(tenant_a, dt.datetime.now(dt.UTC)))
    redis_client.flushdb()
    out = io.StringIO()
    call_command("rebuild_budget_counters", stdout=out)
    assert "1 tenants" in out.getvalue()
    assert counters(redis_client, tenant_a, dt.datetime.now(dt.UTC)) == (120, 120)


def test_the_rebuild_is_asked_for_on_every_beat_tick() -> None:
    beat: dict[str, dict[str, Any]] = settings.CELERY_BEAT_SCHEDULE
    schedule = {entry["task"]: entry["schedule"] for entry in beat.values()}
    assert schedule["tenants.rebuild_budget_counters"] <= 2.0


# --- with a real gateway ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def simfleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimFleet]:
    launcher = FleetLauncher(tmp_path_factory.mktemp("fleets"))
    yield launcher.start([model("tiny", answer_tokens=6)], replicas=1)
    launcher.stop_all()


@pytest.fixture
def gateways(tmp_path: Path) -> Iterator[GatewayLauncher]:
    launcher = GatewayLauncher(tmp_path)
    yield launcher
    launcher.stop_all()


def chat(gateway: GatewayProcess, secret: str) -> requests.Response:
    return requests.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": "chat", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 6},
        headers={"Authorization": f"Bearer {secret}"},
        timeout=10,
    )


@pytest.mark.django_db(transaction=True)
def test_a_tenant_out_of_its_day_budget_stays_refused_after_redis_restarts_empty(
    simfleet: SimFleet,
    restartable_redis: RedisServer,
    use_redis_url: Callable[[str], None],
    gateways: GatewayLauncher,
) -> None:
    use_redis_url(restartable_redis.url)
    tenant = Tenant.objects.create(slug="acme", name="Acme")
    fleet = FleetFactory.create(name="sim")
    ReplicaFactory.create(fleet=fleet, name="r0", base_url=simfleet.url)
    deployment = DeploymentFactory.create(
        artifact=register(version="v1"), fleet=fleet, served_model_name="tiny", state="ready"
    )
    RouteFactory.create(name="chat", baseline=deployment)
    _, secret = api_key_create(actor=None, tenant=tenant, name="app")
    gateway = gateways.start(redis_url=restartable_redis.url)
    # Room for a few requests: each reserves its prompt and 6 output tokens.
    budget_set(actor=None, tenant=tenant, tokens_per_day=100)
    version = publish_snapshot()
    assert version is not None
    wait_for_version(gateway, version)
    statuses = [chat(gateway, secret).status_code for _ in range(12)]
    assert statuses[0] == 200
    assert statuses[-1] == 429
    while usage.usage_consume(consumer="test") > 0:
        pass

    restartable_redis.restart()
    publish_snapshot_if_lost()  # beat's two checks, one tick after Redis came back
    assert budget_counters_rebuild_if_lost() is True
    answers: list[requests.Response] = []

    def answered() -> bool:
        # 503 while the gateway reconnects to Redis (the tenant fails closed).
        answers.append(chat(gateway, secret))
        return answers[-1].status_code != 503

    wait_until(answered)
    assert answers[-1].status_code == 429
    assert answers[-1].json()["error"]["code"] == "tokens_per_day"
