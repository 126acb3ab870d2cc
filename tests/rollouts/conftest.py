"""A route with a baseline deployment on one fleet, and a candidate for it."""

from __future__ import annotations

import pytest

from rollouts.models import Deployment, Fleet, Replica, Route
from tests.registry.factories import register


@pytest.fixture
def route(db: None) -> Route:
    fleet = Fleet.objects.create(name="fleet")
    Replica.objects.create(fleet=fleet, name="r0", base_url="http://127.0.0.1:9101")
    v1 = register(version="v1")
    baseline = Deployment.objects.create(artifact=v1, fleet=fleet, served_model_name="chat-v1")
    return Route.objects.create(name="chat", baseline=baseline)


@pytest.fixture
def candidate(route: Route) -> Deployment:
    return Deployment.objects.create(
        artifact=register(version="v2"),
        fleet=route.baseline.fleet,
        served_model_name="chat-v2",
        state="ready",
    )
