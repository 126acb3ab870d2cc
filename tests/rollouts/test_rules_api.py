"""Route rules over the REST API."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from rest_framework.test import APIClient

from core.models import AuditEvent
from rollouts.models import Deployment, Route, RouteRule
from rollouts.services.rules import route_rule_create
from tenants.choices import Scope
from tenants.models import Tenant, User
from tenants.services.accounts import api_token_create
from tests.factories import DeploymentFactory
from tests.registry.factories import register

RULES = "/api/v1/routes/chat/rules"


@pytest.fixture
def cheap(route: Route) -> Deployment:
    return DeploymentFactory.create(
        artifact=register(family="chat-small", version="v1"),
        fleet=route.baseline.fleet,
        served_model_name="chat-small",
        max_model_len=8192,
        state="ready",
    )


def test_ci_adds_reads_replaces_and_removes_a_rule(
    api_client: APIClient,
    ci_token: str,
    route: Route,
    cheap: Deployment,
    tenant_a: Tenant,
    redis_client: redis.Redis,
) -> None:
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {ci_token}")
    created = api_client.post(
        RULES,
        {"name": "batch", "target_deployment": cheap.pk, "tiers": ["batch"]},
        format="json",
    )
    assert created.status_code == 201, created.json()
    body = created.json()
    assert {k: body[k] for k in ("name", "order", "arm", "tiers", "tenants", "active")} == {
        "name": "batch",
        "order": 1,
        "arm": "rule:batch",
        "tiers": ["batch"],
        "tenants": [],
        "active": True,
    }
    assert body["target"]["served_model_name"] == "chat-small"
    replaced = api_client.put(
        f"{RULES}/batch",
        {"target_deployment": cheap.pk, "tenants": ["tenant-a"], "max_prompt_tokens": 2000},
        format="json",
    )
    assert replaced.status_code == 200, replaced.json()
    assert (replaced.json()["tenants"], replaced.json()["tiers"]) == (["tenant-a"], [])
    assert [r["name"] for r in api_client.get(RULES).json()] == ["batch"]
    assert api_client.delete(f"{RULES}/batch").status_code == 204
    assert api_client.get(RULES).json() == []
    actions = list(
        AuditEvent.objects.filter(action__startswith="route_rule")
        .order_by("id")
        .values_list("action", flat=True)
    )
    assert actions == ["route_rule.created", "route_rule.updated", "route_rule.deleted"]


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"name": "r", "target_deployment": 999999, "tiers": ["batch"]}, "no deployment 999999"),
        ({"name": "r", "tenants": ["nope"]}, "no tenant named nope"),
        ({"name": "r", "tiers": ["gold"]}, "is not a valid choice"),
        ({"name": "r", "min_prompt_tokens": -1}, "greater than or equal to 0"),
        ({"name": "r"}, "a rule must match on something"),
        ({"name": "r", "min_prompt_tokens": 9, "max_prompt_tokens": 8}, "is above"),
        ({"name": "x" * 41, "tiers": ["batch"]}, "no more than 40 characters"),
        ({"name": "R!", "tiers": ["batch"]}, "lower-case letters"),
    ],
)
def test_bad_rules_are_clear_400s(
    api_client: APIClient,
    release_manager: User,
    route: Route,
    cheap: Deployment,
    payload: dict[str, Any],
    message: str,
) -> None:
    api_client.force_login(release_manager)
    response = api_client.post(RULES, {"target_deployment": cheap.pk, **payload}, format="json")
    assert response.status_code == 400, response.json()
    assert message in str(response.json()), response.json()


def test_an_unknown_route_or_rule_is_404(
    api_client: APIClient, release_manager: User, route: Route
) -> None:
    api_client.force_login(release_manager)
    assert api_client.get("/api/v1/routes/nope/rules").status_code == 404
    missing = api_client.get(f"{RULES}/nope")
    assert (missing.status_code, missing.json()) == (
        404,
        {"detail": "route chat has no rule named 'nope'"},
    )


def test_a_route_name_with_a_slash_is_addressable(
    api_client: APIClient, release_manager: User, route: Route
) -> None:
    Route.objects.filter(pk=route.pk).update(name="org/chat-8b")
    api_client.force_login(release_manager)
    assert api_client.get("/api/v1/routes/org/chat-8b/rules").json() == []


@pytest.mark.parametrize("actor", ["viewer", "tenant_a_admin"])
def test_only_release_managers_write_rules(
    api_client: APIClient,
    request: pytest.FixtureRequest,
    route: Route,
    cheap: Deployment,
    actor: str,
) -> None:
    api_client.force_login(request.getfixturevalue(actor))
    payload = {"name": "r", "target_deployment": cheap.pk, "tiers": ["batch"]}
    assert api_client.post(RULES, payload, format="json").status_code == 403
    assert not RouteRule.objects.exists()


def test_a_read_only_token_cannot_write_rules(
    api_client: APIClient, ci_user: User, route: Route, cheap: Deployment
) -> None:
    _, secret = api_token_create(actor=None, user=ci_user, name="ro", scopes=[Scope.ROLLOUTS_READ])
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert api_client.get(RULES).status_code == 200
    payload = {"name": "r", "target_deployment": cheap.pk, "tiers": ["batch"]}
    refused = api_client.post(RULES, payload, format="json")
    assert refused.status_code == 403
    assert "rollouts:write" in refused.json()["detail"]


def test_a_tenant_admin_reads_only_the_rules_that_can_apply_to_them(
    api_client: APIClient,
    route: Route,
    cheap: Deployment,
    tenant_a: Tenant,
    tenant_b: Tenant,
    release_manager: User,
    tenant_a_admin: User,
) -> None:
    def add(name: str, **fields: Any) -> None:
        route_rule_create(actor=release_manager, route=route, name=name, target=cheap, **fields)

    add("everyone", tiers=["batch"])
    add("pin-a", tenants=[tenant_a])
    add("pin-b", tenants=[tenant_b])
    add("pin-both", tenants=[tenant_a, tenant_b])
    api_client.force_login(tenant_a_admin)
    seen = {r["name"]: r["tenants"] for r in api_client.get(RULES).json()}
    assert seen == {"everyone": [], "pin-a": ["tenant-a"], "pin-both": ["tenant-a"]}
    assert api_client.get(f"{RULES}/pin-b").status_code == 404
    # A route closed to tenant A does not exist for its admin, rules and all.
    route.tenants.set([tenant_b])
    assert api_client.get(RULES).status_code == 404
