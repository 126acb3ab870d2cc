"""The tenants REST API: scoped tokens, a tenant admin's token reaches its own tenant only."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from core.models import AuditEvent
from rollouts.models import Route
from tenants.choices import Scope
from tenants.models import ApiKey, Budget, Tenant, User
from tenants.services.accounts import api_token_create
from tenants.services.budgets import budget_set
from tenants.services.gateway_keys import api_key_create
from tenants.tokens import hash_secret
from tests.tenants.conftest import sample, send

ALL = [Scope.TENANTS_READ, Scope.TENANTS_WRITE]


def token_client(user: User, scopes: list[Scope] = ALL) -> APIClient:
    _, secret = api_token_create(actor=None, user=user, name="t-" + "-".join(scopes), scopes=scopes)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def test_a_tenant_admin_lists_only_their_tenant(
    tenant_a_admin: User, tenant_b: Tenant, release_manager: User
) -> None:
    mine = token_client(tenant_a_admin).get("/api/v1/tenants").json()
    assert [t["slug"] for t in mine] == ["tenant-a"]
    everyone = token_client(release_manager).get("/api/v1/tenants").json()
    assert [t["slug"] for t in everyone] == ["tenant-a", "tenant-b"]


def test_another_tenants_objects_are_not_found(
    redis_client: redis.Redis, tenant_a_admin: User, tenant_b: Tenant
) -> None:
    theirs, _ = api_key_create(actor=None, tenant=tenant_b, name="app")
    client = token_client(tenant_a_admin)
    for path in ("", "/budget", "/keys", "/usage"):
        assert client.get(f"/api/v1/tenants/tenant-b{path}").status_code == 404, path
    assert client.post("/api/v1/tenants/tenant-b/keys", {"name": "x"}).status_code == 404
    assert client.post(f"/api/v1/tenants/tenant-b/keys/{theirs.pk}/revoke").status_code == 404
    assert client.post(f"/api/v1/tenants/tenant-a/keys/{theirs.pk}/revoke").status_code == 404
    theirs.refresh_from_db()
    assert theirs.revoked_at is None


def test_tokens_need_the_tenants_scopes(tenant_a_admin: User) -> None:
    client = token_client(tenant_a_admin, [Scope.REGISTRY_READ])
    response = client.get("/api/v1/tenants")
    assert response.status_code == 403
    assert "tenants:read" in response.json()["detail"]
    reader = token_client(tenant_a_admin, [Scope.TENANTS_READ])
    assert reader.get("/api/v1/tenants/tenant-a").status_code == 200
    response = reader.post("/api/v1/tenants/tenant-a/keys", {"name": "x"})
    assert response.status_code == 403
    assert "tenants:write" in response.json()["detail"]


def test_a_key_is_created_with_its_secret_once(
    redis_client: redis.Redis, tenant_a_admin: User, routes: dict[str, Route]
) -> None:
    client = token_client(tenant_a_admin)
    response = client.post(
        "/api/v1/tenants/tenant-a/keys",
        {"name": "ci", "allowed_routes": ["chat"], "expires_at": "2031-01-01T00:00:00Z"},
        format="json",
    )
    assert response.status_code == 201
    body = response.json()
    key = ApiKey.objects.get(pk=body["id"])
    assert key.key_hash == hash_secret(body["secret"])
    assert body["prefix"] == body["secret"][:10]
    listed = client.get("/api/v1/tenants/tenant-a/keys").json()
    assert [k["name"] for k in listed] == ["ci"]
    assert "secret" not in listed[0]
    assert body["secret"] not in str(listed)


def test_only_release_managers_issue_keys_that_force_an_arm(
    redis_client: redis.Redis, tenant_a_admin: User, release_manager: User, tenant_a: Tenant
) -> None:
    data = {"name": "qa", "can_force_arm": True}
    response = token_client(tenant_a_admin).post("/api/v1/tenants/tenant-a/keys", data)
    assert response.status_code == 403
    assert (
        token_client(release_manager).post("/api/v1/tenants/tenant-a/keys", data).status_code == 201
    )


def test_revoking_a_key(redis_client: redis.Redis, tenant_a_admin: User, tenant_a: Tenant) -> None:
    key, _ = api_key_create(actor=None, tenant=tenant_a, name="old")
    response = token_client(tenant_a_admin).post(f"/api/v1/tenants/tenant-a/keys/{key.pk}/revoke")
    assert response.status_code == 200
    assert response.json()["revoked_at"] is not None


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"name": ""}, "name"),
        ({"name": "x", "expires_at": "tomorrow"}, "expires_at"),
        ({"name": "x", "allowed_routes": "chat"}, "allowed_routes"),
    ],
)
def test_bad_key_input_is_a_400(
    redis_client: redis.Redis, tenant_a_admin: User, data: dict[str, Any], field: str
) -> None:
    response = token_client(tenant_a_admin).post(
        "/api/v1/tenants/tenant-a/keys", data, format="json"
    )
    assert response.status_code == 400
    assert field in response.json()


def test_a_past_expiry_is_a_400_saying_so(redis_client: redis.Redis, tenant_a_admin: User) -> None:
    data = {"name": "x", "expires_at": "2001-01-01T00:00:00Z"}
    response = token_client(tenant_a_admin).post(
        "/api/v1/tenants/tenant-a/keys", data, format="json"
    )
    assert response.status_code == 400
    assert "must be in the future" in response.json()["detail"]


def test_release_managers_patch_budgets_with_an_audited_reason(
    redis_client: redis.Redis, release_manager: User, tenant_a: Tenant, routes: dict[str, Route]
) -> None:
    budget_set(actor=None, tenant=tenant_a, tokens_per_day=100, requests_per_minute=5)
    client = token_client(release_manager)
    response = client.patch(
        "/api/v1/tenants/tenant-a/budget",
        {
            "tokens_per_day": 1000,
            "requests_per_minute": None,
            "soft_limit_percent": 90,
            "soft_limit_action": "route",
            "soft_limit_route": "chat-lite",
            "reason": "launch",
        },
        format="json",
    )
    assert response.status_code == 200, response.json()
    assert response.json()["tokens_per_day"] == 1000
    budget = Budget.objects.get(tenant=tenant_a)
    assert (budget.requests_per_minute, budget.soft_limit_route) == (None, "chat-lite")
    event = AuditEvent.objects.filter(action="budget.changed").latest("pk")
    assert event.reason == "launch"
    assert event.data["changes"]["requests_per_minute"] == [5, None]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "give at least one budget field"),
        ({"soft_limit_route": "nowhere", "tokens_per_day": 5}, "no route 'nowhere'"),
        ({"tokens_per_day": -5}, "greater than or equal to 0"),
        ({"over_max_output": "explode"}, "is not a valid choice"),
    ],
)
def test_bad_budget_input_is_a_400_saying_what_to_fix(
    redis_client: redis.Redis,
    release_manager: User,
    tenant_a: Tenant,
    routes: dict[str, Route],
    data: dict[str, Any],
    message: str,
) -> None:
    response = token_client(release_manager).patch(
        "/api/v1/tenants/tenant-a/budget", data, format="json"
    )
    assert response.status_code == 400
    assert message in str(response.json())


def test_tenant_admins_read_but_do_not_change_their_budget(
    redis_client: redis.Redis, tenant_a_admin: User
) -> None:
    client = token_client(tenant_a_admin)
    assert client.get("/api/v1/tenants/tenant-a/budget").status_code == 200
    response = client.patch("/api/v1/tenants/tenant-a/budget", {"tokens_per_day": 1})
    assert response.status_code == 403


def test_usage_has_buckets_routes_and_rejections(
    redis_client: redis.Redis, tenant_a_admin: User, tenant_a: Tenant
) -> None:
    now = timezone.now()
    send(
        redis_client,
        sample(tenant_a, now, pt=40, ot=2),
        sample(tenant_a, now, status=429, finish="rejected", reason="requests_per_minute"),
    )
    client = token_client(tenant_a_admin)
    body = client.get("/api/v1/tenants/tenant-a/usage?range=hour").json()
    assert (body["range"], body["granularity"], len(body["buckets"])) == ("hour", "minute", 60)
    last = body["buckets"][-1]
    assert (last["tokens_in"], last["rejected"]) == (40, 1)
    assert last["rejections"] == {"requests_per_minute": 1}
    assert body["by_route"][0]["route"] == "chat"
    assert body["recent_rejections"][0]["reason"] == "requests_per_minute"
    bad = client.get("/api/v1/tenants/tenant-a/usage?range=year")
    assert bad.status_code == 400
    assert "range must be one of hour, day, month" in bad.json()["detail"]


def test_the_tenants_api_is_in_the_openapi_schema(db: None) -> None:
    # (drf-spectacular's generator is untyped.)
    generator = SchemaGenerator()  # type: ignore[no-untyped-call]
    schema = generator.get_schema(request=None, public=True)  # type: ignore[no-untyped-call]
    paths = schema["paths"]
    for path in (
        "/api/v1/tenants",
        "/api/v1/tenants/{slug}",
        "/api/v1/tenants/{slug}/budget",
        "/api/v1/tenants/{slug}/keys",
        "/api/v1/tenants/{slug}/keys/{key_id}/revoke",
        "/api/v1/tenants/{slug}/usage",
    ):
        assert path in paths, path
    assert "patch" in paths["/api/v1/tenants/{slug}/budget"]
    created = paths["/api/v1/tenants/{slug}/keys"]["post"]["responses"]["201"]
    assert created["content"]["application/json"]["schema"]["$ref"].endswith("ApiKeyCreatedOutput")


def test_a_release_manager_onboards_a_tenant_with_its_first_budget(
    redis_client: redis.Redis, release_manager: User
) -> None:
    client = token_client(release_manager)
    created = client.post(
        "/api/v1/tenants",
        {
            "slug": "initech",
            "name": "Initech",
            "tier": "batch",
            "fail_mode": "open",
            "budget": {"tokens_per_day": 1_000_000, "requests_per_minute": 600},
        },
        format="json",
    )
    assert created.status_code == 201, created.json()
    body = created.json()
    assert (body["slug"], body["tier"], body["fail_mode"]) == ("initech", "batch", "open")
    assert body["budget"]["tokens_per_day"] == 1_000_000
    budget = Budget.objects.get(tenant__slug="initech")
    assert (budget.requests_per_minute, budget.tokens_per_month) == (600, None)
    actions = set(
        AuditEvent.objects.filter(tenant__slug="initech").values_list("action", flat=True)
    )
    assert {"tenant.created", "budget.changed"} <= actions
    again = client.post("/api/v1/tenants", {"slug": "initech", "name": "x"}, format="json")
    assert again.status_code == 409
    assert "already exists" in again.json()["detail"]


def test_onboarding_refuses_bad_input_and_writes_nothing(
    redis_client: redis.Redis, release_manager: User, tenant_a_admin: User
) -> None:
    client = token_client(release_manager)
    cases = [
        ({"slug": "Not A Slug", "name": "x"}, "slug"),
        ({"slug": "ok", "name": "x", "tier": "gold"}, "tier"),
        ({"slug": "ok", "name": "x", "budget": {"tokens_per_dya": 5}}, "unknown fields"),
        ({"slug": "ok", "name": "x", "budget": {"tokens_per_day": -1}}, "budget"),
    ]
    for payload, message in cases:
        response = client.post("/api/v1/tenants", payload, format="json")
        assert response.status_code == 400, payload
        assert message in str(response.json()), response.json()
    refused = token_client(tenant_a_admin).post(
        "/api/v1/tenants", {"slug": "ok", "name": "x"}, format="json"
    )
    assert refused.status_code == 403
    assert not Tenant.objects.filter(slug="ok").exists()
