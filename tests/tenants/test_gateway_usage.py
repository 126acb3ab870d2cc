"""End to end with a real gateway and a simfleet replica: what the gateway serves and refuses
is counted in the rollups, and a tenant past its soft limit is refused or rerouted."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import requests

from orchestration.gateway_snapshot import publish_snapshot
from tenants.choices import Granularity
from tenants.models import ApiKey, RecentRejection, Tenant, UsageRollup
from tenants.services import usage
from tenants.services.accounts import tenant_create
from tenants.services.budgets import budget_set
from tenants.services.gateway_keys import api_key_create
from tenants.services.soft_limits import soft_limits_check
from tests.factories import DeploymentFactory, FleetFactory, ReplicaFactory, RouteFactory
from tests.gateway.conftest import GatewayLauncher, GatewayProcess, wait_for_version
from tests.registry.factories import register
from tests.simfleet.harness import Fleet as SimFleet
from tests.simfleet.harness import FleetLauncher, model, wait_until


@pytest.fixture(scope="module")
def simfleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimFleet]:
    launcher = FleetLauncher(tmp_path_factory.mktemp("fleets"))
    yield launcher.start([model("tiny", answer_tokens=6)], replicas=1)
    launcher.stop_all()


@pytest.fixture
def gateway(tmp_path: Path, redis_client: redis.Redis) -> Iterator[GatewayProcess]:
    launcher = GatewayLauncher(tmp_path)
    yield launcher.start(redis_url=os.environ["REDIS_URL"])
    launcher.stop_all()


def chat(gateway: GatewayProcess, secret: str) -> requests.Response:
    return requests.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": "chat", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 6},
        headers={"Authorization": f"Bearer {secret}"},
        timeout=10,
    )


def counted(tenant: Tenant, **filters: Any) -> UsageRollup | None:
    usage.usage_consume(consumer="test")
    return UsageRollup.objects.filter(
        tenant=tenant, granularity=Granularity.MINUTE, **filters
    ).first()


def republish(gateway: GatewayProcess) -> None:
    version = publish_snapshot()
    assert version is not None
    wait_for_version(gateway, version)


@pytest.mark.django_db(transaction=True)
def test_served_and_refused_requests_are_counted_and_the_soft_limit_applies(
    simfleet: SimFleet, gateway: GatewayProcess
) -> None:
    tenant = tenant_create(actor=None, slug="acme", name="Acme")
    for name, family in (("chat", "support-chat"), ("chat-lite", "lite-chat")):
        # One fleet row each (a fleet serves a model name once), on the same simfleet replica.
        fleet = FleetFactory.create(name=f"sim-{name}")
        ReplicaFactory.create(fleet=fleet, name="r0", base_url=simfleet.url)
        deployment = DeploymentFactory.create(
            artifact=register(family=family, version="v1"),
            fleet=fleet,
            served_model_name="tiny",
            state="ready",
        )
        RouteFactory.create(name=name, baseline=deployment)
    _, secret = api_key_create(actor=None, tenant=tenant, name="app")
    # 1% of 500 tokens a day: one request (a short prompt and 6 tokens out) crosses it.
    budget_set(actor=None, tenant=tenant, tokens_per_day=500, soft_limit_percent=1)
    republish(gateway)

    assert chat(gateway, secret).status_code == 200
    wait_until(lambda: counted(tenant, route="chat") is not None, seconds=10)
    served = counted(tenant, route="chat")
    assert served is not None
    assert (served.requests, served.tokens_out, served.arm) == (1, 6, "baseline")
    assert served.tokens_in > 0
    # The gateway's record names the key, so the key page shows when it was last used.
    assert ApiKey.objects.get(tenant=tenant).last_used_at is not None

    assert soft_limits_check() == ["acme"]
    republish(gateway)
    refused = chat(gateway, secret)
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "soft_limit"
    wait_until(lambda: counted(tenant, route="chat", rejected__gt=0) is not None, seconds=10)
    assert RecentRejection.objects.get(tenant=tenant).reason == "soft_limit"
    assert counted(tenant, route="chat").rejections == {"soft_limit": 1}  # type: ignore[union-attr]

    budget_set(actor=None, tenant=tenant, soft_limit_action="route", soft_limit_route="chat-lite")
    republish(gateway)
    assert chat(gateway, secret).status_code == 200
    wait_until(lambda: counted(tenant, route="chat-lite") is not None, seconds=10)
