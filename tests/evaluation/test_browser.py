"""The A/B report in a real browser: a viewer follows the link from the rollout page, reads the
per-arm table with its badges and the charts, and the page keeps polling while the rollout runs."""

from __future__ import annotations

import redis
from playwright.sync_api import Page, Request, expect
from pytest_django.fixtures import Settings
from pytest_django.live_server_helper import LiveServer

from orchestration.engine import advance
from tenants.choices import Role
from tests.browser import page  # noqa: F401 -- fixture
from tests.evaluation.test_judging import baked, traffic
from tests.factories import PASSWORD, UserFactory
from tests.rollouts.test_browser import running_rollout


def test_a_viewer_reads_the_report_of_a_judged_step(
    page: Page,  # noqa: F811
    live_server: LiveServer,
    transactional_db: None,
    redis_client: redis.Redis,
    settings: Settings,
) -> None:
    settings.PROMETHEUS_URL = "http://127.0.0.1:9"
    UserFactory.create(username="watcher", role=Role.VIEWER)
    rollout = running_rollout()
    traffic(rollout, "baseline", 3000, seed=31)
    traffic(rollout, "canary", 3000, seed=32)
    baked(rollout)
    advance(rollout.pk)  # step 1 is passed on to the 50% step by the judge's final look
    polls: list[Request] = []
    page.on("request", lambda r: polls.append(r) if r.headers.get("hx-request") else None)

    page.goto(f"{live_server.url}/login/?next=/rollouts/{rollout.pk}/")
    page.get_by_label("Username").fill("watcher")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.get_by_role("link", name="A/B report").click()

    expect(page.get_by_role("heading", level=1)).to_contain_text("A/B report: support-chat:v2")
    page.get_by_role("link", name="step 1 · 5%").click()
    # No control arm: at 5% the latencies are left to the 50% step, where the loads are equal.
    expect(page.get_by_test_id("decision")).to_contain_text("Continue")
    ttft = page.locator('tr[data-metric="ttft_p95"]')
    expect(ttft.locator(".verdict")).to_have_text("inconclusive")
    errors = page.locator('tr[data-metric="error_rate"]')
    expect(errors.locator(".verdict")).to_have_text("pass")
    expect(page.locator("svg.ab-chart")).to_have_count(6)
    expect(page.get_by_test_id("unavailable").first).to_be_visible()
    page.wait_for_timeout(6000)
    assert polls, "the live report never polled"
