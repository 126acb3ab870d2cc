"""Who reads which rollouts: a tenant admin sees only the rollouts of routes their tenant may use;
a route restricted to other tenants is not there for them (404, never 403)."""

from __future__ import annotations

import re

import pytest
import redis
from django.test import Client
from rest_framework.test import APIClient

from rollouts.models import Deployment, Rollout, Route
from rollouts.selectors import visible_deployments, visible_rollouts, visible_routes
from rollouts.services.rollouts import rollout_create
from tenants.models import Tenant, User
from tests.factories import DeploymentFactory, RouteFactory
from tests.registry.factories import register

HTMX = {"HX-Request": "true"}


@pytest.fixture
def open_rollout(route: Route, candidate: Deployment) -> Rollout:
    """A rollout on `chat`, a route open to every tenant."""
    return rollout_create(actor=None, route=route, candidate=candidate)


def _restricted_rollout(name: str, family: str, tenant: Tenant) -> Rollout:
    fleet = Route.objects.get(name="chat").baseline.fleet
    baseline = DeploymentFactory.create(
        artifact=register(family=family, version="v1"),
        fleet=fleet,
        served_model_name=f"{name}-v1",
        state="ready",
    )
    route = RouteFactory.create(name=name, baseline=baseline)
    route.tenants.set([tenant])
    candidate = DeploymentFactory.create(
        artifact=register(family=family, version="v2"),
        fleet=fleet,
        served_model_name=f"{name}-v2",
        state="ready",
    )
    return rollout_create(actor=None, route=route, candidate=candidate)


@pytest.fixture
def b_only_rollout(open_rollout: Rollout, tenant_b: Tenant) -> Rollout:
    """A rollout on `b-only`, a route restricted to tenant B."""
    return _restricted_rollout("b-only", "b-model", tenant_b)


def listed(page: str) -> set[int]:
    return {int(pk) for pk in re.findall(r'<tr data-rollout="(\d+)">', page)}


# --- the selector ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("actor", "sees_b_only"),
    [
        ("release_manager", True),
        ("viewer", True),
        ("tenant_b_admin", True),
        ("tenant_a_admin", False),
    ],
)
def test_visible_routes_rollouts_and_deployments_follow_the_route_tenants(
    request: pytest.FixtureRequest,
    open_rollout: Rollout,
    b_only_rollout: Rollout,
    actor: str,
    sees_b_only: bool,
) -> None:
    user = request.getfixturevalue(actor)
    expected_routes = {"chat", "b-only"} if sees_b_only else {"chat"}
    assert {r.name for r in visible_routes(user)} == expected_routes
    expected_rollouts = {open_rollout.pk, b_only_rollout.pk} if sees_b_only else {open_rollout.pk}
    assert {r.pk for r in visible_rollouts(user)} == expected_rollouts
    deployments = set(visible_deployments(user).values_list("served_model_name", flat=True))
    assert {"chat-v1", "chat-v2"} <= deployments
    assert ({"b-only-v1", "b-only-v2"} <= deployments) is sees_b_only
    assert not ({"b-only-v1", "b-only-v2"} & deployments) or sees_b_only


def test_a_route_shared_by_two_tenants_is_listed_once_for_each(
    route: Route, tenant_a: Tenant, tenant_b: Tenant, tenant_a_admin: User
) -> None:
    route.tenants.set([tenant_a, tenant_b])
    assert list(visible_routes(tenant_a_admin).values_list("name", flat=True)) == ["chat"]


def test_an_inactive_user_sees_nothing(route: Route, viewer: User) -> None:
    viewer.is_active = False
    viewer.save()
    assert not visible_routes(viewer).exists()


# --- pages ----------------------------------------------------------------------------------------


def test_the_list_hides_rollouts_of_routes_restricted_to_other_tenants(
    client: Client,
    open_rollout: Rollout,
    b_only_rollout: Rollout,
    tenant_a_admin: User,
    tenant_b_admin: User,
) -> None:
    client.force_login(tenant_a_admin)
    page = client.get("/rollouts/").content.decode()
    assert listed(page) == {open_rollout.pk}
    assert "b-only" not in page
    rows = client.get("/rollouts/", {"state": "live"}, headers=HTMX).content.decode()
    assert listed(rows) == {open_rollout.pk}
    client.force_login(tenant_b_admin)
    assert listed(client.get("/rollouts/").content.decode()) == {
        open_rollout.pk,
        b_only_rollout.pk,
    }


def test_a_hidden_rollout_page_and_its_live_fragment_are_404(
    client: Client, b_only_rollout: Rollout, tenant_a_admin: User, tenant_b_admin: User
) -> None:
    client.force_login(tenant_a_admin)
    assert client.get(f"/rollouts/{b_only_rollout.pk}/").status_code == 404
    assert client.get(f"/rollouts/{b_only_rollout.pk}/", headers=HTMX).status_code == 404
    client.force_login(tenant_b_admin)
    assert client.get(f"/rollouts/{b_only_rollout.pk}/").status_code == 200
    assert client.get(f"/rollouts/{b_only_rollout.pk}/", headers=HTMX).status_code == 200


@pytest.mark.parametrize("actor", ["tenant_a_admin", "tenant_b_admin"])
def test_tenant_admins_can_neither_create_nor_steer_a_rollout_in_the_ui(
    client: Client,
    request: pytest.FixtureRequest,
    route: Route,
    candidate: Deployment,
    open_rollout: Rollout,
    actor: str,
) -> None:
    client.force_login(request.getfixturevalue(actor))
    assert client.get("/rollouts/new/").status_code == 403
    created = client.post("/rollouts/new/", {"route": route.pk, "candidate": candidate.pk})
    assert created.status_code == 403
    steered = client.post(
        f"/rollouts/{open_rollout.pk}/actions/", {"action": "abort", "reason": "mine now"}
    )
    assert steered.status_code == 403
    assert Rollout.objects.get(pk=open_rollout.pk).state == "pending"
    page = client.get(f"/rollouts/{open_rollout.pk}/").content.decode()
    assert 'name="action"' not in page
    assert "New rollout" not in client.get("/rollouts/").content.decode()


# --- API ------------------------------------------------------------------------------------------


def test_the_api_scopes_lists_and_reads_to_the_tenant_admins_routes(
    api_client: APIClient,
    open_rollout: Rollout,
    b_only_rollout: Rollout,
    tenant_a_admin: User,
    tenant_b_admin: User,
) -> None:
    api_client.force_authenticate(tenant_a_admin)
    ids = {r["id"] for r in api_client.get("/api/v1/rollouts").json()["results"]}
    assert ids == {open_rollout.pk}
    assert api_client.get("/api/v1/rollouts", {"route": "b-only"}).json()["results"] == []
    hidden = api_client.get(f"/api/v1/rollouts/{b_only_rollout.pk}")
    assert hidden.status_code == 404
    assert "does not exist" in hidden.json()["detail"]
    assert api_client.get(f"/api/v1/rollouts/{open_rollout.pk}").status_code == 200
    api_client.force_authenticate(tenant_b_admin)
    assert api_client.get(f"/api/v1/rollouts/{b_only_rollout.pk}").status_code == 200


def test_tenant_admins_can_neither_create_nor_steer_through_the_api(
    api_client: APIClient,
    route: Route,
    candidate: Deployment,
    open_rollout: Rollout,
    tenant_a_admin: User,
    redis_client: redis.Redis,
) -> None:
    api_client.force_authenticate(tenant_a_admin)
    body = {"route": "chat", "candidate_deployment": candidate.pk}
    assert api_client.post("/api/v1/rollouts", body, format="json").status_code == 403
    steer = {"action": "abort", "reason": "mine now"}
    url = f"/api/v1/rollouts/{open_rollout.pk}/actions"
    assert api_client.post(url, steer, format="json").status_code == 403
    assert Rollout.objects.get(pk=open_rollout.pk).state == "pending"
