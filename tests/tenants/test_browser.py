"""A tenant admin's dashboard in a real browser: charts, the range tabs, a key shown once."""

from __future__ import annotations

import datetime as dt

import redis
from django.utils import timezone
from playwright.sync_api import Page, expect
from pytest_django.live_server_helper import LiveServer

from tenants.choices import Role
from tenants.services.budgets import budget_set
from tests.browser import page  # noqa: F401 -- fixture
from tests.factories import PASSWORD, TenantFactory, UserFactory
from tests.tenants.conftest import sample, send


def test_a_tenant_admin_reads_usage_switches_range_and_creates_a_key(
    page: Page,  # noqa: F811
    live_server: LiveServer,
    transactional_db: None,
    redis_client: redis.Redis,
) -> None:
    acme = TenantFactory.create(slug="acme", name="Acme")
    UserFactory.create(username="acme-admin", role=Role.TENANT_ADMIN, tenant=acme)
    budget_set(actor=None, tenant=acme, tokens_per_day=1_000_000)
    now = timezone.now()
    send(
        redis_client,
        sample(acme, now, pt=100, ot=10),
        sample(acme, now - dt.timedelta(days=5), pt=900_000, ot=0),
        sample(acme, now, status=429, finish="rejected", reason="tokens_per_day"),
    )

    page.goto(f"{live_server.url}/login/?next=/tenants/")
    page.get_by_label("Username").fill("acme-admin")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("Acme")
    expect(page.locator("#usage-charts svg")).to_have_count(4)
    expect(page.get_by_test_id("totals")).to_contain_text("100 / 10")
    expect(page.locator('tr[data-reason="tokens_per_day"]')).to_be_visible()

    page.get_by_role("link", name="Last 30 days").click()
    expect(page.get_by_test_id("totals")).to_contain_text("900,100 / 10")
    assert page.url.endswith("/tenants/acme/?range=month")  # swapped in place, URL kept in step
    expect(page.get_by_role("heading", level=1)).to_contain_text("Acme")

    page.get_by_label("Name").fill("billing")
    page.get_by_role("button", name="Create key").click()
    secret = page.get_by_test_id("new-secret").locator("code")
    expect(secret).to_contain_text("tk_")
    expect(page.locator("table.keys")).to_contain_text("billing")
    page.goto(f"{live_server.url}/tenants/acme/")
    expect(page.get_by_test_id("new-secret")).to_have_count(0)
    page.get_by_role("button", name="Revoke billing").click()
    expect(page.get_by_role("status")).to_contain_text("billing")
    expect(page.locator("table.keys tr.revoked")).to_contain_text("billing")
