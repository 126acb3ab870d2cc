import pytest

from core.errors import Conflict, DomainError
from core.models import AuditEvent
from tenants.models import ApiKey, Budget, Tenant, User
from tenants.services.budgets import budget_set
from tenants.services.gateway_keys import api_key_create, api_key_revoke
from tenants.tokens import hash_secret


def test_a_key_is_stored_as_a_hash_and_shown_once(tenant_a: Tenant, release_manager: User) -> None:
    key, secret = api_key_create(actor=release_manager, tenant=tenant_a, name="prod")
    assert secret.startswith("tk_")
    stored = ApiKey.objects.get(pk=key.pk)
    assert stored.key_hash == hash_secret(secret)
    assert secret.startswith(stored.prefix)
    assert secret not in str(list(ApiKey.objects.values_list()))
    event = AuditEvent.objects.get(action="api_key.created")
    assert event.tenant == tenant_a
    assert secret not in str(event.data)


def test_key_names_are_unique_per_tenant(tenant_a: Tenant, tenant_b: Tenant) -> None:
    api_key_create(actor=None, tenant=tenant_a, name="prod")
    api_key_create(actor=None, tenant=tenant_b, name="prod")
    with pytest.raises(Conflict, match="already has a key named 'prod'"):
        api_key_create(actor=None, tenant=tenant_a, name="prod")


def test_revoking_a_key_twice_is_audited_once(tenant_a: Tenant) -> None:
    key, _ = api_key_create(actor=None, tenant=tenant_a, name="prod")
    api_key_revoke(actor=None, key_id=key.pk)
    api_key_revoke(actor=None, key_id=key.pk)
    assert AuditEvent.objects.filter(action="api_key.revoked").count() == 1


def test_budget_changes_are_audited_with_before_and_after(
    tenant_a: Tenant, release_manager: User
) -> None:
    budget_set(actor=release_manager, tenant=tenant_a, requests_per_minute=100)
    budget_set(
        actor=release_manager, tenant=tenant_a, reason="launch week", requests_per_minute=500
    )
    events = list(AuditEvent.objects.filter(action="budget.changed").order_by("id"))
    assert [e.data["changes"] for e in events] == [
        {"requests_per_minute": [None, 100]},
        {"requests_per_minute": [100, 500]},
    ]
    assert events[1].reason == "launch week"
    assert Budget.objects.get(tenant=tenant_a).requests_per_minute == 500


def test_setting_a_budget_to_what_it_is_changes_nothing(tenant_a: Tenant) -> None:
    budget_set(actor=None, tenant=tenant_a, tokens_per_day=1000)
    budget_set(actor=None, tenant=tenant_a, tokens_per_day=1000)
    assert AuditEvent.objects.filter(action="budget.changed").count() == 1


def test_unknown_budget_fields_are_refused(tenant_a: Tenant) -> None:
    with pytest.raises(DomainError, match="unknown budget fields: tokens_per_year"):
        budget_set(actor=None, tenant=tenant_a, tokens_per_year=5)
