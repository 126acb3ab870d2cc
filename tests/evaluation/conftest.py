"""A route with a baseline on a priced fleet, a candidate, and samples written as the consumer
stores them."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal
from typing import Any

import pytest
import redis
from django.utils import timezone

from evaluation.models import RequestSample
from rollouts.models import Deployment, Fleet, Replica, Rollout, Route
from rollouts.plans import Plan, SloGates, Step
from rollouts.services.rollouts import rollout_create, rollout_start
from tests.registry.factories import register

PLAN = Plan(
    steps=(
        Step(weight=10, min_bake_s=30, min_samples=50),
        Step(weight=100, min_bake_s=30, min_samples=50),
    )
)
GATES = SloGates(ttft_p95_ms=1000, tpot_p95_ms=100, max_error_rate=0.2, min_guardrail_samples=20)


@pytest.fixture
def fleet(db: None) -> Fleet:
    fleet = Fleet.objects.create(
        name="fleet", gpus_per_replica=2, dollars_per_gpu_hour=Decimal("2.5000")
    )
    Replica.objects.create(fleet=fleet, name="r0", base_url="http://127.0.0.1:9101")
    return fleet


@pytest.fixture
def route(fleet: Fleet) -> Route:
    baseline = Deployment.objects.create(
        artifact=register(version="v1"), fleet=fleet, served_model_name="chat-v1"
    )
    return Route.objects.create(name="chat", baseline=baseline)


@pytest.fixture
def candidate(route: Route) -> Deployment:
    return Deployment.objects.create(
        artifact=register(version="v2"),
        fleet=route.baseline.fleet,
        served_model_name="chat-v2",
        state="ready",
    )


@pytest.fixture
def running(route: Route, candidate: Deployment, redis_client: redis.Redis) -> Rollout:
    rollout = rollout_create(actor=None, route=route, candidate=candidate, plan=PLAN, gates=GATES)
    return rollout_start(actor=None, rollout_id=rollout.pk)


def stored(rollout: Rollout | None, arm: str, count: int, **fields: Any) -> list[RequestSample]:
    """`count` samples as the consumer stores them, in the rollout's current step."""
    defaults: dict[str, Any] = {
        "ts": timezone.now(),
        "route": "chat",
        "deployment": "x",
        "tenant": "tenant-a",
        "status": 200,
        "finish": "stop",
        "prompt_tokens": 100,
        "output_tokens": 50,
        "ttft_ms": 50.0,
        "tpot_ms": 5.0,
        "e2e_ms": 300.0,
        "concurrency": 4,
    }
    defaults.update(fields)
    if rollout is not None:
        defaults.setdefault("step", rollout.step_index)
    return RequestSample.objects.bulk_create(
        RequestSample(
            rid=f"chatcmpl-{uuid.uuid4().hex}",
            rollout_id=rollout.pk if rollout else None,
            arm=arm,
            **defaults,
        )
        for _ in range(count)
    )


def days_ago(days: float) -> dt.datetime:
    return timezone.now() - dt.timedelta(days=days)
