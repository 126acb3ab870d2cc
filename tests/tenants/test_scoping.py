"""A tenant admin sees nothing of another tenant, anywhere: every URL of the control plane is
walked with the fixed cast of actors.

The walk reads the resolved urlconf, so a page or endpoint added by any app is walked without
touching this file. Each parameter is filled with real objects of both tenants where the
parameter names one (a tenant slug, a key, an admin object id, a route…), and with a
placeholder otherwise. Then:

- no response to anyone is a 500;
- a tenant admin never finds the other tenant's name, slug, users, key prefixes or private route
  in any body (pages, API, exports, search, admin), except as the echo of a URL that was
  answered 404;
- every URL that names the other tenant's objects is a 404 to a tenant admin (a redirect to the
  login for the Django admin, which tenant admins may not enter), for GET and for POST.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

import pytest
import redis
from django.http import HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.urls.resolvers import RegexPattern
from django.utils import timezone

from rollouts.models import Route
from rollouts.services.rollouts import rollout_create
from tenants.choices import ROLE_SCOPES, Scope
from tenants.models import ApiKey, Tenant, User
from tenants.services.accounts import api_token_create
from tenants.services.budgets import budget_set
from tenants.services.gateway_keys import api_key_create
from tests.factories import DeploymentFactory, RouteFactory
from tests.registry.factories import register
from tests.tenants.conftest import sample, send


@dataclass(frozen=True)
class Target:
    pattern: str
    path: str
    owner: str | None  # "a" or "b" when the path names that tenant's objects
    echoes: tuple[str, ...]  # values taken from the path, which a 404 may echo
    ghost: str  # the same pattern naming objects that do not exist


@dataclass
class World:
    tenants: dict[str, Tenant]
    secrets: dict[str, list[str]]  # per tenant: text that only its own people may see
    values: dict[str, dict[str, list[str]]]  # parameter -> owner ("a", "b", "") -> values


def _model_ids(model: type, tenant: Tenant) -> list[str]:
    field = {"tenant": "pk", "user": "tenant", "budget": "tenant", "apikey": "tenant"}
    name = model.__name__.lower()
    if name not in field:
        return []
    lookup = {field[name]: tenant} if field[name] != "pk" else {"pk": tenant.pk}
    return [str(pk) for pk in model.objects.filter(**lookup).values_list("pk", flat=True)]  # type: ignore[attr-defined]


@pytest.fixture
def world(
    redis_client: redis.Redis,
    routes: dict[str, Route],
    tenant_a: Tenant,
    tenant_b: Tenant,
    tenant_a_admin: User,
    tenant_b_admin: User,
) -> World:
    """Both tenants with keys, budgets, usage, rejections and audit rows; a route (with a
    rollout) open to tenant B alone."""
    now = timezone.now()
    keys: dict[str, ApiKey] = {}
    for label, tenant, admin in (("a", tenant_a, tenant_a_admin), ("b", tenant_b, tenant_b_admin)):
        keys[label], _ = api_key_create(actor=admin, tenant=tenant, name=f"{label}-app")
        budget_set(actor=None, tenant=tenant, tokens_per_day=1_000_000)
        send(
            redis_client,
            sample(tenant, now),
            sample(tenant, now - dt.timedelta(days=2)),
            sample(tenant, now, status=429, finish="rejected", reason="tokens_per_day"),
        )
    private_baseline = DeploymentFactory.create(
        artifact=register(family="b-private-model", version="v1"),
        fleet=routes["chat"].baseline.fleet,
        served_model_name="b-private-v1",
        state="ready",
    )
    private = RouteFactory.create(name="b-private-route", baseline=private_baseline)
    private.tenants.set([tenant_b])
    candidate = DeploymentFactory.create(
        artifact=register(family="b-private-model", version="v2"),
        fleet=private_baseline.fleet,
        served_model_name="b-private-v2",
        state="ready",
    )
    rollout = rollout_create(actor=None, route=private, candidate=candidate)
    tenants = {"a": tenant_a, "b": tenant_b}
    secrets = {label: [t.name, t.slug, keys[label].prefix] for label, t in tenants.items()}
    secrets["b"].append("b-private-route")
    values: dict[str, dict[str, list[str]]] = {
        "slug": {label: [t.slug] for label, t in tenants.items()},
        "key_id": {label: [str(keys[label].pk)] for label in tenants},
        "route_name": {"": ["chat"], "b": ["b-private-route"]},
        "rollout_id": {"b": [str(rollout.pk)]},
        "family": {"": ["support-chat"]},
        "version": {"": ["v1"]},
    }
    return World(tenants, secrets, values)


# --- the walk -------------------------------------------------------------------------------------

PARAMETER = re.compile(r"<(?:(?P<converter>[^>:]+):)?(?P<name>[^>]+)>")
REGEX_PLACEHOLDERS = {"app_label": "tenants", "url": "no-such-page"}


def patterns(resolvers: list[URLPattern | URLResolver], prefix: str = "") -> Iterator[str]:
    for entry in resolvers:
        if isinstance(entry, URLResolver):
            yield from patterns(entry.url_patterns, prefix + _route(entry.pattern))
        else:
            yield prefix + _route(entry.pattern)


def _route(pattern: object) -> str:
    if isinstance(pattern, RegexPattern):
        # Admin's few regex patterns: fill their named groups with a value each accepts.
        text = str(pattern).lstrip("^").rstrip("$")
        return re.sub(
            r"\(\?P<(\w+)>[^)]*\)", lambda m: REGEX_PLACEHOLDERS.get(m.group(1), "1"), text
        )
    return str(pattern)


def targets(world: World) -> Iterator[Target]:
    for pattern in sorted(set(patterns(get_resolver().url_patterns))):
        names = [m.group("name") for m in PARAMETER.finditer(pattern)]
        if not names:
            yield Target(pattern, "/" + pattern, None, (), "/" + pattern)
            continue
        for owner in ("a", "b", ""):
            filled: dict[str, str] = {}
            for name in names:
                choices = _values(world, pattern, name, owner)
                if choices is None:
                    break
                filled[name] = choices[0]
            else:
                if owner and not any(_owned(world, pattern, n, owner) for n in names):
                    continue  # nothing of this owner in the path: the "" pass covers it
                path = PARAMETER.sub(lambda m: filled[m.group("name")], pattern)  # noqa: B023
                ghost = PARAMETER.sub(
                    lambda m: _ghost(world, pattern, m.group("name"), owner, filled),  # noqa: B023
                    pattern,
                )
                yield Target(
                    pattern, "/" + path, owner or None, tuple(filled.values()), "/" + ghost
                )


def _ghost(world: World, pattern: str, name: str, owner: str, filled: dict[str, str]) -> str:
    if not owner or not _owned(world, pattern, name, owner):
        return filled[name]
    return "999999" if filled[name].isdigit() else "no-such-thing"


def _owned(world: World, pattern: str, name: str, owner: str) -> bool:
    return bool(_admin_ids(world, pattern, name, owner)) or bool(
        world.values.get(name, {}).get(owner)
    )


def _admin_ids(world: World, pattern: str, name: str, owner: str) -> list[str]:
    match = re.match(r"admin/(\w+)/(\w+)/", pattern)
    if name != "object_id" or match is None or not owner:
        return []
    from django.apps import apps

    try:
        model = apps.get_model(match.group(1), match.group(2))
    except LookupError:
        return []
    return _model_ids(model, world.tenants[owner])


def _values(world: World, pattern: str, name: str, owner: str) -> list[str] | None:
    """The values to put in one parameter; None when this owner has nothing there."""
    ids = _admin_ids(world, pattern, name, owner)
    if ids:
        return ids
    by_owner = world.values.get(name)
    if by_owner is None:
        return ["1"]  # a parameter nobody owns (a new app's): any value walks the view
    if owner in by_owner:
        return by_owner[owner]
    if "" in by_owner:
        return by_owner[""]
    return by_owner.get("a") if not owner else None


# --- the assertions -------------------------------------------------------------------------------


def _body(response: HttpResponseBase) -> str:
    if isinstance(response, StreamingHttpResponse):
        content = b"".join(cast(Iterator[bytes], response.streaming_content))
    else:
        content = cast(HttpResponse, response).content
    return content.decode(errors="replace")


def _leaks(body: str, secrets: list[str], echoes: tuple[str, ...], status: int) -> list[str]:
    allowed = set(echoes) if status == 404 else set()
    return [s for s in secrets if s in body and s not in allowed]


# "…_token": the same person through an API token with every scope (no session).
ACTORS = [
    "release_manager",
    "tenant_a_admin",
    "tenant_b_admin",
    "tenant_a_admin_token",
    "viewer",
    "anonymous",
]


@pytest.mark.parametrize("actor", ACTORS)
def test_every_url_keeps_each_tenant_to_itself(
    world: World, actor: str, request: pytest.FixtureRequest
) -> None:
    client = Client()
    own = None
    if actor.endswith("_token"):
        user: User = request.getfixturevalue(actor.removesuffix("_token"))
        scopes = [Scope(scope) for scope in sorted(ROLE_SCOPES[user.role])]
        _, secret = api_token_create(actor=None, user=user, name="walk", scopes=scopes)
        client = Client(headers={"Authorization": f"Bearer {secret}"})
        own = "a"
    elif actor != "anonymous":
        user = request.getfixturevalue(actor)
        client.force_login(user)
        own = {"tenant_a_admin": "a", "tenant_b_admin": "b"}.get(actor)
    other = {"a": "b", "b": "a"}.get(own or "")
    walked, problems = 0, []
    for target in targets(world):
        for query in ("", "?q=tenant&search=tenant&page=1"):
            response = client.get(target.path + query)
            walked += 1
            body = _body(response)
            # 503 is a designed answer (readyz with a dependency down); 500 never is.
            if response.status_code == 500:
                problems.append(f"GET {target.path}{query}: {response.status_code}")
            if other is not None:
                leaked = _leaks(body, world.secrets[other], target.echoes, response.status_code)
                if leaked:
                    problems.append(f"GET {target.path}{query} shows {leaked}")
            if actor == "anonymous":
                for label in ("a", "b"):
                    leaked = _leaks(body, world.secrets[label], target.echoes, response.status_code)
                    if leaked:
                        problems.append(f"anonymous GET {target.path}{query} shows {leaked}")
        if other is not None and target.owner == other:
            # Indistinguishable from an object that does not exist, and never served: a 404,
            # or whatever a made-up id gets too (405 for a method the view lacks, 403 for a
            # write the role may never make, the admin's redirect to its login).
            got = client.get(target.path).status_code
            posted = client.post(target.path, {})
            ghost = (
                client.get(target.ghost).status_code,
                client.post(target.ghost, {}).status_code,
            )
            if (got, posted.status_code) != ghost or {got, posted.status_code} - {
                302,
                403,
                404,
                405,
            }:
                problems.append(
                    f"{target.path} (the other tenant's) answered GET {got}, POST "
                    f"{posted.status_code}; {target.ghost} (nobody's) answered {ghost}"
                )
            # Pages send a token-only caller to the login page: API tokens are for /api/.
            login_only = target.pattern.startswith("admin/") or (
                actor.endswith("_token") and not target.pattern.startswith("api/")
            )
            if got not in (404, 405) and not login_only:
                problems.append(f"GET {target.path} (the other tenant's) answered {got}, not 404")
            leaked = _leaks(_body(posted), world.secrets[other], target.echoes, posted.status_code)
            if leaked:
                problems.append(f"POST {target.path} shows {leaked}")
    assert walked > 100, "the urlconf walk found too few URLs"
    assert not problems, "\n".join(problems)


def test_the_walk_reaches_every_pattern_and_each_tenants_objects(world: World) -> None:
    walked = list(targets(world))
    assert {t.pattern for t in walked} == set(patterns(get_resolver().url_patterns))
    owned = {(t.pattern, t.owner) for t in walked if t.owner}
    assert ("tenants/<slug:slug>/", "b") in owned
    assert ("tenants/<slug:slug>/keys/<int:key_id>/revoke/", "a") in owned
    assert ("admin/tenants/apikey/<path:object_id>/change/", "b") in owned
