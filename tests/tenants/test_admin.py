"""The Django admin writes tenants, budgets and keys through the audited services."""

from __future__ import annotations

import redis
from django.test import Client

from core.models import AuditEvent
from tenants.models import ApiKey, Budget, Tenant, User
from tenants.services.budgets import budget_set
from tenants.services.gateway_keys import api_key_create


def admin_client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_budget_edited_in_the_admin_is_audited(
    redis_client: redis.Redis, release_manager: User, tenant_a: Tenant
) -> None:
    budget = budget_set(actor=None, tenant=tenant_a, tokens_per_day=100)
    response = admin_client(release_manager).post(
        f"/admin/tenants/budget/{budget.pk}/change/",
        {
            "tokens_per_day": "250",
            "over_max_output": "clamp",
            "default_output_allowance": "1024",
            "soft_limit_action": "reject",
            "soft_limit_route": "",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Budget.objects.get(pk=budget.pk).tokens_per_day == 250
    event = AuditEvent.objects.filter(action="budget.changed").latest("pk")
    assert (event.actor_name, event.reason) == ("release-manager", "Django admin")
    assert event.data["changes"] == {"tokens_per_day": [100, 250]}


def test_a_tenant_added_and_changed_in_the_admin_is_audited(
    redis_client: redis.Redis, release_manager: User
) -> None:
    client = admin_client(release_manager)
    data = {"slug": "initech", "name": "Initech", "tier": "standard", "fail_mode": "closed"}
    assert client.post("/admin/tenants/tenant/add/", data).status_code == 302
    tenant = Tenant.objects.get(slug="initech")
    assert AuditEvent.objects.filter(action="tenant.created", target_id=str(tenant.pk)).exists()

    changed = {**data, "tier": "critical"}
    assert client.post(f"/admin/tenants/tenant/{tenant.pk}/change/", changed).status_code == 302
    tenant.refresh_from_db()
    assert tenant.tier == "critical"
    event = AuditEvent.objects.get(action="tenant.changed")
    assert event.data["changes"] == {"tier": ["standard", "critical"]}
    assert (
        client.post(f"/admin/tenants/tenant/{tenant.pk}/delete/", {"post": "yes"}).status_code
        == 403
    )


def test_keys_are_revoked_from_the_admin_with_an_audit_row(
    redis_client: redis.Redis, release_manager: User, tenant_a: Tenant
) -> None:
    key, _ = api_key_create(actor=None, tenant=tenant_a, name="leaked")
    response = admin_client(release_manager).post(
        "/admin/tenants/apikey/", {"action": "revoke", "_selected_action": [key.pk]}
    )
    assert response.status_code == 302
    assert ApiKey.objects.get(pk=key.pk).revoked_at is not None
    assert AuditEvent.objects.filter(action="api_key.revoked", target_id=str(key.pk)).exists()
