"""Soft limits: validated when set, flagged from the gateway's counters, published on change."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import pytest
import redis
from django.db import connection

from core.errors import DomainError
from core.models import AuditEvent
from gateway.snapshot import SNAPSHOT_KEY, Snapshot
from orchestration.gateway_snapshot import publish_snapshot
from rollouts.models import Route
from tenants.gauges import budget_keys
from tenants.models import Budget, Tenant
from tenants.services.budgets import budget_set
from tenants.services.soft_limits import soft_limits_check

Capture = Callable[..., AbstractContextManager[list[Callable[[], Any]]]]


def use_tokens(client: redis.Redis, tenant: Tenant, *, day: int = 0, month: int = 0) -> None:
    keys = budget_keys(tenant.pk, dt.datetime.now(dt.UTC))
    client.set(keys["tokens_per_day"], day)
    client.set(keys["tokens_per_month"], month)


def published(client: redis.Redis) -> Snapshot:
    return Snapshot.model_validate_json(client.get(SNAPSHOT_KEY) or b"")


def route_past_80_percent(tenant: Tenant) -> None:
    """1,000 tokens a day; past 80% of them, requests go to chat-lite."""
    budget_set(
        actor=None,
        tenant=tenant,
        tokens_per_day=1000,
        soft_limit_percent=80,
        soft_limit_action="route",
        soft_limit_route="chat-lite",
    )


def test_a_soft_limit_route_must_be_open_to_the_tenant(
    tenant_a: Tenant, tenant_b: Tenant, routes: dict[str, Route]
) -> None:
    routes["chat-lite"].tenants.set([tenant_b])
    with pytest.raises(DomainError, match="no route 'chat-lite' is open to tenant tenant-a"):
        route_past_80_percent(tenant_a)
    with pytest.raises(DomainError, match="name the cheaper route"):
        budget_set(actor=None, tenant=tenant_a, tokens_per_day=1000, soft_limit_action="route")
    with pytest.raises(DomainError, match="set one of them first"):
        budget_set(actor=None, tenant=tenant_a, soft_limit_percent=80)
    assert not Budget.objects.filter(tenant=tenant_a, soft_limit_percent__isnull=False).exists()


def test_crossing_the_soft_limit_sets_the_flag_once_audited_and_published(
    redis_client: redis.Redis,
    tenant_a: Tenant,
    routes: dict[str, Route],
    django_capture_on_commit_callbacks: Capture,
) -> None:
    route_past_80_percent(tenant_a)
    use_tokens(redis_client, tenant_a, day=799)
    with django_capture_on_commit_callbacks() as callbacks:
        assert soft_limits_check() == []
    assert callbacks == []

    use_tokens(redis_client, tenant_a, day=800)
    with django_capture_on_commit_callbacks() as callbacks:
        assert soft_limits_check() == ["tenant-a"]
        assert soft_limits_check() == []  # no change, no publication
    assert len(callbacks) == 1
    tenant_a.refresh_from_db()
    assert tenant_a.over_soft_limit
    assert (
        AuditEvent.objects.filter(action="tenant.soft_limit_crossed", tenant=tenant_a).count() == 1
    )

    publish_snapshot()
    tenant = published(redis_client).tenants[str(tenant_a.pk)]
    assert tenant.over_soft_limit
    assert (tenant.budget.soft_limit_action, tenant.budget.soft_limit_route) == (
        "route",
        "chat-lite",
    )

    use_tokens(redis_client, tenant_a, day=0)  # a new day
    assert soft_limits_check() == ["tenant-a"]
    tenant_a.refresh_from_db()
    assert not tenant_a.over_soft_limit
    assert AuditEvent.objects.filter(action="tenant.soft_limit_cleared").count() == 1


def test_the_monthly_share_counts_too(redis_client: redis.Redis, tenant_a: Tenant) -> None:
    budget_set(actor=None, tenant=tenant_a, tokens_per_month=10_000, soft_limit_percent=50)
    use_tokens(redis_client, tenant_a, month=5_000)
    assert soft_limits_check() == ["tenant-a"]


def test_removing_the_soft_limit_clears_the_flag(
    redis_client: redis.Redis, tenant_a: Tenant
) -> None:
    budget_set(actor=None, tenant=tenant_a, tokens_per_day=100, soft_limit_percent=50)
    use_tokens(redis_client, tenant_a, day=90)
    assert soft_limits_check() == ["tenant-a"]
    budget_set(actor=None, tenant=tenant_a, soft_limit_percent=None)
    assert soft_limits_check() == ["tenant-a"]
    tenant_a.refresh_from_db()
    assert not tenant_a.over_soft_limit


def test_an_unreadable_budget_store_changes_no_flag(
    tenant_a: Tenant, use_redis_url: Callable[[str], None]
) -> None:
    budget_set(actor=None, tenant=tenant_a, tokens_per_day=100, soft_limit_percent=50)
    Tenant.objects.filter(pk=tenant_a.pk).update(over_soft_limit=True)
    use_redis_url("redis://127.0.0.1:1/0")
    assert soft_limits_check() == []
    tenant_a.refresh_from_db()
    assert tenant_a.over_soft_limit


def test_a_deleted_fallback_route_is_left_out_of_the_snapshot(
    redis_client: redis.Redis, tenant_a: Tenant, routes: dict[str, Route]
) -> None:
    route_past_80_percent(tenant_a)
    routes["chat-lite"].delete()
    publish_snapshot()  # still valid: the gateway refuses past the soft limit instead
    assert published(redis_client).tenants[str(tenant_a.pk)].budget.soft_limit_route is None


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_checks_flip_the_flag_once(redis_client: redis.Redis) -> None:
    tenant = Tenant.objects.create(slug="racer", name="Racer")
    budget_set(actor=None, tenant=tenant, tokens_per_day=100, soft_limit_percent=50)
    use_tokens(redis_client, tenant, day=60)
    results: list[list[str]] = []
    barrier = threading.Barrier(2)

    def check() -> None:
        barrier.wait()
        try:
            results.append(soft_limits_check())
        finally:
            connection.close()

    threads = [threading.Thread(target=check) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(map(len, results)) == [0, 1]
    # Whoever lost the compare-and-set wrote nothing: exactly one audit row.
    assert AuditEvent.objects.filter(action="tenant.soft_limit_crossed").count() == 1
