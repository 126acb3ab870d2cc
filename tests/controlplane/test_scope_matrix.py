"""The scope matrix: for every operation of the API and every scope, a token holding that scope
alone is let through exactly when the scope is the one the operation names; revoked and expired
tokens get 401 everywhere."""

from __future__ import annotations

import datetime as dt
import re
from types import SimpleNamespace

import yaml
from django.test import Client
from django.utils import timezone

from tenants.choices import Scope
from tenants.models import ApiToken, User
from tenants.permissions import TokenHasScopes
from tenants.services.accounts import api_token_create, api_token_revoke
from tests.factories import UserFactory

# Which area's scope each path needs, by its first segment after /api/v1/.
AREAS = {
    "registry": "registry",
    "tenants": "tenants",
    "tokens": "tokens",
    "rollouts": "rollouts",
    "routes": "rollouts",
    "fleets": "rollouts",
    "deployments": "rollouts",
    "plan-templates": "rollouts",
    "feedback": "rollouts",
    "prometheus": "rollouts",
}
# Flagger and Argo Rollouts POST to read a verdict: a read.
READS_BY_POST = {"/api/v1/rollouts/{rollout_id}/verdict"}
LACKS = "lacks the scope(s)"


def expected_scope(path: str, method: str) -> str | None:
    area = path.removeprefix("/api/v1/").split("/")[0]
    if area == "me":
        return None
    if area == "tokens":
        return Scope.TOKENS_WRITE
    kind = "read" if method == "GET" or path in READS_BY_POST else "write"
    return f"{AREAS[area]}:{kind}"


def operations(client: Client, world: dict[str, str]) -> list[tuple[str, str, str]]:
    schema = yaml.safe_load(client.get("/api/schema/").content)
    found = []
    for template, methods in schema["paths"].items():
        path = re.sub(r"\{(\w+)\}", lambda m: world[m.group(1)], template)
        for method in methods:
            if method in ("get", "post", "put", "patch", "delete"):
                found.append((template, method.upper(), path))
    return found


def test_each_scope_allows_exactly_the_operations_it_names(
    world: dict[str, str], token: str
) -> None:
    owner = UserFactory.create(username="matrix", role="release_manager")
    tokens = {
        scope: api_token_create(actor=None, user=owner, name=scope, scopes=[Scope(scope)])[1]
        for scope in Scope.values
    }
    walked = operations(Client(), world)
    assert len(walked) >= 60
    wrong = []
    for template, method, path in walked:
        expected = expected_scope(template, method)
        for scope, secret in tokens.items():
            client = Client(headers={"Authorization": f"Bearer {secret}"})
            response = client.generic(method, path, data=b"{}", content_type="application/json")
            refused = response.status_code == 403 and LACKS in response.content.decode()
            if expected is None or scope == expected:
                if refused or response.status_code == 401:
                    wrong.append(f"{method} {template} refused to {scope}")
            elif not refused:
                wrong.append(f"{method} {template} let {scope} through: {response.status_code}")
            elif expected not in response.json()["detail"]:
                wrong.append(f"{method} {template}: {response.json()['detail']}")
    assert wrong == []


def test_a_method_no_scope_names_is_refused_not_let_through(
    world: dict[str, str], token: str
) -> None:
    owner = UserFactory.create(username="matrix", role="release_manager")
    _, secret = api_token_create(actor=None, user=owner, name="all", scopes=list(Scope))
    token_row = ApiToken.objects.get(name="all")

    class View:
        required_scopes_by_method = {"GET": (Scope.ROLLOUTS_READ,)}

        def put(self) -> None: ...

    request = SimpleNamespace(auth=token_row, method="PUT")
    permission = TokenHasScopes()
    assert permission.has_permission(request, View()) is False  # type: ignore[arg-type]
    assert "No API token scope allows PUT" in permission.message
    # A method the view does not answer is its 405, not a 403.
    client = Client(headers={"Authorization": f"Bearer {secret}"})
    response = client.put("/api/v1/rollouts", data=b"{}", content_type="application/json")
    assert response.status_code == 405


def test_revoked_and_expired_tokens_get_401_everywhere(world: dict[str, str], token: str) -> None:
    owner = UserFactory.create(username="matrix", role="release_manager")
    revoked, revoked_secret = api_token_create(actor=None, user=owner, name="r", scopes=list(Scope))
    api_token_revoke(actor=owner, token_id=revoked.pk)
    soon = timezone.now() + dt.timedelta(minutes=1)
    expired, expired_secret = api_token_create(
        actor=None, user=owner, name="e", scopes=list(Scope), expires_at=soon
    )
    ApiToken.objects.filter(pk=expired.pk).update(expires_at=soon - dt.timedelta(hours=1))
    answers = set()
    for _template, method, path in operations(Client(), world):
        for secret in (revoked_secret, expired_secret):
            client = Client(headers={"Authorization": f"Bearer {secret}"})
            response = client.generic(method, path, data=b"{}", content_type="application/json")
            answers.add((method, path, response.status_code))
    assert {status for _, _, status in answers} == {401}, sorted(a for a in answers if a[2] != 401)[
        :10
    ]
    assert isinstance(owner, User)
