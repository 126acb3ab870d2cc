import pytest
from django.test import Client
from pytest_django.fixtures import Settings

from tenants.models import User
from tests.factories import PASSWORD


def test_home_requires_a_login(client: Client, db: None) -> None:
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=/")


def test_logging_in_lands_on_home_showing_role_and_tenant(
    client: Client, tenant_a_admin: User, settings: Settings, prometheus_url: str
) -> None:
    settings.PROMETHEUS_URL = prometheus_url
    response = client.post(
        "/login/", {"username": "tenant-a-admin", "password": PASSWORD}, follow=True
    )
    assert response.redirect_chain[-1][0] == "/"
    page = response.content.decode()
    assert "Tenant admin" in page
    assert "Tenant A" in page
    assert 'id="service-status"' in page


def test_a_wrong_password_says_so_without_saying_which_part(
    client: Client, tenant_a_admin: User
) -> None:
    response = client.post("/login/", {"username": "tenant-a-admin", "password": "nope"})
    assert response.status_code == 200
    assert "Wrong username or password" in response.content.decode()


def test_the_login_form_is_csrf_protected(tenant_a_admin: User) -> None:
    client = Client(enforce_csrf_checks=True)
    response = client.post("/login/", {"username": "tenant-a-admin", "password": PASSWORD})
    assert response.status_code == 403


def test_htmx_polls_get_only_the_status_fragment(client: Client, viewer: User) -> None:
    client.force_login(viewer)
    response = client.get("/", headers={"HX-Request": "true"})
    body = response.content.decode()
    assert response.status_code == 200
    assert body.lstrip().startswith('<section id="service-status"')
    assert "<html" not in body
    assert 'data-service="redis"' in body


def test_every_page_carries_the_csrf_token_for_htmx(client: Client, viewer: User) -> None:
    client.force_login(viewer)
    body = client.get("/").content.decode()
    assert 'hx-headers=\'{"X-CSRFToken": "' in body


@pytest.mark.parametrize(
    ("actor", "can_use_admin"),
    [("release_manager", True), ("tenant_a_admin", False), ("viewer", False)],
)
def test_only_release_managers_reach_the_django_admin(
    client: Client, request: pytest.FixtureRequest, actor: str, can_use_admin: bool
) -> None:
    client.force_login(request.getfixturevalue(actor))
    response = client.get("/admin/tenants/tenant/")
    assert (response.status_code == 200) is can_use_admin


def test_the_api_schema_and_docs_are_served_without_a_cdn(client: Client, viewer: User) -> None:
    client.force_login(viewer)
    schema = client.get("/api/schema/")
    assert schema.status_code == 200
    assert b"/api/v1/me" in schema.content
    docs = client.get("/api/docs/").content.decode()
    assert "cdn" not in docs.lower()
    assert "/static/drf_spectacular_sidecar/" in docs


def test_htmx_is_served_from_the_pinned_package(client: Client, db: None) -> None:
    response = client.get("/static/vendor/htmx/htmx.min.js")
    assert response.status_code == 200
    assert b'version:"2.' in b"".join(response.streaming_content)  # type: ignore[attr-defined]
