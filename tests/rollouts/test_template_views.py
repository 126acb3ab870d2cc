"""Plan template pages, and picking a template in the rollout create form."""

from __future__ import annotations

import re

import pytest
import redis
from django.test import Client

from core.models import AuditEvent
from rollouts.models import Deployment, PlanTemplate, Rollout, Route
from rollouts.plans import Plan, SloGates, Step
from rollouts.services.templates import plan_template_create
from tenants.models import User

HTMX = {"HX-Request": "true"}
THREE = Plan(
    steps=(
        Step(weight=1, min_bake_s=15, min_samples=25),
        Step(weight=10, min_bake_s=30, min_samples=50),
        Step(weight=100, min_bake_s=60, min_samples=75),
    ),
    progress_deadline_s=900,
)
TIGHT = SloGates(ttft_p95_ms=200, tpot_p95_ms=None, max_error_rate=0.005)


@pytest.fixture
def careful(release_manager: User) -> PlanTemplate:
    return plan_template_create(actor=release_manager, name="careful", plan=THREE, gates=TIGHT)


def weights(page: str) -> list[str]:
    return re.findall(r'name="step_\d+_weight" value="([^"]*)"', page)


# --- the create form ------------------------------------------------------------------------------


def test_choosing_a_template_swaps_in_its_steps_and_gates(
    client: Client, careful: PlanTemplate, release_manager: User
) -> None:
    client.force_login(release_manager)
    page = client.get("/rollouts/new/").content.decode()
    assert weights(page) == ["5", "25", "50", "100"]
    assert '<option value="careful">careful (1% → 10% → 100%)</option>' in page
    select = re.search(r'<select name="plan_template"[^>]*>', page)
    assert select is not None
    assert 'hx-get="/rollouts/new/"' in select.group(0)
    assert 'hx-target="#plan-steps"' in select.group(0)
    fragment = client.get(
        "/rollouts/new/", {"plan_template": "careful"}, headers=HTMX | {"HX-Target": "plan-steps"}
    ).content.decode()
    assert fragment.lstrip().startswith('<div id="plan-steps">')
    assert weights(fragment) == ["1", "10", "100"]
    assert re.findall(r'name="step_\d+_bake" value="([^"]*)"', fragment) == ["15", "30", "60"]
    assert "TTFT p95 ≤ 200 ms, TPOT p95 unlimited, errors ≤ 0.5%" in fragment
    # The candidate select still swaps the gate status, not the plan.
    gates = client.get("/rollouts/new/", {"candidate": ""}, headers=HTMX).content.decode()
    assert gates.lstrip().startswith('<div id="candidate-gates">')


def test_a_rollout_created_from_a_template_keeps_its_gates_and_the_edited_steps(
    client: Client,
    careful: PlanTemplate,
    route: Route,
    candidate: Deployment,
    release_manager: User,
    redis_client: redis.Redis,
) -> None:
    client.force_login(release_manager)
    response = client.post(
        "/rollouts/new/",
        {
            "route": route.pk,
            "candidate": candidate.pk,
            "plan_template": "careful",
            # The 10% step is edited to 20% with a longer bake; the rest as the template says.
            **{f"step_{i}_weight": w for i, w in enumerate(["1", "20", "100"])},
            **{f"step_{i}_bake": b for i, b in enumerate(["15", "45", "60"])},
            **{f"step_{i}_samples": n for i, n in enumerate(["25", "50", "75"])},
            "create": "1",
        },
    )
    assert response.status_code == 302, response.content.decode()
    rollout = Rollout.objects.get()
    assert rollout.parsed_plan == Plan(
        steps=(THREE.steps[0], Step(weight=20, min_bake_s=45, min_samples=50), THREE.steps[2]),
        progress_deadline_s=900,
    )
    assert rollout.parsed_gates == TIGHT


def test_without_a_template_the_default_gates_apply(
    client: Client,
    route: Route,
    candidate: Deployment,
    release_manager: User,
    redis_client: redis.Redis,
) -> None:
    client.force_login(release_manager)
    response = client.post(
        "/rollouts/new/", {"route": route.pk, "candidate": candidate.pk, "create": "1"}
    )
    assert response.status_code == 302
    assert Rollout.objects.get().parsed_gates == SloGates()


def test_a_template_deleted_meanwhile_is_a_form_error(
    client: Client, route: Route, candidate: Deployment, release_manager: User
) -> None:
    client.force_login(release_manager)
    response = client.post(
        "/rollouts/new/",
        {"route": route.pk, "candidate": candidate.pk, "plan_template": "gone", "create": "1"},
    )
    assert response.status_code == 400
    assert "No plan template has that name any more." in response.content.decode()
    assert not Rollout.objects.exists()


# --- the template pages ---------------------------------------------------------------------------


def test_a_release_manager_saves_a_template_from_the_list_page(
    client: Client, release_manager: User
) -> None:
    client.force_login(release_manager)
    page = client.get("/rollouts/templates/").content.decode()
    assert "No plan template yet: save one below." in page
    assert weights(page) == ["5", "25", "50", "100", "", ""]  # two spare rows
    response = client.post(
        "/rollouts/templates/",
        {
            "name": "five-steps",
            "description": "finer",
            **{f"step_{i}_weight": w for i, w in enumerate(["2", "5", "25", "50", "100", ""])},
            **{f"step_{i}_bake": "60" for i in range(6)},
            **{f"step_{i}_samples": "100" for i in range(6)},
            "progress_deadline_s": "1200",
            "ttft_p95_ms": "400",
            "tpot_p95_ms": "",
            "max_error_rate": "0.02",
            "max_timeout_rate": "0.05",
            "min_guardrail_samples": "20",
        },
    )
    assert response.status_code == 302, response.content.decode()
    assert response["Location"] == "/rollouts/templates/five-steps/"
    template = PlanTemplate.objects.get()
    assert [s.weight for s in template.parsed_plan.steps] == [2, 5, 25, 50, 100]
    assert (template.parsed_gates.ttft_p95_ms, template.parsed_gates.tpot_p95_ms) == (400, None)
    assert AuditEvent.objects.filter(action="plan_template.created").count() == 1
    listed = client.get("/rollouts/templates/").content.decode()
    assert re.findall(r'<tr data-template="([^"]+)"', listed) == ["five-steps"]


def test_an_invalid_template_is_shown_with_what_to_fix(
    client: Client, release_manager: User
) -> None:
    client.force_login(release_manager)
    response = client.post(
        "/rollouts/templates/",
        {
            "name": "bad name",
            "step_0_weight": "50",
            "progress_deadline_s": "1200",
            "max_error_rate": "0.02",
            "max_timeout_rate": "0.05",
            "min_guardrail_samples": "20",
        },
    )
    body = response.content.decode()
    assert response.status_code == 400
    assert "Use letters, digits, - and _ only" in body
    assert "The plan is not valid" in body
    assert "the last step must send 100%" in body
    assert not PlanTemplate.objects.exists()


def test_editing_a_template_changes_it_for_new_rollouts_only(
    client: Client, careful: PlanTemplate, release_manager: User
) -> None:
    client.force_login(release_manager)
    page = client.get("/rollouts/templates/careful/").content.decode()
    assert weights(page) == ["1", "10", "100", "", ""]
    assert 'name="ttft_p95_ms" value="200"' in page
    response = client.post(
        "/rollouts/templates/careful/",
        {
            **{f"step_{i}_weight": w for i, w in enumerate(["1", "10", "100"])},
            "progress_deadline_s": "900",
            "ttft_p95_ms": "300",
            "max_error_rate": "0.005",
            "max_timeout_rate": "0.05",
            "min_guardrail_samples": "20",
        },
    )
    assert response.status_code == 302, response.content.decode()
    assert PlanTemplate.objects.get().parsed_gates.ttft_p95_ms == 300
    assert AuditEvent.objects.filter(action="plan_template.updated").count() == 1


@pytest.mark.parametrize("actor", ["viewer", "tenant_a_admin"])
def test_other_roles_read_templates_but_cannot_change_them(
    client: Client, request: pytest.FixtureRequest, careful: PlanTemplate, actor: str
) -> None:
    client.force_login(request.getfixturevalue(actor))
    page = client.get("/rollouts/templates/careful/").content.decode()
    assert "1% (15 s, 25 samples) → 10% (30 s, 50 samples) → 100% (60 s, 75 samples)" in page
    assert "Save changes" not in page
    assert "Save a new template" not in client.get("/rollouts/templates/").content.decode()
    assert client.post("/rollouts/templates/careful/delete/").status_code == 403
    assert client.post("/rollouts/templates/", {"name": "x"}).status_code == 403
    assert PlanTemplate.objects.filter(name="careful").exists()


def test_deleting_a_template(client: Client, careful: PlanTemplate, release_manager: User) -> None:
    client.force_login(release_manager)
    response = client.post("/rollouts/templates/careful/delete/")
    assert response.status_code == 302
    assert not PlanTemplate.objects.exists()
    assert client.get("/rollouts/templates/careful/").status_code == 404
