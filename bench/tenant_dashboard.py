"""A tenant's quota dashboard with 30 days of minute-level traffic: server time at p50/p95.

    .venv/bin/python bench/tenant_dashboard.py [--days 30] [--requests 200] [--keep] [--reuse]
        [--ingest 50000]

Builds its own database (`tollgate_bench_tenants`, created and dropped here) and uses Redis
database 13 (REDIS_URL overrides it): one tenant with a minute row for every minute of the last 30
days, and the hour and day rows the consumer writes beside them, on each of four (route, arm,
deployment) places (3 routes, one of them in a canary): about 173,000 minute rows, 2,900 hour rows
and 124 day rows, with refusals by several limits in one minute in ten; nine more tenants with hour
rows only, for the release managers' list. Then it times, in-process with Django's test client
(server time: middleware, view, queries, template), the dashboard page at each range, the htmx
chart fragment, the usage API, the CSV export and the list of tenants, and prints p50/p95 next to
the 150 ms target with each call's query count. It does this twice: with every minute row stored,
and after compaction (minute rows older than 7 days dropped; hour and day rows already hold their
totals), the two states the table is in before and after the hourly compaction task has run.

`--ingest N` also times counting N request records from the samples stream into the rollups
(the beat task's work), in the consumer's batches.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATABASE = "tollgate_bench_tenants"
os.environ["DATABASE_URL"] = f"postgres://postgres@127.0.0.1:5432/{DATABASE}"
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/13")
os.environ.setdefault("SECRET_KEY", "bench-secret-key-0123456789-0123456789-0123456789")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
os.environ["LOG_LEVEL"] = "WARNING"

import django  # noqa: E402
import psycopg  # noqa: E402

TARGET_MS = 150.0
PLACES = [("chat", "baseline", "1"), ("chat", "canary", "2"), ("code", "baseline", "3")]
PLACES += [("embed", "baseline", "4")]
# One minute row per place per minute: tokens vary with the minute so charts have a shape.
FILL_MINUTES = """
INSERT INTO tenants_usagerollup
    (tenant_id, granularity, bucket, route, arm, deployment, requests, tokens_in, tokens_out,
     errors, rejected, rejections, cost)
SELECT %(tenant)s, 'minute', m, %(route)s, %(arm)s, %(dep)s,
       20 + (extract(minute FROM m)::int %% 7), 4000 + (extract(hour FROM m)::int * 50),
       900 + (extract(minute FROM m)::int * 3), (extract(minute FROM m)::int %% 29 = 0)::int,
       CASE WHEN extract(minute FROM m)::int %% 10 = 0 THEN 3 ELSE 0 END,
       CASE WHEN extract(minute FROM m)::int %% 10 = 0
            THEN '{"requests_per_minute": 2, "tokens_per_day": 1}'::jsonb ELSE '{}'::jsonb END,
       0.012
FROM generate_series(%(start)s::timestamptz, %(end)s::timestamptz, interval '1 minute') AS m
"""
# Hour rows are what the consumer writes beside the minutes: their sums.
FILL_HOURS = """
INSERT INTO tenants_usagerollup
    (tenant_id, granularity, bucket, route, arm, deployment, requests, tokens_in, tokens_out,
     errors, rejected, rejections, cost)
SELECT tenant_id, 'hour', date_trunc('hour', bucket), route, arm, deployment, sum(requests),
       sum(tokens_in), sum(tokens_out), sum(errors), sum(rejected),
       CASE WHEN sum(rejected) > 0 THEN jsonb_build_object(
           'requests_per_minute', (sum(rejected) * 2 / 3)::bigint,
           'tokens_per_day', (sum(rejected) / 3)::bigint)
       ELSE '{}'::jsonb END,
       sum(cost)
FROM tenants_usagerollup WHERE granularity = 'minute' AND tenant_id = %(tenant)s
GROUP BY tenant_id, date_trunc('hour', bucket), route, arm, deployment
"""
# And the day rows, the sums of the hours.
FILL_DAYS = """
INSERT INTO tenants_usagerollup
    (tenant_id, granularity, bucket, route, arm, deployment, requests, tokens_in, tokens_out,
     errors, rejected, rejections, cost)
SELECT tenant_id, 'day', date_trunc('day', bucket AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', route,
       arm, deployment, sum(requests), sum(tokens_in), sum(tokens_out), sum(errors), sum(rejected),
       CASE WHEN sum(rejected) > 0 THEN jsonb_build_object(
           'requests_per_minute', (sum(rejected) * 2 / 3)::bigint,
           'tokens_per_day', (sum(rejected) / 3)::bigint)
       ELSE '{}'::jsonb END,
       sum(cost)
FROM tenants_usagerollup WHERE granularity = 'hour' AND tenant_id = %(tenant)s
GROUP BY 1, 2, 3, 4, 5, 6
"""
OTHER_TENANT_HOURS = """
INSERT INTO tenants_usagerollup
    (tenant_id, granularity, bucket, route, arm, deployment, requests, tokens_in, tokens_out,
     errors, rejected, rejections, cost)
SELECT %(tenant)s, 'hour', h, 'chat', 'baseline', '1', 100 * %(weight)s, 40000 * %(weight)s,
       9000 * %(weight)s, 0, %(weight)s, '{"shed": 1}'::jsonb, 0.5
FROM generate_series(%(start)s::timestamptz, %(end)s::timestamptz, interval '1 hour') AS h
"""


def admin_connect() -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect("postgres://postgres@127.0.0.1:5432/postgres", autocommit=True)


def reset_database() -> None:
    with admin_connect() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{DATABASE}"')


def database_exists() -> bool:
    with admin_connect() as conn:
        row = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE]).fetchone()
    return row is not None


def build(days: int) -> None:
    from django.core.management import call_command
    from django.db import connection

    from tenants.models import RecentRejection, Tenant
    from tenants.services.budgets import budget_set
    from tenants.services.gateway_keys import api_key_create

    call_command("migrate", verbosity=0)
    end = dt.datetime.now(dt.UTC).replace(second=0, microsecond=0)
    start = end - dt.timedelta(days=days)
    tenant = Tenant.objects.create(slug="bench", name="Bench tenant")
    budget_set(
        actor=None,
        tenant=tenant,
        requests_per_minute=600,
        input_tokens_per_minute=400_000,
        output_tokens_per_minute=100_000,
        tokens_per_day=500_000_000,
        tokens_per_month=10_000_000_000,
        max_concurrent_requests=64,
    )
    for i in range(5):
        api_key_create(actor=None, tenant=tenant, name=f"key-{i}")
    place: dict[str, int | str | dt.datetime]
    with connection.cursor() as cursor:
        for route, arm, dep in PLACES:
            place = {"tenant": tenant.pk, "route": route, "arm": arm, "dep": dep}
            cursor.execute(FILL_MINUTES, {**place, "start": start, "end": end})
        cursor.execute(FILL_HOURS, {"tenant": tenant.pk})
        cursor.execute(FILL_DAYS, {"tenant": tenant.pk})
        for weight in range(1, 10):
            other = Tenant.objects.create(slug=f"other-{weight}", name=f"Other {weight}")
            cursor.execute(
                OTHER_TENANT_HOURS,
                {"tenant": other.pk, "weight": weight, "start": start, "end": end},
            )
    RecentRejection.objects.bulk_create(
        RecentRejection(
            tenant=tenant,
            at=end - dt.timedelta(seconds=i),
            route="chat",
            arm="baseline",
            reason="requests_per_minute",
            status=429,
            request_id=f"r-{i}",
        )
        for i in range(50)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")  # fresh statistics, as autovacuum would have by now


def counts() -> dict[str, int]:
    from django.db.models import Count

    from tenants.models import UsageRollup

    rows = UsageRollup.objects.filter(tenant__slug="bench").values("granularity")
    return {row["granularity"]: row["n"] for row in rows.annotate(n=Count("pk"))}


def measure(client: object, url: str, requests: int) -> tuple[float, float, int]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    get = client.get  # type: ignore[attr-defined]

    def fetch() -> object:
        response = get(url, headers={"HX-Request": "true"} if "#" in url else {})
        if getattr(response, "streaming", False):
            b"".join(response.streaming_content)  # the export's time is in its streaming
        return response

    url, _, _ = url.partition("#")
    assert fetch().status_code == 200, url  # type: ignore[attr-defined]
    timings = []
    for _ in range(requests):
        started = time.perf_counter()
        response = fetch()
        timings.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200  # type: ignore[attr-defined]
    with CaptureQueriesContext(connection) as queries:
        fetch()
    timings.sort()
    return statistics.median(timings), timings[int(len(timings) * 0.95) - 1], len(queries)


CALLS = [
    ("dashboard, last day", "/tenants/bench/"),
    ("dashboard, last hour", "/tenants/bench/?range=hour"),
    ("dashboard, 30 days", "/tenants/bench/?range=month"),
    ("charts fragment, 30 days", "/tenants/bench/?range=month#htmx"),
    ("API usage, 30 days", "/api/v1/tenants/bench/usage?range=month"),
    ("CSV export, 30 days", "/tenants/bench/usage.csv"),
    ("tenant list", "/tenants/?sort=rejections"),
]


# The export is a file people download, not a page they wait on; it is timed for the record.
UNTARGETED = {"CSV export, 30 days"}


def time_calls(requests: int, label: str) -> list[str]:
    from django.test import Client

    from tenants.models import User

    user = User.objects.get(username="bench-manager")
    client = Client()
    client.force_login(user)
    rows = counts()
    print(
        f"\n{label}: {rows['minute']:,} minute, {rows['hour']:,} hour and {rows['day']:,} day "
        "rows for the tenant"
    )
    print(f"{'call':<28} {'p50 ms':>8} {'p95 ms':>8} {'queries':>8}  target p95 < 150 ms")
    # Timings are wall-clock: on a shared machine they move with its load, so say what it was.
    load = os.getloadavg()[0]
    print(f"(load average {load:.1f} on {os.cpu_count()} CPUs when this table started)")
    over = []
    for name, url in CALLS:
        p50, p95, queries = measure(client, url, requests)
        if name in UNTARGETED:
            verdict = "(a download: no target)"
        else:
            over += [name] if p95 >= TARGET_MS else []
            verdict = "ok" if p95 < TARGET_MS else "OVER"
        print(f"{name:<28} {p50:8.1f} {p95:8.1f} {queries:8d}  {verdict}")
    return over


def time_ingest(records: int) -> None:
    import orjson

    from core.redis import get_redis
    from tenants.services import usage

    client = get_redis()
    client.delete(usage.STREAM)
    now = time.time()
    pipe = client.pipeline(transaction=False)
    for i in range(records):
        place = PLACES[i % len(PLACES)]
        record = {
            "ts": now - (i % 3600),
            "rid": f"bench-{i}",
            "route": place[0],
            "arm": place[1],
            "dep": place[2],
            "tenant": "bench" if i % 2 else f"other-{1 + i % 9}",
            "status": 429 if i % 50 == 0 else 200,
            "finish": "rejected" if i % 50 == 0 else "stop",
            "reason": "tokens_per_day" if i % 50 == 0 else None,
            "pt": 300,
            "ot": 80,
            "cost": 0.0004,
        }
        pipe.xadd(usage.STREAM, {"r": orjson.dumps(record)})
    pipe.execute()
    started = time.perf_counter()
    taken = 0
    while (batch := usage.usage_consume(consumer="bench")) > 0:
        taken += batch
    seconds = time.perf_counter() - started
    print(
        f"\ningest: {taken:,} records counted in {seconds:.2f} s "
        f"({taken / seconds:,.0f} records/s, batches of {usage.BATCH})"
    )
    client.delete(usage.STREAM)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--ingest", type=int, default=0, help="also time counting N records")
    parser.add_argument("--keep", action="store_true", help="leave the database in place")
    parser.add_argument("--reuse", action="store_true", help="measure a kept database again")
    args = parser.parse_args()
    reused = args.reuse and database_exists()
    if not reused:
        reset_database()
    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    from tenants.choices import Role
    from tenants.models import User
    from tenants.services import usage

    settings.ALLOWED_HOSTS = ["testserver"]
    started = time.perf_counter()
    if reused:
        call_command("migrate", verbosity=0)
    else:
        build(args.days)
    User.objects.get_or_create(
        username="bench-manager", defaults={"role": Role.RELEASE_MANAGER, "is_staff": True}
    )
    print(
        f"{'reused' if reused else 'built'} {args.days} days of traffic in "
        f"{time.perf_counter() - started:.0f} s; {args.requests} requests per call"
    )
    over = time_calls(args.requests, "every minute row stored")
    dropped = usage.usage_compact()
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE tenants_usagerollup")
    over += time_calls(args.requests, f"after compaction ({dropped:,} minute rows dropped)")
    if args.ingest:
        time_ingest(args.ingest)
    print()
    print(f"p95 over 150 ms: {', '.join(over)}" if over else "every call timed: p95 < 150 ms")
    connection.close()
    if not args.keep:
        with admin_connect() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')


if __name__ == "__main__":
    main()
