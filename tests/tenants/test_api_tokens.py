"""API tokens as people and pipelines get them: the page, /api/v1/tokens and the command."""

from __future__ import annotations

import datetime as dt
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from core.errors import DomainError
from core.models import AuditEvent
from tenants.choices import Scope
from tenants.models import ApiToken, User
from tenants.services.accounts import api_token_create
from tenants.tokens import hash_secret


def bearer(secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def token_of(user: User, *scopes: Scope) -> str:
    _, secret = api_token_create(actor=None, user=user, name="-".join(scopes), scopes=list(scopes))
    return secret


# --- the service ---------------------------------------------------------------------------------


def test_a_token_never_holds_more_than_its_owners_role(viewer: User) -> None:
    with pytest.raises(DomainError, match="viewer, whose tokens may hold only") as refused:
        api_token_create(actor=None, user=viewer, name="x", scopes=[Scope.ROLLOUTS_WRITE])
    assert "not rollouts:write" in str(refused.value)
    with pytest.raises(DomainError, match="at least one scope"):
        api_token_create(actor=None, user=viewer, name="x", scopes=[])
    past = timezone.now() - dt.timedelta(seconds=1)
    with pytest.raises(DomainError, match="expiry must be in the future"):
        api_token_create(
            actor=None, user=viewer, name="x", scopes=[Scope.ROLLOUTS_READ], expires_at=past
        )
    assert not ApiToken.objects.filter(user=viewer).exists()


# --- the API -------------------------------------------------------------------------------------


def test_a_token_with_tokens_write_issues_a_token_shown_once_that_works(
    release_manager: User,
) -> None:
    client = bearer(
        token_of(release_manager, Scope.TOKENS_WRITE, Scope.ROLLOUTS_READ, Scope.ROLLOUTS_WRITE)
    )
    later = (timezone.now() + dt.timedelta(days=90)).isoformat()
    response = client.post(
        "/api/v1/tokens",
        {
            "name": "deploy-pipeline",
            "scopes": ["rollouts:write", "rollouts:read"],
            "expires_at": later,
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    assert response["Cache-Control"] == "no-store"
    body = response.json()
    assert body["scopes"] == ["rollouts:read", "rollouts:write"]
    stored = ApiToken.objects.get(pk=body["id"])
    assert stored.token_hash == hash_secret(body["secret"])
    me = bearer(body["secret"]).get("/api/v1/me").json()
    assert (me["username"], me["scopes"]) == (
        "release-manager",
        ["rollouts:read", "rollouts:write"],
    )
    listed = client.get("/api/v1/tokens").json()
    assert {t["name"] for t in listed} == {
        "tokens:write-rollouts:read-rollouts:write",
        "deploy-pipeline",
    }
    assert all("secret" not in t for t in listed)
    event = AuditEvent.objects.get(action="api_token.created", data__name="deploy-pipeline")
    assert event.actor_id == release_manager.pk
    assert body["secret"] not in str(event.data)


def test_the_api_refuses_tokens_without_the_scope_and_scopes_beyond_the_role(
    release_manager: User, viewer: User
) -> None:
    narrow = bearer(token_of(release_manager, Scope.ROLLOUTS_WRITE))
    refused = narrow.post("/api/v1/tokens", {"name": "x", "scopes": ["rollouts:read"]})
    assert refused.status_code == 403
    assert "lacks the scope(s): tokens:write" in refused.json()["detail"]
    assert narrow.get("/api/v1/tokens").status_code == 403

    viewers = bearer(token_of(viewer, Scope.TOKENS_WRITE))
    wider = viewers.post(
        "/api/v1/tokens", {"name": "x", "scopes": ["rollouts:write"]}, format="json"
    )
    assert wider.status_code == 403  # beyond the token, and beyond a viewer's role anyway
    assert "not rollouts:write" in str(wider.json())
    unknown = viewers.post("/api/v1/tokens", {"name": "x", "scopes": ["root"]}, format="json")
    assert unknown.status_code == 400
    assert "root" in str(unknown.json())
    assert ApiToken.objects.filter(user=viewer).count() == 1


def test_a_revoked_token_is_refused_and_nobody_revokes_anothers(
    release_manager: User, viewer: User
) -> None:
    own = bearer(token_of(release_manager, Scope.TOKENS_WRITE, Scope.ROLLOUTS_READ))
    victim = token_of(viewer, Scope.TOKENS_WRITE, Scope.ROLLOUTS_READ)
    victim_id = ApiToken.objects.get(token_hash=hash_secret(victim)).pk
    assert own.post(f"/api/v1/tokens/{victim_id}/revoke").status_code == 404
    assert bearer(victim).get("/api/v1/me").status_code == 200

    mine = own.post("/api/v1/tokens", {"name": "short", "scopes": ["rollouts:read"]}, format="json")
    secret, token_id = mine.json()["secret"], mine.json()["id"]
    revoked = own.post(f"/api/v1/tokens/{token_id}/revoke")
    assert revoked.status_code == 200
    assert revoked.json()["revoked_at"] is not None
    assert bearer(secret).get("/api/v1/me").status_code == 401


# --- the command ---------------------------------------------------------------------------------


def test_the_command_prints_the_token_alone_for_a_pipeline_to_capture(
    release_manager: User,
) -> None:
    out, err = StringIO(), StringIO()
    call_command(
        "create_api_token",
        "release-manager",
        "--scope",
        "registry:write,rollouts:write",
        "--scope",
        "rollouts:read",
        "--expires",
        "90d",
        "--name",
        "ci",
        stdout=out,
        stderr=err,
    )
    secret = out.getvalue().strip()
    assert "\n" not in secret
    token = ApiToken.objects.get(token_hash=hash_secret(secret))
    assert token.scopes == ["registry:write", "rollouts:read", "rollouts:write"]
    assert token.expires_at is not None
    assert dt.timedelta(days=89) < token.expires_at - timezone.now() <= dt.timedelta(days=90)
    assert "'ci'" in err.getvalue()
    assert secret not in err.getvalue()
    assert bearer(secret).get("/api/v1/me").json()["username"] == "release-manager"


def test_the_command_gives_all_a_role_allows_and_says_what_is_wrong(viewer: User) -> None:
    out = StringIO()
    call_command("create_api_token", "viewer", "--scope", "all", stdout=out, stderr=StringIO())
    token = ApiToken.objects.get(token_hash=hash_secret(out.getvalue().strip()))
    assert set(token.scopes) == {"registry:read", "rollouts:read", "tenants:read", "tokens:write"}
    cases = [
        (["nobody", "--scope", "all"], "no user named 'nobody'"),
        (["viewer", "--scope", "rollouts:write"], "not rollouts:write"),
        (["viewer", "--scope", "root"], "unknown scope(s) root"),
        (["viewer", "--scope", "all", "--expires", "soon"], "give a duration (90d, 12h)"),
        (["viewer", "--scope", "all", "--expires", "2001-01-01"], "in the future"),
    ]
    for args, message in cases:
        with pytest.raises(CommandError, match=message.replace("(", r"\(").replace(")", r"\)")):
            call_command("create_api_token", *args, stdout=StringIO(), stderr=StringIO())
    assert ApiToken.objects.filter(user=viewer).count() == 1


# --- the page ------------------------------------------------------------------------------------


def test_a_person_creates_a_token_on_the_page_and_sees_the_secret_once(
    client: Client, viewer: User
) -> None:
    client.force_login(viewer)
    page = client.get("/account/tokens/").content.decode()
    assert 'value="rollouts:read"' in page
    assert 'value="rollouts:write"' not in page  # a viewer is not offered what it cannot hold
    created = client.post("/account/tokens/new", {"name": "laptop", "scopes": ["rollouts:read"]})
    assert created.status_code == 201
    assert created["Cache-Control"] == "no-store"
    token = ApiToken.objects.get(user=viewer, name="laptop")
    body = created.content.decode()
    secret = body.split('data-testid="new-secret">', 1)[1].split("<code>", 1)[1].split("<")[0]
    assert hash_secret(secret) == token.token_hash
    assert secret not in client.get("/account/tokens/").content.decode()

    beyond = client.post("/account/tokens/new", {"name": "x", "scopes": ["rollouts:write"]})
    assert beyond.status_code == 400
    assert "rollouts:write is not one of the available choices" in beyond.content.decode()

    revoked = client.post(f"/account/tokens/{token.pk}/revoke")
    assert revoked.status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None


def test_the_page_shows_and_revokes_only_ones_own_tokens(
    client: Client, viewer: User, release_manager: User
) -> None:
    theirs = ApiToken.objects.get(
        token_hash=hash_secret(token_of(release_manager, Scope.ROLLOUTS_WRITE))
    )
    client.force_login(viewer)
    assert theirs.prefix not in client.get("/account/tokens/").content.decode()
    assert client.post(f"/account/tokens/{theirs.pk}/revoke").status_code == 404
    theirs.refresh_from_db()
    assert theirs.revoked_at is None


def test_the_forms_need_their_csrf_token(viewer: User) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(viewer)
    forged = client.post("/account/tokens/new", {"name": "x", "scopes": ["rollouts:read"]})
    assert forged.status_code == 403
    assert not ApiToken.objects.filter(user=viewer).exists()


def test_a_token_makes_no_token_wider_or_longer_lived_than_itself(release_manager: User) -> None:
    soon = timezone.now() + dt.timedelta(hours=1)
    _, secret = api_token_create(
        actor=None,
        user=release_manager,
        name="ci",
        scopes=[Scope.TOKENS_WRITE, Scope.ROLLOUTS_READ],
        expires_at=soon,
    )
    client = bearer(secret)
    wider = client.post(
        "/api/v1/tokens",
        {"name": "x", "scopes": ["rollouts:write"], "expires_at": soon.isoformat()},
        format="json",
    )
    assert wider.status_code == 403
    assert "not rollouts:write" in wider.json()["detail"]
    forever = client.post(
        "/api/v1/tokens", {"name": "x", "scopes": ["rollouts:read"]}, format="json"
    )
    assert forever.status_code == 403
    assert "must expire by then" in forever.json()["detail"]
    narrower = client.post(
        "/api/v1/tokens",
        {"name": "x", "scopes": ["rollouts:read"], "expires_at": soon.isoformat()},
        format="json",
    )
    assert narrower.status_code == 201
    assert ApiToken.objects.filter(user=release_manager).count() == 2


def test_prometheus_gets_a_fresh_read_only_token_and_the_old_one_is_revoked(
    tmp_path: Path, release_manager: User
) -> None:
    path = tmp_path / "token"
    call_command("prometheus_sd_token", str(path), stdout=StringIO())
    first = path.read_text()
    call_command("prometheus_sd_token", str(path), stdout=StringIO())
    assert bearer(first).get("/api/v1/prometheus/targets").status_code == 401
    assert bearer(path.read_text()).get("/api/v1/prometheus/targets").status_code == 200
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert AuditEvent.objects.filter(action="api_token.revoked").count() == 1
    User.objects.filter(username="prometheus").update(role="release_manager")
    with pytest.raises(CommandError, match="not the viewer"):
        call_command("prometheus_sd_token", str(path), stdout=StringIO())
