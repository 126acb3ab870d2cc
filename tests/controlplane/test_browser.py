"""The login flow in a real browser, against a live server."""

import re

from playwright.sync_api import Page, expect
from pytest_django.fixtures import Settings
from pytest_django.live_server_helper import LiveServer

from tenants.choices import Role
from tests.browser import page  # noqa: F401 -- fixture
from tests.factories import PASSWORD, TenantFactory, UserFactory


def test_a_tenant_admin_logs_in_sees_their_tenant_and_logs_out(
    page: Page,  # noqa: F811
    live_server: LiveServer,
    transactional_db: None,
    settings: Settings,
    prometheus_url: str,
) -> None:
    settings.PROMETHEUS_URL = prometheus_url
    tenant = TenantFactory.create(slug="acme", name="Acme Support")
    UserFactory.create(username="acme-admin", role=Role.TENANT_ADMIN, tenant=tenant)

    page.goto(f"{live_server.url}/")
    expect(page).to_have_url(re.compile(r"/login/\?next=/$"))
    page.get_by_label("Username").fill("acme-admin")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()

    expect(page).to_have_url(f"{live_server.url}/")
    expect(page.get_by_test_id("role")).to_have_text("Tenant admin")
    expect(page.locator("main")).to_contain_text("Acme Support")
    expect(page.locator('tr[data-service="database"] td').nth(1)).to_have_text("ok")
    assert page.evaluate("window.htmx && window.htmx.version").startswith("2.")

    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(f"{live_server.url}/login/")


def test_a_wrong_password_keeps_the_person_on_the_login_page(
    page: Page,  # noqa: F811
    live_server: LiveServer,
    transactional_db: None,
) -> None:
    UserFactory.create(username="viewer", role=Role.VIEWER)
    page.goto(f"{live_server.url}/login/")
    page.get_by_label("Username").fill("viewer")
    page.get_by_label("Password").fill("not-the-password")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("alert")).to_contain_text("Wrong username or password")
    expect(page.get_by_label("Username")).to_have_value("viewer")
