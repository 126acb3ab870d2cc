"""The tenants' pages: the quota dashboard, keys, the budget editor with its confirmation."""

from __future__ import annotations

import datetime as dt
import html
import re
from collections.abc import Callable
from contextlib import AbstractContextManager

import pytest
import redis
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from core.models import AuditEvent
from rollouts.models import Route
from tenants.gauges import budget_keys
from tenants.models import ApiKey, Budget, Tenant, User
from tenants.services.budgets import budget_set
from tenants.services.gateway_keys import api_key_create
from tenants.tokens import hash_secret
from tests.tenants.conftest import sample, send

HTMX = {"HX-Request": "true"}


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def dashboard(tenant: Tenant) -> str:
    return f"/tenants/{tenant.slug}/"


def test_it_shows_usage_charts_routes_and_recent_rejections(
    redis_client: redis.Redis, tenant_a_admin: User, tenant_a: Tenant, routes: dict[str, Route]
) -> None:
    now = timezone.now()
    canary = str(routes["chat"].canary_id)
    send(
        redis_client,
        sample(tenant_a, now, pt=1234, ot=567, cost=2.5),
        sample(tenant_a, now - dt.timedelta(hours=3), arm="canary", dep=canary, pt=10, ot=1),
        sample(tenant_a, now, status=429, finish="rejected", ot=0, reason="tokens_per_day"),
    )
    body = client_for(tenant_a_admin).get(dashboard(tenant_a)).content.decode()
    totals = re.search(r'data-testid="totals">(.*?)</dl>', body, re.S)
    assert totals is not None
    assert "1,244" in totals.group(1)  # tokens in over the last day
    assert "$2.51" in totals.group(1)  # 2.50 + 0.01
    assert body.count("<svg") == 4
    assert 'data-chart="Rejections by limit"' in body
    assert re.search(r'data-route="chat" data-arm="canary">.*?support-chat:v2', body, re.S)
    assert re.search(r'data-reason="tokens_per_day">.*?<code>tokens_per_day</code>', body, re.S)


def test_the_range_tabs_swap_only_the_charts(
    redis_client: redis.Redis, tenant_a_admin: User, tenant_a: Tenant
) -> None:
    send(redis_client, sample(tenant_a, timezone.now() - dt.timedelta(days=3), pt=777, ot=0))
    client = client_for(tenant_a_admin)
    day = client.get(dashboard(tenant_a) + "?range=day", headers=HTMX).content.decode()
    month = client.get(dashboard(tenant_a) + "?range=month", headers=HTMX).content.decode()
    assert day.lstrip().startswith('<section id="usage-charts"')
    assert "<html" not in day
    assert "777" not in day
    assert "777" in month


def test_gauges_read_the_gateways_budget_counters(
    redis_client: redis.Redis, tenant_a_admin: User, tenant_a: Tenant
) -> None:
    budget_set(
        actor=None,
        tenant=tenant_a,
        requests_per_minute=10,
        tokens_per_day=1000,
        max_output_tokens=2048,
        over_max_output="reject",
    )
    keys = budget_keys(tenant_a.pk, dt.datetime.now(dt.UTC))
    # 8 of the minute's 10 requests: the limiter runs 8 x 6 s ahead of Redis's clock.
    seconds, micros = redis_client.time()
    redis_client.set(keys["requests_per_minute"], seconds * 1000 + micros / 1000 + 8 * 6000)
    redis_client.set(keys["tokens_per_day"], 250)
    body = client_for(tenant_a_admin).get(dashboard(tenant_a)).content.decode()
    rpm = re.search(r'data-gauge="requests_per_minute">(.*?)</tr>', body, re.S)
    day = re.search(r'data-gauge="tokens_per_day">(.*?)</tr>', body, re.S)
    assert rpm is not None
    assert day is not None
    assert ">8<" in rpm.group(1)
    assert "gauge-warn" in rpm.group(1)
    assert "80%" in rpm.group(1)
    assert ">250<" in day.group(1)
    assert "25%" in day.group(1)
    per_request = re.search(r'data-testid="per-request">(.*?)</p>', body, re.S)
    assert per_request is not None
    assert "output up to 2,048 tokens (refuse the request past it)" in per_request.group(1)
    assert "context up to the model's length" in html.unescape(per_request.group(1))


def test_gauge_keys_are_the_gateways() -> None:
    from gateway.budgets import _keys

    now = dt.datetime(2026, 11, 30, 12, 0, 5, tzinfo=dt.UTC)
    theirs, _, _ = _keys("42", now)
    assert set(budget_keys(42, now).values()) == set(theirs[:6])  # all but reservations, settled


def test_the_page_says_so_when_the_budget_store_is_down(
    tenant_a_admin: User, tenant_a: Tenant, use_redis_url: object
) -> None:
    use_redis_url("redis://127.0.0.1:1/0")  # type: ignore[operator]
    response = client_for(tenant_a_admin).get(dashboard(tenant_a))
    assert response.status_code == 200
    assert "cannot be read right now" in response.content.decode()


def test_another_tenants_dashboard_is_not_found(
    tenant_a_admin: User, tenant_b: Tenant, redis_client: redis.Redis
) -> None:
    client = client_for(tenant_a_admin)
    assert client.get(dashboard(tenant_b)).status_code == 404
    assert client.get(f"/tenants/{tenant_b.slug}/usage.csv").status_code == 404
    assert client.post(f"/tenants/{tenant_b.slug}/keys/", {"name": "x"}).status_code == 404


def test_a_tenant_admin_lands_on_their_own_dashboard(tenant_a_admin: User) -> None:
    response = client_for(tenant_a_admin).get("/tenants/")
    assert response.status_code == 302
    assert response["Location"] == "/tenants/tenant-a/"


def test_release_managers_see_tenants_sorted_by_usage_or_rejections(
    redis_client: redis.Redis, release_manager: User, tenant_a: Tenant, tenant_b: Tenant
) -> None:
    now = timezone.now()
    rejected = {"status": 429, "finish": "rejected", "reason": "shed"}
    send(
        redis_client,
        sample(tenant_a, now, pt=5000),
        *[sample(tenant_b, now, **rejected) for _ in range(3)],
        sample(tenant_b, now, pt=10),
    )
    client = client_for(release_manager)
    by_usage = client.get("/tenants/?sort=usage").content.decode()
    by_rejections = client.get("/tenants/?sort=rejections").content.decode()
    assert by_usage.index('data-tenant="tenant-a"') < by_usage.index('data-tenant="tenant-b"')
    assert by_rejections.index('data-tenant="tenant-b"') < by_rejections.index(
        'data-tenant="tenant-a"'
    )


def test_a_new_key_is_shown_once_and_stored_hashed(
    redis_client: redis.Redis, tenant_a_admin: User, tenant_a: Tenant, routes: dict[str, Route]
) -> None:
    client = client_for(tenant_a_admin)
    response = client.post(
        f"/tenants/{tenant_a.slug}/keys/", {"name": "billing", "allowed_routes": ["chat-lite"]}
    )
    assert response.status_code == 201
    assert response["Cache-Control"] == "no-store"
    match = re.search(
        r'data-testid="new-secret">.*?<code>(tk_[^<]+)</code>', response.content.decode(), re.S
    )
    assert match is not None
    secret = html.unescape(match.group(1))
    key = ApiKey.objects.get(tenant=tenant_a, name="billing")
    assert key.key_hash == hash_secret(secret)
    assert key.allowed_routes == ["chat-lite"]
    assert AuditEvent.objects.filter(action="api_key.created", target_id=str(key.pk)).exists()
    assert secret not in client.get(dashboard(tenant_a)).content.decode()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"name": " "}, "Give the key a name"),
        ({"name": "x", "allowed_routes": ["nope"]}, "Select a valid choice"),
        ({"name": "x", "expires_at": "2001-01-01 00:00"}, "must be in the future"),
        ({"name": "x", "expires_at": "soon"}, "Enter a valid date/time"),
    ],
)
def test_bad_key_input_is_a_400_saying_what_to_fix(
    redis_client: redis.Redis,
    tenant_a_admin: User,
    tenant_a: Tenant,
    data: dict[str, object],
    message: str,
) -> None:
    response = client_for(tenant_a_admin).post(f"/tenants/{tenant_a.slug}/keys/", data)
    assert response.status_code == 400
    assert message in html.unescape(response.content.decode())
    assert not ApiKey.objects.exists()


def test_a_duplicate_key_name_is_a_400(
    redis_client: redis.Redis, tenant_a_admin: User, tenant_a: Tenant
) -> None:
    api_key_create(actor=None, tenant=tenant_a, name="app")
    response = client_for(tenant_a_admin).post(f"/tenants/{tenant_a.slug}/keys/", {"name": "app"})
    assert response.status_code == 400
    assert "already has a key named" in html.unescape(response.content.decode())


def test_revoking_a_key_is_audited_and_another_tenants_key_is_not_found(
    redis_client: redis.Redis, tenant_a_admin: User, tenant_a: Tenant, tenant_b: Tenant
) -> None:
    mine, _ = api_key_create(actor=None, tenant=tenant_a, name="app")
    theirs, _ = api_key_create(actor=None, tenant=tenant_b, name="app")
    client = client_for(tenant_a_admin)
    assert client.post(f"/tenants/{tenant_a.slug}/keys/{theirs.pk}/revoke/").status_code == 404
    assert client.post(f"/tenants/{tenant_a.slug}/keys/{mine.pk}/revoke/").status_code == 302
    mine.refresh_from_db()
    theirs.refresh_from_db()
    assert mine.revoked_at is not None
    assert theirs.revoked_at is None
    assert AuditEvent.objects.filter(action="api_key.revoked", target_id=str(mine.pk)).exists()


def test_key_forms_need_the_csrf_token(
    redis_client: redis.Redis, tenant_a_admin: User, tenant_a: Tenant
) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(tenant_a_admin)
    assert client.post(f"/tenants/{tenant_a.slug}/keys/", {"name": "x"}).status_code == 403
    assert not ApiKey.objects.exists()


def test_viewers_read_usage_but_neither_see_nor_manage_keys(
    redis_client: redis.Redis, viewer: User, tenant_a: Tenant
) -> None:
    key, _ = api_key_create(actor=None, tenant=tenant_a, name="app")
    client = client_for(viewer)
    body = client.get(dashboard(tenant_a)).content.decode()
    assert key.prefix not in body
    assert "New key" not in body
    assert client.post(f"/tenants/{tenant_a.slug}/keys/", {"name": "x"}).status_code == 403
    assert client.get(f"/tenants/{tenant_a.slug}/budget/").status_code == 403


def test_a_budget_change_is_confirmed_before_it_is_saved_and_audited(
    redis_client: redis.Redis, release_manager: User, tenant_a: Tenant, routes: dict[str, Route]
) -> None:
    budget_set(actor=None, tenant=tenant_a, tokens_per_day=1000)
    client = client_for(release_manager)
    form = {
        "tokens_per_day": "5000",
        "soft_limit_percent": "80",
        "soft_limit_action": "route",
        "soft_limit_route": "chat-lite",
        "over_max_output": "clamp",
        "default_output_allowance": "1024",
        "reason": "bigger launch",
    }
    review = client.post(f"/tenants/{tenant_a.slug}/budget/", form)
    body = html.unescape(review.content.decode())
    assert review.status_code == 200
    change = re.search(r'data-field="tokens_per_day">(.*?)</tr>', body, re.S)
    assert change is not None
    assert re.search(r"1,000.*→.*5,000", change.group(1), re.S)
    assert 'data-field="soft_limit_route"' in body
    assert Budget.objects.get(tenant=tenant_a).tokens_per_day == 1000  # nothing saved yet

    version = re.search(r'name="reviewed_version" value="([^"]*)"', body)
    assert version is not None
    confirmed = {**form, "confirmed": "on", "reviewed_version": version.group(1)}
    saved = client.post(f"/tenants/{tenant_a.slug}/budget/", confirmed)
    assert saved.status_code == 302
    budget = Budget.objects.get(tenant=tenant_a)
    assert (budget.tokens_per_day, budget.soft_limit_route) == (5000, "chat-lite")
    event = AuditEvent.objects.filter(action="budget.changed").latest("pk")
    assert event.reason == "bigger launch"
    assert event.data["changes"]["tokens_per_day"] == [1000, 5000]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"soft_limit_action": "route"}, "Name the cheaper route"),
        ({"soft_limit_route": "nowhere"}, "No route 'nowhere' is open to this tenant"),
        ({"requests_per_minute": "-1"}, "greater than or equal to 0"),
        ({"soft_limit_percent": "150"}, "less than or equal to 100"),
        ({"soft_limit_percent": "50", "confirmed": "on"}, "set one of them first"),
    ],
)
def test_bad_budget_input_is_a_400_saying_what_to_fix(
    redis_client: redis.Redis,
    release_manager: User,
    tenant_a: Tenant,
    routes: dict[str, Route],
    data: dict[str, str],
    message: str,
) -> None:
    form = {
        "over_max_output": "clamp",
        "default_output_allowance": "1024",
        "soft_limit_action": "reject",
    }
    response = client_for(release_manager).post(
        f"/tenants/{tenant_a.slug}/budget/", {**form, **data}
    )
    assert response.status_code == 400
    assert message in html.unescape(response.content.decode())


def test_usage_exports_as_csv(
    redis_client: redis.Redis, tenant_a_admin: User, tenant_a: Tenant
) -> None:
    send(redis_client, sample(tenant_a, timezone.now(), pt=321, ot=9))
    response = client_for(tenant_a_admin).get(f"/tenants/{tenant_a.slug}/usage.csv")
    lines = b"".join(response.streaming_content).decode().splitlines()  # type: ignore[attr-defined]
    assert lines[0].startswith("hour_utc,route,arm")
    assert ",chat,baseline,0,1,321,9,0,0," in lines[1]


def test_the_dashboard_makes_as_many_queries_whatever_the_traffic(
    redis_client: redis.Redis,
    tenant_a_admin: User,
    tenant_a: Tenant,
    routes: dict[str, Route],
    django_assert_num_queries: Callable[..., AbstractContextManager[object]],
) -> None:
    client = client_for(tenant_a_admin)
    now = timezone.now()
    send(redis_client, sample(tenant_a, now))
    with CaptureQueriesContext(connection) as few:
        client.get(dashboard(tenant_a) + "?range=month")
    for i in range(5):
        api_key_create(actor=None, tenant=tenant_a, name=f"key-{i}")
    rejected = {"status": 429, "finish": "rejected", "reason": "shed"}
    send(
        redis_client,
        *[
            sample(tenant_a, now - dt.timedelta(days=d), route=f"r{d}", dep=str(d), **rejected)
            for d in range(20)
        ],
    )
    with django_assert_num_queries(len(few)):
        client.get(dashboard(tenant_a) + "?range=month")


def test_a_confirmation_over_a_budget_changed_since_is_refused(
    redis_client: redis.Redis, release_manager: User, tenant_a: Tenant
) -> None:
    budget_set(actor=None, tenant=tenant_a, tokens_per_day=1000)
    client = client_for(release_manager)
    form = {
        "tokens_per_day": "5000",
        "over_max_output": "clamp",
        "default_output_allowance": "1024",
    }
    form["soft_limit_action"] = "reject"
    review = client.post(f"/tenants/{tenant_a.slug}/budget/", form).content.decode()
    version = re.search(r'name="reviewed_version" value="([^"]*)"', review)
    assert version is not None
    budget_set(actor=None, tenant=tenant_a, tokens_per_day=2000)  # someone else, meanwhile
    confirmed = {**form, "confirmed": "on", "reviewed_version": version.group(1)}
    response = client.post(f"/tenants/{tenant_a.slug}/budget/", confirmed)
    assert response.status_code == 409
    assert "changed by someone else since you reviewed" in html.unescape(response.content.decode())
    assert Budget.objects.get(tenant=tenant_a).tokens_per_day == 2000


def test_release_managers_search_tenants_by_slug_or_name(
    redis_client: redis.Redis, release_manager: User, tenant_a: Tenant, tenant_b: Tenant
) -> None:
    client = client_for(release_manager)
    found = client.get("/tenants/?q=tenant-b&sort=rejections").content.decode()
    assert 'data-tenant="tenant-b"' in found
    assert 'data-tenant="tenant-a"' not in found
    nothing = client.get("/tenants/?q=initech").content.decode()
    assert "No tenant matches" in nothing


def test_a_release_manager_creates_a_tenant_on_its_page(
    client: Client, release_manager: User, redis_client: redis.Redis
) -> None:
    client.force_login(release_manager)
    assert 'href="/tenants/new/"' in client.get("/tenants/").content.decode()
    form = {"slug": "initech", "name": "Initech", "tier": "batch", "fail_mode": "closed"}
    created = client.post("/tenants/new/", {**form, "tokens_per_day": "50000"})
    assert created.status_code == 302
    assert created["Location"] == "/tenants/initech/"
    assert Budget.objects.get(tenant__slug="initech").tokens_per_day == 50_000
    again = client.post("/tenants/new/", form)
    assert again.status_code == 400
    assert "already exists" in html.unescape(again.content.decode())
    reserved = client.post("/tenants/new/", {**form, "slug": "new"})
    assert "is reserved" in html.unescape(reserved.content.decode())
    assert Tenant.objects.count() == 1


def test_only_release_managers_create_tenants(client: Client, viewer: User) -> None:
    client.force_login(viewer)
    assert client.get("/tenants/new/").status_code == 403
    assert client.post("/tenants/new/", {"slug": "x", "name": "x"}).status_code == 403
    assert not Tenant.objects.exists()
