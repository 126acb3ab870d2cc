"""The API's whole world for the tests that walk or fuzz every path: one of each thing a path can
name, and a release manager's token with every scope."""

from __future__ import annotations

import pytest

from registry.services import alias_move
from rollouts.plans import Plan, SloGates, Step
from rollouts.services.rollouts import rollout_create
from rollouts.services.rules import route_rule_create
from rollouts.services.templates import plan_template_create
from tenants.choices import Role, Scope
from tenants.models import Tenant
from tenants.services.accounts import api_token_create
from tenants.services.gateway_keys import api_key_create
from tests.factories import (
    DeploymentFactory,
    FleetFactory,
    ReplicaFactory,
    RouteFactory,
    UserFactory,
)
from tests.registry.factories import register


@pytest.fixture
def world(tenant_a: Tenant) -> dict[str, str]:
    """One of each thing a path can name, so that every view gets past its lookups."""
    fleet = FleetFactory.create(name="prod")
    ReplicaFactory.create(fleet=fleet, name="r0", base_url="http://127.0.0.1:9101")
    baseline = DeploymentFactory.create(
        artifact=register(version="v1"), fleet=fleet, served_model_name="chat-v1"
    )
    route = RouteFactory.create(name="chat", baseline=baseline)
    candidate = DeploymentFactory.create(
        artifact=register(version="v2"), fleet=fleet, served_model_name="chat-v2", state="ready"
    )
    rollout = rollout_create(actor=None, route=route, candidate=candidate)
    manager = UserFactory.create(username="walker", role=Role.RELEASE_MANAGER)
    route_rule_create(actor=manager, route=route, name="batch", target=candidate, tiers=["batch"])
    plan_template_create(
        actor=manager, name="prod", plan=Plan(steps=(Step(weight=100),)), gates=SloGates()
    )
    v2 = candidate.artifact
    alias_move(actor=manager, family=v2.family, name="prod", artifact=v2, reason="walk")
    key, _ = api_key_create(actor=None, tenant=tenant_a, name="walk")
    return {
        "rollout_id": str(rollout.pk),
        "route_name": route.name,
        "rule_name": "batch",
        "name": "prod",  # a plan template's, an alias's and a fleet's
        "slug": tenant_a.slug,
        "key_id": str(key.pk),
        "replica": "r0",
        "deployment_id": str(candidate.pk),
        "family": v2.family,
        "version": v2.version,
    }


@pytest.fixture
def token(world: dict[str, str]) -> str:
    owner = UserFactory.create(username="walker-token", role=Role.RELEASE_MANAGER)
    _, secret = api_token_create(actor=None, user=owner, name="walk", scopes=list(Scope))
    # A second token for the walk to revoke (revoking its own would end the walk).
    spare, _ = api_token_create(actor=None, user=owner, name="spare", scopes=[Scope.ROLLOUTS_READ])
    world["token_id"] = str(spare.pk)
    return secret
