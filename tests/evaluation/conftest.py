"""A route with a baseline on a priced fleet, a candidate, and the gates `running` starts with."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone

from rollouts.models import Fleet, Route
from rollouts.plans import SloGates
from tests.factories import DeploymentFactory, FleetFactory, ReplicaFactory, RouteFactory
from tests.registry.factories import register


@pytest.fixture
def fleet(db: None) -> Fleet:
    fleet = FleetFactory.create(
        name="fleet", gpus_per_replica=2, dollars_per_gpu_hour=Decimal("2.5000")
    )
    ReplicaFactory.create(fleet=fleet, name="r0", base_url="http://127.0.0.1:9101")
    return fleet


@pytest.fixture
def route(fleet: Fleet) -> Route:
    baseline = DeploymentFactory.create(
        artifact=register(version="v1"), fleet=fleet, served_model_name="chat-v1"
    )
    return RouteFactory.create(name="chat", baseline=baseline)


@pytest.fixture
def gates() -> SloGates:
    """Looser than the default in tests/conftest.py."""
    return SloGates(ttft_p95_ms=1000, tpot_p95_ms=100, max_error_rate=0.2, min_guardrail_samples=20)


def days_ago(days: float) -> dt.datetime:
    return timezone.now() - dt.timedelta(days=days)
