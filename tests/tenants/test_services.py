import threading

import pytest
from django.core.exceptions import ValidationError
from django.db import connection

from core.errors import Conflict, DomainError
from core.models import AuditEvent
from tenants.choices import Role, Scope
from tenants.models import ApiToken, Tenant, User
from tenants.services.accounts import api_token_create, api_token_revoke, tenant_create, user_create


def test_tenant_creation_is_audited(release_manager: User) -> None:
    tenant = tenant_create(actor=release_manager, slug="initech", name="Initech")
    event = AuditEvent.objects.get(action="tenant.created")
    assert (event.actor, event.tenant, event.target_id) == (
        release_manager,
        tenant,
        str(tenant.pk),
    )


def test_a_tenant_admin_must_belong_to_a_tenant(db: None) -> None:
    with pytest.raises(ValidationError):
        user_create(actor=None, username="orphan", role=Role.TENANT_ADMIN)


def test_only_tenant_admins_are_bound_to_a_tenant(tenant_a: Tenant) -> None:
    with pytest.raises(ValidationError):
        user_create(actor=None, username="rm", role=Role.RELEASE_MANAGER, tenant=tenant_a)


def test_only_release_managers_get_the_django_admin(tenant_a: Tenant) -> None:
    manager = user_create(actor=None, username="rm", role=Role.RELEASE_MANAGER, password="pw-1")
    admin = user_create(
        actor=None, username="ta", role=Role.TENANT_ADMIN, tenant=tenant_a, password="pw-2"
    )
    viewer = user_create(actor=None, username="v", role=Role.VIEWER, password="pw-3")
    assert (manager.is_staff, admin.is_staff, viewer.is_staff) == (True, False, False)


def test_token_names_are_unique_per_user(ci_user: User, ci_token: str) -> None:
    with pytest.raises(Conflict, match="already has a token named 'ci'"):
        api_token_create(actor=None, user=ci_user, name="ci", scopes=[Scope.REGISTRY_READ])


def test_unknown_scopes_are_rejected(ci_user: User) -> None:
    with pytest.raises(DomainError, match="not everything"):
        api_token_create(actor=None, user=ci_user, name="bad", scopes=["everything"])  # type: ignore[list-item]


def test_revoking_twice_is_a_no_op_audited_once(ci_user: User, ci_token: str) -> None:
    token = ApiToken.objects.get(user=ci_user)
    first = api_token_revoke(actor=ci_user, token_id=token.pk)
    second = api_token_revoke(actor=ci_user, token_id=token.pk)
    assert first.revoked_at == second.revoked_at
    assert AuditEvent.objects.filter(action="api_token.revoked").count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_revocations_record_one_event(ci_user: User, ci_token: str) -> None:
    token = ApiToken.objects.get(user=ci_user)
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def revoke() -> None:
        try:
            barrier.wait()
            api_token_revoke(actor=ci_user, token_id=token.pk)
        except BaseException as exc:  # noqa: BLE001 -- surfaced by the assertion below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=revoke) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert AuditEvent.objects.filter(action="api_token.revoked").count() == 1
