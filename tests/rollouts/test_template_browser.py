"""Picking a plan template in the create form, in a real browser: its steps replace the default
plan's at once (htmx), stay editable, and the rollout starts with them and the template's gates."""

from __future__ import annotations

import redis
from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from rollouts.models import Deployment, Rollout, Route
from rollouts.plans import Plan, SloGates, Step
from rollouts.services.templates import plan_template_create
from tenants.choices import Role
from tests.browser import page  # noqa: F401 -- fixture
from tests.factories import PASSWORD, UserFactory


def test_choosing_a_template_fills_the_steps_which_stay_editable(
    page: Page,  # noqa: F811
    live_server: LiveServer,
    transactional_db: None,
    redis_client: redis.Redis,
    route: Route,
    candidate: Deployment,
) -> None:
    manager = UserFactory.create(username="rm", role=Role.RELEASE_MANAGER)
    gates = SloGates(ttft_p95_ms=250, max_error_rate=0.01)
    plan = Plan(steps=(Step(weight=2, min_bake_s=20), Step(weight=100, min_bake_s=40)))
    plan_template_create(actor=manager, name="quick", plan=plan, gates=gates)

    page.goto(f"{live_server.url}/login/?next=/rollouts/new/")
    page.get_by_label("Username").fill("rm")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    weights = page.locator('input[name$="_weight"]')
    expect(weights).to_have_count(4)

    page.get_by_label("Plan template").select_option("quick")
    expect(weights).to_have_count(2)
    expect(weights.nth(0)).to_have_value("2")
    expect(page.get_by_test_id("template-gates")).to_contain_text("TTFT p95 ≤ 250 ms")

    weights.nth(0).fill("10")  # the plan stays editable
    page.get_by_label("Route").select_option(label="chat (baseline support-chat:v1)")
    page.get_by_label("Candidate deployment").select_option(
        label="support-chat:v2 · fleet · chat-v2"
    )
    page.get_by_role("button", name="Create and start").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("support-chat:v2 on chat")
    rollout = Rollout.objects.get()
    assert [step.weight for step in rollout.parsed_plan.steps] == [10, 100]
    assert rollout.parsed_plan.steps[0].min_bake_s == 20
    assert rollout.parsed_gates == gates
