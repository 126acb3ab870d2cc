"""A route with a baseline deployment on one fleet, and a candidate for it."""

from __future__ import annotations

import pytest

from rollouts.models import Deployment, Route
from tests.factories import DeploymentFactory, FleetFactory, ReplicaFactory, RouteFactory
from tests.registry.factories import register


@pytest.fixture
def route(db: None) -> Route:
    fleet = FleetFactory.create(name="fleet")
    ReplicaFactory.create(fleet=fleet, name="r0", base_url="http://127.0.0.1:9101")
    v1 = register(version="v1")
    baseline = DeploymentFactory.create(artifact=v1, fleet=fleet, served_model_name="chat-v1")
    return RouteFactory.create(name="chat", baseline=baseline)


@pytest.fixture
def candidate(route: Route) -> Deployment:
    return DeploymentFactory.create(
        artifact=register(version="v2"),
        fleet=route.baseline.fleet,
        served_model_name="chat-v2",
        state="ready",
    )
