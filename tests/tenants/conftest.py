"""Routes to send tenants' traffic to, and a way to put usage in the rollups as the stream would."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import orjson
import pytest
import redis

from rollouts.models import Route
from tenants.models import Tenant
from tenants.services import usage
from tests.factories import DeploymentFactory, FleetFactory, ReplicaFactory, RouteFactory
from tests.registry.factories import register


@pytest.fixture
def routes(db: None) -> dict[str, Route]:
    """`chat` (v1 baseline, v2 canary) and the cheaper `chat-lite`, open to every tenant."""
    fleet = FleetFactory.create(name="fleet")
    ReplicaFactory.create(fleet=fleet, name="r0", base_url="http://127.0.0.1:9101")
    v1 = DeploymentFactory.create(
        artifact=register(version="v1"), fleet=fleet, served_model_name="chat-v1", state="ready"
    )
    v2 = DeploymentFactory.create(
        artifact=register(version="v2"), fleet=fleet, served_model_name="chat-v2", state="ready"
    )
    lite = DeploymentFactory.create(
        artifact=register(family="lite-chat", version="v1"),
        fleet=fleet,
        served_model_name="lite",
        state="ready",
    )
    return {
        "chat": RouteFactory.create(name="chat", baseline=v1, canary=v2, canary_weight=10),
        "chat-lite": RouteFactory.create(name="chat-lite", baseline=lite),
    }


def sample(tenant: Tenant, at: dt.datetime, **overrides: Any) -> dict[str, Any]:
    return {
        "ts": at.timestamp(),
        "rid": "chatcmpl-" + uuid.uuid4().hex,
        "route": "chat",
        "arm": "baseline",
        "dep": "0",
        "rollout": None,
        "tenant": tenant.slug,
        "replica": "fleet/r0",
        "status": 200,
        "finish": "stop",
        "pt": 100,
        "ot": 20,
        "ttft_ms": 30.0,
        "tpot_ms": 4.0,
        "e2e_ms": 120.0,
        "tool": None,
        "conc": 1,
        "stream": False,
        "cost": 0.01,
        **overrides,
    }


def send(client: redis.Redis, *records: dict[str, Any]) -> None:
    """Appends records to the samples stream and counts them, as the beat task would."""
    for item in records:
        client.xadd(usage.STREAM, {"r": orjson.dumps(item)})
    while usage.usage_consume(consumer="test") > 0:
        pass
