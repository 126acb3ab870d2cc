"""Usage accounting: the gateway's request records, from the Redis stream into per-tenant rollups.

The tenants app reads the samples stream with a consumer group of its own (`tollgate-usage`),
beside the judge's: each group sees every entry. An entry is acknowledged only after the
transaction that counted it has committed; one whose consumer died stays pending and is claimed
by another after `CLAIM_IDLE_MS`. Counting is idempotent: the entry ids are written to
`UsageEntry` (unique) in the same transaction, and only the ids that insert for the first time
are added to the rollups (`tenants.usage.aggregate`), so an entry processed twice counts once.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import Any

import orjson
from django.db import connection, transaction
from django.utils import timezone

from core import streams
from tenants.choices import Granularity
from tenants.models import RecentRejection, Tenant, UsageEntry, UsageRollup
from tenants.usage import (
    OPTIONAL,
    REQUIRED,
    BucketKey,
    Counts,
    Record,
    aggregate,
    record_from_sample,
)

STREAM = streams.STREAM
GROUP = "tollgate-usage"
BATCH = 5000
CLAIM_IDLE_MS = 30_000
# How many refusals each tenant's dashboard can list.
RECENT_REJECTIONS_KEPT = 50
# Minute rows older than this are dropped by compaction (the hour rows hold their totals).
MINUTE_RETENTION = dt.timedelta(days=7)
# The stream redelivers an entry within minutes; a day of processed ids is ample.
ENTRY_RETENTION = dt.timedelta(days=1)


UPSERT = """
INSERT INTO tenants_usagerollup AS t
    (tenant_id, granularity, bucket, route, arm, deployment,
     requests, tokens_in, tokens_out, errors, rejected, rejections, cost)
SELECT u.tenant_id, u.granularity, u.bucket, u.route, u.arm, u.deployment,
       u.requests, u.tokens_in, u.tokens_out, u.errors, u.rejected, u.rejections::jsonb, u.cost
FROM unnest(%s::bigint[], %s::varchar[], %s::timestamptz[], %s::varchar[], %s::varchar[],
            %s::varchar[], %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[],
            %s::text[], %s::float8[])
     AS u(tenant_id, granularity, bucket, route, arm, deployment,
          requests, tokens_in, tokens_out, errors, rejected, rejections, cost)
ON CONFLICT (tenant_id, granularity, bucket, route, arm, deployment) DO UPDATE SET
    requests = t.requests + EXCLUDED.requests,
    tokens_in = t.tokens_in + EXCLUDED.tokens_in,
    tokens_out = t.tokens_out + EXCLUDED.tokens_out,
    errors = t.errors + EXCLUDED.errors,
    rejected = t.rejected + EXCLUDED.rejected,
    cost = t.cost + EXCLUDED.cost,
    rejections = CASE WHEN EXCLUDED.rejections = '{}'::jsonb THEN t.rejections ELSE (
        SELECT coalesce(jsonb_object_agg(key, total), '{}'::jsonb) FROM (
            SELECT key, sum(value::bigint) AS total FROM (
                SELECT * FROM jsonb_each_text(t.rejections)
                UNION ALL SELECT * FROM jsonb_each_text(EXCLUDED.rejections)
            ) AS both_sides GROUP BY key
        ) AS summed
    ) END
"""

CLAIM_ENTRIES = """
INSERT INTO tenants_usageentry (stream_id, processed_at)
SELECT unnest(%s::varchar[]), now()
ON CONFLICT (stream_id) DO NOTHING
RETURNING stream_id
"""

TOUCH_KEYS = """
UPDATE tenants_apikey AS k SET last_used_at = greatest(k.last_used_at, u.used_at)
FROM unnest(%s::bigint[], %s::timestamptz[]) AS u(id, used_at)
WHERE k.id = u.id
"""

PRUNE_REJECTIONS = """
DELETE FROM tenants_recentrejection WHERE id IN (
    SELECT id FROM (
        SELECT id, row_number() OVER (PARTITION BY tenant_id ORDER BY at DESC, id DESC) AS n
        FROM tenants_recentrejection WHERE tenant_id = ANY(%s::bigint[])
    ) AS ranked WHERE n > %s
)
"""


def _upsert(rows: dict[BucketKey, Counts]) -> None:
    if not rows:
        return
    columns: list[list[Any]] = [[] for _ in range(13)]
    for key, counts in rows.items():
        values = (
            *key,
            counts.requests,
            counts.tokens_in,
            counts.tokens_out,
            counts.errors,
            counts.rejected,
            orjson.dumps(counts.rejections).decode(),
            counts.cost,
        )
        for column, value in zip(columns, values, strict=True):
            column.append(value)
    with connection.cursor() as cursor:
        cursor.execute(UPSERT, columns)


def _remember_rejections(records: list[Record], tenant_ids: dict[str, int]) -> None:
    by_tenant: dict[int, list[Record]] = defaultdict(list)
    for record in records:
        if record.rejected and record.tenant in tenant_ids:
            by_tenant[tenant_ids[record.tenant]].append(record)
    if not by_tenant:
        return
    newest = [
        RecentRejection(
            tenant_id=tenant_id,
            at=r.ts,
            route=r.route,
            arm=r.arm,
            reason=r.reason,
            status=r.status,
            request_id=r.request_id,
        )
        for tenant_id, rejected in by_tenant.items()
        # A storm of refusals in one batch: only the newest can survive the pruning anyway.
        for r in sorted(rejected, key=lambda r: r.ts)[-RECENT_REJECTIONS_KEPT:]
    ]
    RecentRejection.objects.bulk_create(newest)
    with connection.cursor() as cursor:
        cursor.execute(PRUNE_REJECTIONS, [list(by_tenant), RECENT_REJECTIONS_KEPT])


def _touch_keys(records: list[Record]) -> None:
    last: dict[int, dt.datetime] = {}
    for record in records:
        if record.key_id is not None:
            last[record.key_id] = max(record.ts, last.get(record.key_id, record.ts))
    if last:
        with connection.cursor() as cursor:
            cursor.execute(TOUCH_KEYS, [list(last), list(last.values())])


def usage_record_entries(entries: list[tuple[str, Record | None]]) -> int:
    """Counts the entries not counted before, in one transaction; returns how many were new."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(CLAIM_ENTRIES, [[entry_id for entry_id, _ in entries]])
            fresh = {row[0] for row in cursor.fetchall()}
        records = [r for entry_id, r in entries if entry_id in fresh and r is not None]
        slugs = {r.tenant for r in records}
        tenant_ids = dict(Tenant.objects.filter(slug__in=slugs).values_list("slug", "pk"))
        _upsert(aggregate(records, tenant_ids))
        _remember_rejections(records, tenant_ids)
        _touch_keys(records)
    return len(fresh)


_GROUP = streams.SampleGroup(
    group=GROUP,
    required=REQUIRED,
    optional=OPTIONAL,
    convert=record_from_sample,
    store=usage_record_entries,
)
# (the tests set the group up and read entries by hand)
_ensure_group = _GROUP.ensure_group
_decode = streams.entry_id


def parse(entry: dict[Any, Any]) -> Record | None:
    """The entry's record, or None when it is malformed (it is acknowledged and dropped)."""
    return _GROUP.parse(entry)


def usage_consume(*, consumer: str | None = None, count: int = BATCH) -> int:
    """Counts one batch (claimed stale entries first, then new ones); returns how many entries
    it took off the stream (malformed and already-counted ones included). An entry claimed again
    after its first consumer committed counts nothing the second time (UsageEntry)."""
    return _GROUP.consume(consumer=consumer, count=count, claim_idle_ms=CLAIM_IDLE_MS)


def usage_compact(*, now: dt.datetime | None = None) -> int:
    """Drops minute rows past their retention and processed-entry ids past theirs; returns the
    number of minute rows dropped. One statement each, so safe to run twice or concurrently."""
    now = now or timezone.now()
    cutoff = (now - MINUTE_RETENTION).replace(minute=0, second=0, microsecond=0)
    dropped, _ = UsageRollup.objects.filter(
        granularity=Granularity.MINUTE, bucket__lt=cutoff
    ).delete()
    UsageEntry.objects.filter(processed_at__lt=now - ENTRY_RETENTION).delete()
    return dropped
