import datetime as dt

from django.utils import timezone
from rest_framework.test import APIClient

from tenants.choices import Scope
from tenants.models import ApiToken, User
from tenants.services.accounts import api_token_create, api_token_revoke
from tenants.tokens import hash_secret


def me(client: APIClient, secret: str) -> tuple[int, dict[str, object]]:
    response = client.get("/api/v1/me", headers={"Authorization": f"Bearer {secret}"})
    return response.status_code, response.json()


def test_it_identifies_the_caller_and_its_scopes(api_client: APIClient, ci_token: str) -> None:
    status, body = me(api_client, ci_token)
    assert status == 200
    assert body["username"] == "ci-pipeline"
    assert body["role"] == "release_manager"
    assert body["authenticated_by"] == "token"
    assert body["scopes"] == sorted(
        ["registry:read", "registry:write", "rollouts:read", "rollouts:write"]
    )


def test_it_stores_only_a_hash_and_a_short_prefix(ci_user: User, ci_token: str) -> None:
    token = ApiToken.objects.get(user=ci_user)
    assert token.token_hash == hash_secret(ci_token)
    assert ci_token.startswith(token.prefix)
    assert len(token.prefix) < len(ci_token) / 3
    stored = [str(v) for v in ApiToken.objects.filter(pk=token.pk).values_list().get()]
    assert not any(ci_token in value for value in stored)


def test_it_rejects_an_unknown_token_with_401(api_client: APIClient, db: None) -> None:
    status, body = me(api_client, "tg_not-a-real-token")
    assert status == 401
    assert body["detail"] == "Invalid or revoked API token."


def test_it_rejects_a_revoked_token(api_client: APIClient, ci_user: User, ci_token: str) -> None:
    api_token_revoke(actor=None, token_id=ApiToken.objects.get(user=ci_user).pk)
    status, body = me(api_client, ci_token)
    assert status == 401
    assert "revoked" in str(body["detail"])


def test_it_rejects_an_expired_token_saying_when_it_expired(
    api_client: APIClient, ci_user: User
) -> None:
    soon = timezone.now() + dt.timedelta(minutes=1)
    token, secret = api_token_create(
        actor=None, user=ci_user, name="old", scopes=[Scope.REGISTRY_READ], expires_at=soon
    )
    ApiToken.objects.filter(pk=token.pk).update(expires_at=soon - dt.timedelta(minutes=2))
    status, body = me(api_client, secret)
    assert status == 401
    assert "expired" in str(body["detail"])


def test_it_rejects_a_token_whose_owner_is_deactivated(
    api_client: APIClient, ci_user: User, ci_token: str
) -> None:
    ci_user.is_active = False
    ci_user.save()
    status, body = me(api_client, ci_token)
    assert status == 401
    assert "deactivated" in str(body["detail"])


def test_missing_credentials_are_401_with_a_bearer_challenge(
    api_client: APIClient, db: None
) -> None:
    response = api_client.get("/api/v1/me")
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_a_malformed_authorization_header_says_what_is_expected(
    api_client: APIClient, db: None
) -> None:
    response = api_client.get("/api/v1/me", headers={"Authorization": "Bearer two words"})
    assert response.status_code == 401
    assert "Bearer <api token>" in response.json()["detail"]


def test_it_records_when_a_token_was_last_used(api_client: APIClient, ci_token: str) -> None:
    token = ApiToken.objects.get(token_hash=hash_secret(ci_token))
    assert token.last_used_at is None
    me(api_client, ci_token)
    token.refresh_from_db()
    assert token.last_used_at is not None


def test_session_users_see_their_role_and_tenant(
    api_client: APIClient, tenant_a_admin: User
) -> None:
    api_client.force_login(tenant_a_admin)
    body = api_client.get("/api/v1/me").json()
    assert body == {
        "username": "tenant-a-admin",
        "role": "tenant_admin",
        "tenant": "tenant-a",
        "authenticated_by": "session",
        "scopes": None,
    }
