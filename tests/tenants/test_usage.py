"""Usage accounting: from the gateway's stream into rollups, each request counted exactly once."""

from __future__ import annotations

import datetime as dt
import threading
import time
from typing import Any

import orjson
import pytest
import redis
from django.db import connection
from django.db.models import Sum

from tenants.choices import Granularity
from tenants.models import ApiKey, RecentRejection, Tenant, UsageEntry, UsageRollup
from tenants.services import usage
from tenants.services.gateway_keys import api_key_create
from tests.tenants.conftest import sample

NOW = dt.datetime(2026, 11, 30, 12, 34, 56, tzinfo=dt.UTC)


def record(tenant: Tenant, **overrides: Any) -> dict[str, Any]:
    return sample(tenant, NOW, **{"dep": "7", "cost": 0.5, **overrides})


def rejection(tenant: Tenant, reason: str, **overrides: Any) -> dict[str, Any]:
    fields = {"status": 429, "finish": "rejected", "ot": 0, "cost": 0.0, "reason": reason}
    return record(tenant, **{**fields, **overrides})


def publish(client: redis.Redis, *records: dict[str, Any]) -> None:
    for item in records:
        client.xadd(usage.STREAM, {"r": orjson.dumps(item)})


def rollup(tenant: Tenant, granularity: str = Granularity.MINUTE, **filters: Any) -> UsageRollup:
    return UsageRollup.objects.get(tenant=tenant, granularity=granularity, **filters)


def test_requests_are_summed_into_minute_and_hour_rows(
    redis_client: redis.Redis, tenant_a: Tenant
) -> None:
    publish(
        redis_client,
        record(tenant_a),
        record(tenant_a, pt=50, ot=5, cost=0.25),
        record(tenant_a, status=500, finish="error", ot=0, cost=0.0),
        record(tenant_a, ts=(NOW + dt.timedelta(minutes=2)).timestamp()),
        record(tenant_a, arm="canary", dep="8"),
        rejection(tenant_a, "tokens_per_day"),
        rejection(tenant_a, "tokens_per_day"),
        rejection(tenant_a, "shed", status=503),
    )
    assert usage.usage_consume(consumer="w1") == 8

    minute = rollup(tenant_a, bucket=NOW.replace(second=0), arm="baseline")
    assert (minute.requests, minute.tokens_in, minute.tokens_out, minute.errors) == (3, 250, 25, 1)
    assert minute.cost == pytest.approx(0.75)
    assert minute.rejected == 3
    assert minute.rejections == {"tokens_per_day": 2, "shed": 1}
    hour = rollup(
        tenant_a, Granularity.HOUR, bucket=NOW.replace(minute=0, second=0), arm="baseline"
    )
    assert (hour.requests, hour.tokens_in, hour.rejected) == (4, 350, 3)
    assert rollup(tenant_a, Granularity.HOUR, arm="canary").deployment == "8"
    day = rollup(tenant_a, Granularity.DAY, arm="baseline")
    assert (day.bucket, day.requests, day.rejections) == (
        NOW.replace(hour=0, minute=0, second=0),
        4,
        {"tokens_per_day": 2, "shed": 1},
    )
    # Rejected requests never reached a replica: their estimated prompt is not usage.
    totals = UsageRollup.objects.filter(granularity=Granularity.HOUR).aggregate(Sum("tokens_in"))
    assert totals["tokens_in__sum"] == 450


def test_later_batches_add_to_existing_rows_and_merge_rejection_reasons(
    redis_client: redis.Redis, tenant_a: Tenant
) -> None:
    publish(redis_client, record(tenant_a), rejection(tenant_a, "requests_per_minute"))
    usage.usage_consume(consumer="w1")
    publish(redis_client, record(tenant_a), rejection(tenant_a, "requests_per_minute"))
    publish(redis_client, rejection(tenant_a, "max_concurrent_requests"))
    usage.usage_consume(consumer="w1")
    minute = rollup(tenant_a)
    assert (minute.requests, minute.tokens_in, minute.rejected) == (2, 200, 3)
    assert minute.rejections == {"requests_per_minute": 2, "max_concurrent_requests": 1}


def test_an_entry_processed_twice_counts_once(
    redis_client: redis.Redis, tenant_a: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish(redis_client, record(tenant_a), rejection(tenant_a, "shed", status=503))
    usage._ensure_group(redis_client)
    # A worker counts the entries and commits, then dies before acknowledging them.
    response: Any = redis_client.xreadgroup(
        usage.GROUP, "dead-worker", {usage.STREAM: ">"}, count=10
    )
    entries = [(usage._decode(eid), usage.parse(fields)) for eid, fields in response[0][1]]
    assert usage.usage_record_entries(entries) == 2
    # Another worker claims them once they have been idle long enough.
    monkeypatch.setattr(usage, "CLAIM_IDLE_MS", 1)
    time.sleep(0.01)
    assert usage.usage_consume(consumer="w2") == 2
    minute = rollup(tenant_a)
    assert (minute.requests, minute.rejected) == (1, 1)
    assert RecentRejection.objects.count() == 1
    pending: Any = redis_client.xpending(usage.STREAM, usage.GROUP)
    assert pending["pending"] == 0


def test_malformed_and_unknown_tenant_records_are_acknowledged_and_skipped(
    redis_client: redis.Redis, tenant_a: Tenant
) -> None:
    redis_client.xadd(usage.STREAM, {"r": b"{not json"})
    unknown = {**record(tenant_a), "tenant": "no-such-tenant"}
    publish(redis_client, unknown, record(tenant_a, status="x"), record(tenant_a))
    assert usage.usage_consume(consumer="w1") == 4
    assert UsageRollup.objects.filter(granularity=Granularity.MINUTE).count() == 1
    pending: Any = redis_client.xpending(usage.STREAM, usage.GROUP)
    assert pending["pending"] == 0


def test_recent_rejections_keep_the_newest_few_per_tenant(
    redis_client: redis.Redis, tenant_a: Tenant, tenant_b: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(usage, "RECENT_REJECTIONS_KEPT", 3)
    for second in range(5):
        ts = (NOW + dt.timedelta(seconds=second)).timestamp()
        publish(redis_client, rejection(tenant_a, f"limit-{second}", ts=ts))
        usage.usage_consume(consumer="w1")
    publish(redis_client, rejection(tenant_b, "tokens_per_month"))
    usage.usage_consume(consumer="w1")
    kept = list(RecentRejection.objects.filter(tenant=tenant_a).values_list("reason", flat=True))
    assert kept == ["limit-4", "limit-3", "limit-2"]
    assert RecentRejection.objects.filter(tenant=tenant_b).count() == 1


def test_records_that_name_their_key_set_its_last_use(
    redis_client: redis.Redis, tenant_a: Tenant
) -> None:
    key, _ = api_key_create(actor=None, tenant=tenant_a, name="app")
    later = NOW + dt.timedelta(minutes=5)
    publish(
        redis_client,
        record(tenant_a, key=str(key.pk)),
        record(tenant_a, key=str(key.pk), ts=later.timestamp()),
    )
    usage.usage_consume(consumer="w1")
    assert ApiKey.objects.get(pk=key.pk).last_used_at == later
    # An older record arriving late never moves it back.
    publish(redis_client, record(tenant_a, key=str(key.pk)))
    usage.usage_consume(consumer="w1")
    assert ApiKey.objects.get(pk=key.pk).last_used_at == later


def test_compaction_drops_old_minute_rows_and_keeps_the_hour_totals(
    redis_client: redis.Redis, tenant_a: Tenant
) -> None:
    old = NOW - usage.MINUTE_RETENTION - dt.timedelta(hours=2)
    publish(
        redis_client,
        *[record(tenant_a, ts=(old + dt.timedelta(minutes=m)).timestamp()) for m in range(3)],
        record(tenant_a),
    )
    usage.usage_consume(consumer="w1")
    before = UsageRollup.objects.filter(granularity=Granularity.HOUR).aggregate(Sum("requests"))
    assert UsageRollup.objects.filter(granularity=Granularity.MINUTE).count() == 4

    assert usage.usage_compact(now=NOW) == 3
    assert usage.usage_compact(now=NOW) == 0  # idempotent
    minutes = UsageRollup.objects.filter(granularity=Granularity.MINUTE)
    assert list(minutes.values_list("bucket", flat=True)) == [NOW.replace(second=0)]
    after = UsageRollup.objects.filter(granularity=Granularity.HOUR).aggregate(Sum("requests"))
    assert after == before == {"requests__sum": 4}


def test_compaction_forgets_processed_entry_ids_after_a_day(
    redis_client: redis.Redis, tenant_a: Tenant
) -> None:
    publish(redis_client, record(tenant_a))
    usage.usage_consume(consumer="w1")
    assert UsageEntry.objects.count() == 1
    usage.usage_compact(now=dt.datetime.now(dt.UTC))
    assert UsageEntry.objects.count() == 1
    usage.usage_compact(
        now=dt.datetime.now(dt.UTC) + usage.ENTRY_RETENTION + dt.timedelta(minutes=1)
    )
    assert UsageEntry.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_two_workers_counting_the_same_entries_at_once_count_them_once(
    redis_client: redis.Redis,
) -> None:
    tenant = Tenant.objects.create(slug="racer", name="Racer")
    entries = [
        (f"1700000000000-{i}", usage.parse({"r": orjson.dumps(record(tenant))})) for i in range(50)
    ]
    barrier = threading.Barrier(2)
    counts: list[int] = []

    def work() -> None:
        barrier.wait()
        try:
            counts.append(usage.usage_record_entries(entries))
        finally:
            connection.close()

    threads = [threading.Thread(target=work) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # The loser waits on the entry ids the winner inserted, then finds them all taken.
    assert sorted(counts) == [0, 50]
    assert rollup(tenant).requests == 50
