"""A rollout's page in a real browser: it polls while the rollout runs, and a rollback by hand
ends the polling."""

from __future__ import annotations

import re

import redis
from playwright.sync_api import Page, Request, expect
from pytest_django.live_server_helper import LiveServer

from rollouts.choices import RolloutState
from rollouts.models import Rollout
from rollouts.plans import Plan, Step
from rollouts.services.rollouts import rollout_create, rollout_start
from tenants.choices import Role
from tests.browser import page  # noqa: F401 -- fixture
from tests.factories import (
    PASSWORD,
    DeploymentFactory,
    FleetFactory,
    ReplicaFactory,
    RouteFactory,
    UserFactory,
)
from tests.registry.factories import register


def running_rollout() -> Rollout:
    fleet = FleetFactory.create(name="fleet")
    ReplicaFactory.create(fleet=fleet, name="r0", base_url="http://127.0.0.1:9101")
    baseline = DeploymentFactory.create(
        artifact=register(version="v1"), fleet=fleet, served_model_name="chat-v1"
    )
    route = RouteFactory.create(name="chat", baseline=baseline)
    # Ready already, so the start's preflight probes no replica.
    candidate = DeploymentFactory.create(
        artifact=register(version="v2"), fleet=fleet, served_model_name="chat-v2", state="ready"
    )
    plan = Plan(steps=(Step(weight=5, min_bake_s=60), Step(weight=50), Step(weight=100)))
    rollout = rollout_create(actor=None, route=route, candidate=candidate, plan=plan)
    return rollout_start(actor=None, rollout_id=rollout.pk)


def test_a_release_manager_rolls_back_a_running_rollout_and_the_page_stops_polling(
    page: Page,  # noqa: F811
    live_server: LiveServer,
    transactional_db: None,
    redis_client: redis.Redis,
) -> None:
    UserFactory.create(username="rm", role=Role.RELEASE_MANAGER)
    rollout = running_rollout()
    url = f"/rollouts/{rollout.pk}/"
    polls: list[Request] = []
    page.on("request", lambda r: polls.append(r) if r.headers.get("hx-request") else None)

    page.goto(f"{live_server.url}/login/?next={url}")
    page.get_by_label("Username").fill("rm")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", level=1)).to_have_text(
        f"Rollout {rollout.pk}: support-chat:v2 on chat"
    )

    timeline = page.get_by_test_id("timeline").locator("li")
    expect(timeline).to_have_count(3)
    expect(timeline.nth(0)).to_have_attribute("aria-current", "step")
    expect(timeline.nth(0)).to_contain_text("5%")
    expect(page.get_by_test_id("rollout-state")).to_have_text("Running")
    live = page.locator("#rollout-live")
    expect(live).to_have_attribute("hx-trigger", "every 2s")
    # The page polls while the rollout runs.
    with page.expect_request(lambda r: "?seen=running" in r.url, timeout=6000):
        pass

    page.get_by_label("Reason").fill("TTFT doubled on the canary")
    page.get_by_role("button", name="Roll back").click()
    expect(page.get_by_test_id("rollout-state")).to_have_text("Rolled back")
    expect(page.get_by_role("status")).to_have_text("Roll back: done.")
    expect(page.get_by_role("button", name="Roll back")).to_have_count(0)
    expect(timeline.nth(0)).to_have_class(re.compile(r"step-stopped"))
    expect(page.locator("table.events tbody tr").first).to_contain_text(
        "rollback: TTFT doubled on the canary"
    )
    expect(live).not_to_have_attribute("hx-trigger", re.compile(".*"))
    assert page.url == f"{live_server.url}{url}"  # swapped in place, not navigated

    seen = len(polls)
    page.wait_for_timeout(2500)  # longer than one polling interval
    assert [r.url for r in polls[seen:]] == []
    assert Rollout.objects.get(pk=rollout.pk).state == RolloutState.ROLLED_BACK
