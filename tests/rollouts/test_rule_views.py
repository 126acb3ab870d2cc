"""The routes pages: rules read by every role (as far as they may see), managed by release
managers."""

from __future__ import annotations

import re

import pytest
import redis
from django.test import Client

from core.models import AuditEvent
from rollouts.models import Deployment, Route, RouteRule
from rollouts.services.rollouts import rollout_create
from rollouts.services.rules import route_rule_create
from tenants.models import Tenant, User
from tests.factories import DeploymentFactory, RouteFactory
from tests.registry.factories import register


@pytest.fixture
def cheap(route: Route) -> Deployment:
    return DeploymentFactory.create(
        artifact=register(family="chat-small", version="v1"),
        fleet=route.baseline.fleet,
        served_model_name="chat-small",
        state="ready",
    )


def rule_rows(page: str) -> list[str]:
    return re.findall(r'<tr data-rule="([^"]+)"', page)


def test_a_release_manager_adds_a_rule_from_the_route_page(
    client: Client,
    route: Route,
    cheap: Deployment,
    tenant_a: Tenant,
    release_manager: User,
    redis_client: redis.Redis,
) -> None:
    client.force_login(release_manager)
    page = client.get("/rollouts/routes/chat/").content.decode()
    assert "No rule: every request of this route takes part in the split." in page
    assert 'name="csrfmiddlewaretoken"' in page
    response = client.post(
        "/rollouts/routes/chat/rules/",
        {
            "name": "batch",
            "target": cheap.pk,
            "tiers": ["batch"],
            "tenants": ["tenant-a"],
            "max_prompt_tokens": "4000",
        },
    )
    assert response.status_code == 302
    assert response["Location"] == "/rollouts/routes/chat/"
    rule = RouteRule.objects.get()
    assert (rule.tiers, list(rule.tenants.all()), rule.max_prompt_tokens) == (
        ["batch"],
        [tenant_a],
        4000,
    )
    page = client.get("/rollouts/routes/chat/").content.decode()
    assert rule_rows(page) == ["batch"]
    assert "Rule batch added; the gateway follows." in page
    assert AuditEvent.objects.filter(action="route_rule.created", actor=release_manager).exists()


def test_a_refused_rule_is_shown_with_the_reason_and_not_saved(
    client: Client, route: Route, cheap: Deployment, release_manager: User
) -> None:
    client.force_login(release_manager)
    response = client.post("/rollouts/routes/chat/rules/", {"name": "all", "target": cheap.pk})
    assert response.status_code == 400
    assert "a rule must match on something" in response.content.decode()
    assert not RouteRule.objects.exists()
    response = client.post(
        "/rollouts/routes/chat/rules/", {"name": "x", "tiers": ["batch"], "target": ""}
    )
    assert "Pick the deployment the matching requests go to." in response.content.decode()


def test_removing_a_rule_needs_a_reason_and_is_audited(
    client: Client,
    route: Route,
    cheap: Deployment,
    release_manager: User,
    redis_client: redis.Redis,
) -> None:
    route_rule_create(
        actor=release_manager, route=route, name="batch", target=cheap, tiers=["batch"]
    )
    client.force_login(release_manager)
    url = "/rollouts/routes/chat/rules/batch/delete/"
    refused = client.post(url, {"reason": ""})
    assert refused.status_code == 400
    assert "Say why: the reason is kept in the audit log." in refused.content.decode()
    assert client.post(url, {"reason": "batch moved to its own route"}).status_code == 302
    assert not RouteRule.objects.exists()
    assert AuditEvent.objects.get(action="route_rule.deleted").reason == (
        "batch moved to its own route"
    )


@pytest.mark.parametrize("actor", ["viewer", "tenant_a_admin"])
def test_other_roles_read_rules_but_get_no_forms_and_cannot_change_them(
    client: Client,
    request: pytest.FixtureRequest,
    route: Route,
    cheap: Deployment,
    release_manager: User,
    actor: str,
) -> None:
    route_rule_create(
        actor=release_manager, route=route, name="batch", target=cheap, tiers=["batch"]
    )
    client.force_login(request.getfixturevalue(actor))
    page = client.get("/rollouts/routes/chat/").content.decode()
    assert rule_rows(page) == ["batch"]
    assert "Add a rule" not in page
    assert "Remove" not in page
    added = client.post("/rollouts/routes/chat/rules/", {"name": "x", "target": cheap.pk})
    assert added.status_code == 403
    removed = client.post("/rollouts/routes/chat/rules/batch/delete/", {"reason": "mine"})
    assert removed.status_code == 403
    assert client.get("/rollouts/routes/chat/rules/batch/").status_code == 403
    edited = client.post("/rollouts/routes/chat/rules/batch/", {"target": cheap.pk})
    assert edited.status_code == 403
    assert RouteRule.objects.count() == 1
    assert RouteRule.objects.get().tiers == ["batch"]


def test_tenant_admins_see_only_their_routes_and_rules(
    client: Client,
    route: Route,
    cheap: Deployment,
    tenant_a: Tenant,
    tenant_b: Tenant,
    release_manager: User,
    tenant_a_admin: User,
) -> None:
    private = RouteFactory.create(name="b-only", baseline=route.baseline)
    private.tenants.set([tenant_b])
    route_rule_create(
        actor=release_manager, route=route, name="pin-a", target=cheap, tenants=[tenant_a]
    )
    route_rule_create(
        actor=release_manager, route=route, name="pin-b", target=cheap, tenants=[tenant_b]
    )
    client.force_login(tenant_a_admin)
    routes = client.get("/rollouts/routes/").content.decode()
    assert re.findall(r'<tr data-route="([^"]+)"', routes) == ["chat"]
    assert client.get("/rollouts/routes/b-only/").status_code == 404
    page = client.get("/rollouts/routes/chat/").content.decode()
    assert rule_rows(page) == ["pin-a"]
    assert "tenant-b" not in page


def test_a_rule_whose_deployment_left_service_is_marked_not_applied(
    client: Client, route: Route, cheap: Deployment, release_manager: User
) -> None:
    route_rule_create(
        actor=release_manager, route=route, name="batch", target=cheap, tiers=["batch"]
    )
    Deployment.objects.filter(pk=cheap.pk).update(state="draining")
    client.force_login(release_manager)
    page = client.get("/rollouts/routes/chat/").content.decode()
    assert '<tr data-rule="batch" class="inactive">' in page
    assert "(draining: not applied)" in page


def test_a_release_manager_edits_a_rule_but_not_its_name(
    client: Client,
    route: Route,
    cheap: Deployment,
    tenant_a: Tenant,
    release_manager: User,
    redis_client: redis.Redis,
) -> None:
    route_rule_create(
        actor=release_manager, route=route, name="batch", target=cheap, tiers=["batch"]
    )
    client.force_login(release_manager)
    url = "/rollouts/routes/chat/rules/batch/"
    page = client.get(url).content.decode()
    assert '<input type="checkbox" name="tiers" value="batch" id="id_tiers_2" checked>' in page
    assert 'name="name"' not in page
    refused = client.post(
        url, {"target": cheap.pk, "min_prompt_tokens": "9", "max_prompt_tokens": "8"}
    )
    assert refused.status_code == 400
    assert "min_prompt_tokens (9) is above max_prompt_tokens (8)" in refused.content.decode()
    saved = client.post(url, {"target": cheap.pk, "tenants": ["tenant-a"], "name": "renamed"})
    assert saved.status_code == 302
    rule = RouteRule.objects.get()
    assert (rule.name, rule.tiers, [t.slug for t in rule.tenants.all()]) == (
        "batch",
        [],
        ["tenant-a"],
    )
    assert AuditEvent.objects.filter(action="route_rule.updated").count() == 1


def test_the_rollout_page_links_to_its_route(
    client: Client, route: Route, candidate: Deployment, viewer: User
) -> None:
    rollout = rollout_create(actor=None, route=route, candidate=candidate)
    client.force_login(viewer)
    page = client.get(f"/rollouts/{rollout.pk}/").content.decode()
    assert '<dt>Route</dt><dd><a href="/rollouts/routes/chat/">chat</a>' in page
