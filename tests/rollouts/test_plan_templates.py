"""Saved plan templates: services, the API, and CI starting a rollout from one by name."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from rest_framework.test import APIClient

from core.errors import Conflict, DomainError, NotFound, PermissionDenied
from core.models import AuditEvent
from rollouts.models import Deployment, PlanTemplate, Rollout, Route
from rollouts.plans import Plan, SloGates, Step
from rollouts.services.templates import (
    plan_template_create,
    plan_template_delete,
    plan_template_update,
)
from tenants.models import User

QUICK = Plan(
    steps=(Step(weight=10, min_bake_s=30, min_samples=40), Step(weight=100, min_bake_s=60)),
    progress_deadline_s=600,
)
STRICT = SloGates(ttft_p95_ms=250, tpot_p95_ms=None, max_error_rate=0.01)


@pytest.fixture
def quick(release_manager: User) -> PlanTemplate:
    return plan_template_create(
        actor=release_manager, name="quick", plan=QUICK, gates=STRICT, description="two steps"
    )


# --- services -------------------------------------------------------------------------------------


def test_a_template_keeps_its_plan_and_gates_and_is_audited(
    quick: PlanTemplate, release_manager: User
) -> None:
    stored = PlanTemplate.objects.get(name="quick")
    assert (stored.parsed_plan, stored.parsed_gates) == (QUICK, STRICT)
    event = AuditEvent.objects.get(action="plan_template.created")
    assert (event.actor, event.target_id) == (release_manager, str(quick.pk))
    plan_template_update(
        actor=release_manager, name="quick", plan=QUICK, gates=SloGates(), description=""
    )
    updated = AuditEvent.objects.get(action="plan_template.updated")
    assert updated.data["before"]["gates"]["ttft_p95_ms"] == 250
    assert updated.data["after"]["gates"]["ttft_p95_ms"] == 500
    plan_template_delete(actor=release_manager, name="quick")
    assert not PlanTemplate.objects.exists()
    assert AuditEvent.objects.filter(action="plan_template.deleted").count() == 1


def test_names_are_unique_and_checked(quick: PlanTemplate, release_manager: User) -> None:
    with pytest.raises(Conflict, match="a plan template named 'quick' already exists"):
        plan_template_create(actor=release_manager, name="quick", plan=QUICK, gates=STRICT)
    with pytest.raises(DomainError, match="name:"):
        plan_template_create(actor=release_manager, name="not a slug", plan=QUICK, gates=STRICT)
    with pytest.raises(NotFound, match="no plan template named 'nope'"):
        plan_template_delete(actor=release_manager, name="nope")


@pytest.mark.parametrize("actor", ["viewer", "tenant_a_admin"])
def test_only_release_managers_save_templates(
    request: pytest.FixtureRequest, quick: PlanTemplate, actor: str
) -> None:
    user = request.getfixturevalue(actor)
    with pytest.raises(PermissionDenied):
        plan_template_create(actor=user, name="other", plan=QUICK, gates=STRICT)
    with pytest.raises(PermissionDenied):
        plan_template_update(actor=user, name="quick", plan=QUICK, gates=SloGates())
    with pytest.raises(PermissionDenied):
        plan_template_delete(actor=user, name="quick")
    assert PlanTemplate.objects.get().parsed_gates == STRICT


# --- API ------------------------------------------------------------------------------------------


def test_ci_saves_reads_and_replaces_a_template(api_client: APIClient, ci_token: str) -> None:
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {ci_token}")
    created = api_client.post(
        "/api/v1/plan-templates",
        {
            "name": "nightly",
            "steps": [{"weight": 20, "min_bake_s": 10}, {"weight": 100}],
            "gates": {"ttft_p95_ms": 900},
        },
        format="json",
    )
    assert created.status_code == 201, created.json()
    assert created.json()["plan"]["steps"][0] == {
        "weight": 20,
        "min_bake_s": 10,
        "min_samples": 200,
    }
    assert created.json()["gates"]["ttft_p95_ms"] == 900
    assert [t["name"] for t in api_client.get("/api/v1/plan-templates").json()] == ["nightly"]
    replaced = api_client.put(
        "/api/v1/plan-templates/nightly",
        {"steps": [{"weight": 100}], "description": "all at once"},
        format="json",
    )
    assert replaced.status_code == 200, replaced.json()
    assert replaced.json()["description"] == "all at once"
    assert len(api_client.get("/api/v1/plan-templates/nightly").json()["plan"]["steps"]) == 1
    assert api_client.delete("/api/v1/plan-templates/nightly").status_code == 204
    assert api_client.get("/api/v1/plan-templates/nightly").status_code == 404


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"name": "t", "steps": [{"weight": 50}]}, "the last step must send 100%"),
        ({"name": "t", "steps": []}, "at least 1 item"),
        ({"name": "t"}, "steps"),
        ({"name": "t t", "steps": [{"weight": 100}]}, "slug"),
        (
            {"name": "t", "steps": [{"weight": 100}], "gates": {"max_error_rate": 2}},
            "less than or equal to 1",
        ),
    ],
)
def test_bad_templates_are_clear_400s(
    api_client: APIClient, release_manager: User, payload: dict[str, Any], message: str
) -> None:
    api_client.force_login(release_manager)
    response = api_client.post("/api/v1/plan-templates", payload, format="json")
    assert response.status_code == 400, response.json()
    assert message in str(response.json()), response.json()


def test_every_role_reads_templates_and_only_release_managers_write(
    api_client: APIClient, quick: PlanTemplate, tenant_a_admin: User, viewer: User
) -> None:
    for user in (tenant_a_admin, viewer):
        api_client.force_login(user)
        assert api_client.get("/api/v1/plan-templates/quick").status_code == 200
        assert api_client.delete("/api/v1/plan-templates/quick").status_code == 403
    assert PlanTemplate.objects.filter(name="quick").exists()


def test_ci_starts_a_rollout_from_a_template_by_name(
    api_client: APIClient,
    ci_token: str,
    quick: PlanTemplate,
    route: Route,
    candidate: Deployment,
    redis_client: redis.Redis,
) -> None:
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {ci_token}")
    created = api_client.post(
        "/api/v1/rollouts",
        {"route": "chat", "candidate_deployment": candidate.pk, "plan_template": "quick"},
        format="json",
    )
    assert created.status_code == 201, created.json()
    rollout = Rollout.objects.get(pk=created.json()["id"])
    assert (rollout.parsed_plan, rollout.parsed_gates) == (QUICK, STRICT)
    assert created.json()["canary_weight"] == 10.0


def test_steps_or_gates_sent_with_a_template_replace_its_own(
    api_client: APIClient,
    release_manager: User,
    quick: PlanTemplate,
    route: Route,
    candidate: Deployment,
) -> None:
    api_client.force_login(release_manager)
    created = api_client.post(
        "/api/v1/rollouts",
        {
            "route": "chat",
            "candidate_deployment": candidate.pk,
            "plan_template": "quick",
            "steps": [{"weight": 50}, {"weight": 100}],
            "start": False,
        },
        format="json",
    )
    assert created.status_code == 201, created.json()
    rollout = Rollout.objects.get(pk=created.json()["id"])
    assert [s.weight for s in rollout.parsed_plan.steps] == [50, 100]
    assert rollout.parsed_plan.progress_deadline_s == 600  # the template's
    assert rollout.parsed_gates == STRICT


def test_an_unknown_template_is_a_clear_400(
    api_client: APIClient, release_manager: User, route: Route, candidate: Deployment
) -> None:
    api_client.force_login(release_manager)
    response = api_client.post(
        "/api/v1/rollouts",
        {"route": "chat", "candidate_deployment": candidate.pk, "plan_template": "nope"},
        format="json",
    )
    assert (response.status_code, response.json()) == (
        400,
        {"detail": "no plan template named 'nope'"},
    )
    assert not Rollout.objects.exists()
