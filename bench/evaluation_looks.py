"""What the judge's tick and the A/B report cost at scale: server time at p50/p95 and query counts.

    .venv/bin/python bench/evaluation_looks.py [--per-arm 12000] [--other 500000] [--repeat 30]

Builds its own database (`tollgate_bench_eval`, created and dropped here): a running rollout whose
current step holds `--per-arm` samples in each arm (12,000 is the default plan's 50% step at
40 requests/s over its 300 s bake, the largest step the judge compares) among `--other` samples of
other rollouts and of no rollout. Then it times, in-process, a judge look (load both arms as
columns, judge, no storing), a full engine decision with storing, the report page and the report
API (Django's test client: middleware, view, queries, template; Prometheus pointed at a closed
port, so the fleet signals are "unavailable" and cost nothing), and the consumer storing 5,000
stream records with their step resolved.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATABASE = "tollgate_bench_eval"
os.environ["DATABASE_URL"] = f"postgres://postgres@127.0.0.1:5432/{DATABASE}"
os.environ.setdefault("SECRET_KEY", "bench-secret-key-0123456789-0123456789-0123456789")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/12")
os.environ["PROMETHEUS_URL"] = "http://127.0.0.1:9"
os.environ["LOG_LEVEL"] = "WARNING"

import django  # noqa: E402
import psycopg  # noqa: E402


def reset_database(drop_only: bool = False) -> None:
    with psycopg.connect("postgres://postgres@127.0.0.1:5432/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
        if not drop_only:
            conn.execute(f'CREATE DATABASE "{DATABASE}"')


def build(per_arm: int, other: int) -> int:
    from django.core.management import call_command
    from django.db import connection
    from django.utils import timezone

    from evaluation.models import RequestSample
    from rollouts.choices import RolloutState
    from rollouts.models import Deployment, Fleet, Replica, Rollout, Route
    from rollouts.plans import DEFAULT_PLAN
    from rollouts.services.rollouts import rollout_create, rollout_transition
    from tests.registry.factories import register

    call_command("migrate", verbosity=0)
    fleet = Fleet.objects.create(name="bench", dollars_per_gpu_hour=2)
    Replica.objects.create(fleet=fleet, name="r0", base_url="http://127.0.0.1:9")
    baseline = Deployment.objects.create(
        artifact=register(version="v1"), fleet=fleet, served_model_name="b", state="ready"
    )
    candidate = Deployment.objects.create(
        artifact=register(version="v2"), fleet=fleet, served_model_name="c", state="ready"
    )
    route = Route.objects.create(name="chat", baseline=baseline)
    rollout = rollout_create(actor=None, route=route, candidate=candidate, plan=DEFAULT_PLAN)
    Rollout.objects.filter(pk=rollout.pk).update(state="preflight")
    rollout_transition(rollout_id=rollout.pk, to=RolloutState.RUNNING, actor=None, reason="bench")
    for step in (0, 1):
        rollout_transition(
            rollout_id=rollout.pk,
            to=RolloutState.RUNNING,
            actor=None,
            reason="bench",
            expected_step=step,
        )
    rng = random.Random(1)
    now = timezone.now()

    def sample(i: int, rollout_id: int | None, step: int | None, arm: str) -> RequestSample:
        out = rng.randint(20, 400)
        return RequestSample(
            rid=f"{arm}-{rollout_id}-{i}",
            ts=now - dt.timedelta(milliseconds=i * 10),
            rollout_id=rollout_id,
            step=step,
            route="chat",
            arm=arm,
            deployment="x",
            tenant="acme",
            status=200 if rng.random() > 0.005 else 500,
            finish="stop" if rng.random() > 0.03 else "length",
            prompt_tokens=rng.randint(20, 2000),
            output_tokens=out,
            ttft_ms=rng.lognormvariate(4, 0.4),
            tpot_ms=rng.lognormvariate(1.6, 0.2),
            e2e_ms=rng.lognormvariate(6.5, 0.4),
            tool="valid" if rng.random() < 0.1 else "",
            concurrency=rng.randint(1, 12),
            cost=out * 3e-6,
        )

    batch: list[RequestSample] = []
    for i in range(other):
        batch.append(sample(i, rng.choice([None, 9_000_001, 9_000_002]), None, "baseline"))
        if len(batch) == 10_000:
            RequestSample.objects.bulk_create(batch)
            batch = []
    for arm in ("baseline", "canary"):
        batch.extend(sample(i, rollout.pk, 2, arm) for i in range(per_arm))
    RequestSample.objects.bulk_create(batch, batch_size=10_000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return rollout.pk


def timed(name: str, call: Callable[[], object], repeat: int) -> None:
    from django.db import connection

    queries = 0

    def count(execute: Callable[..., object], *args: object) -> object:
        nonlocal queries
        queries += 1
        return execute(*args)

    with connection.execute_wrapper(count):
        call()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
    print(
        f"{name:<46} p50 {statistics.median(times):7.1f} ms   p95 {p95:7.1f} ms"
        f"   {queries:3d} queries"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--per-arm", type=int, default=12_000)
    parser.add_argument("--other", type=int, default=500_000)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    reset_database()
    try:
        django.setup()
        run(args)
    finally:
        from django.db import connections

        connections.close_all()
        reset_database(drop_only=True)


def run(args: argparse.Namespace) -> None:
    import logging

    import orjson
    from django.conf import settings
    from django.test import Client
    from django.utils import timezone

    from core.redis import get_redis
    from evaluation import samples
    from evaluation.judging import step_look
    from evaluation.models import Verdict
    from orchestration.engine import decide
    from rollouts.models import Rollout
    from tenants.choices import Role
    from tests.factories import UserFactory

    logging.disable(logging.WARNING)  # "Prometheus did not answer", once per report: expected
    warnings.simplefilter("ignore")  # no collected static files here: not what is measured
    started = time.perf_counter()
    rollout_id = build(args.per_arm, args.other)
    print(
        f"built: {args.per_arm:,} samples per arm in the step, {args.other:,} others, "
        f"in {time.perf_counter() - started:.0f} s"
    )
    rollout = Rollout.objects.get(pk=rollout_id)
    timed(
        "judge look (load both arms, judge)",
        lambda: step_look(rollout, now=timezone.now(), final=True),
        args.repeat,
    )
    timed("engine decision, verdict kept", lambda: decide(rollout, record=True), args.repeat)
    print(f"  verdict rows after {args.repeat + 1} decisions: {Verdict.objects.count()}")
    settings.ALLOWED_HOSTS = ["testserver"]
    client = Client()
    client.force_login(UserFactory.create(username="bench", role=Role.VIEWER))
    timed("report page", lambda: client.get(f"/rollouts/{rollout_id}/report/"), args.repeat)
    timed("report API", lambda: client.get(f"/api/v1/rollouts/{rollout_id}/report"), args.repeat)
    timed("verdict API", lambda: client.get(f"/api/v1/rollouts/{rollout_id}/verdict"), args.repeat)

    redis = get_redis()
    redis.delete(samples.STREAM)
    records = 5_000
    now = time.time()
    pipe = redis.pipeline()
    for i in range(records):
        record = {
            "ts": now, "rid": f"stream-{i}", "route": "chat", "arm": "canary", "dep": "1",
            "rollout": str(rollout_id), "tenant": "acme", "replica": "r0", "status": 200,
            "finish": "stop", "pt": 100, "ot": 50, "ttft_ms": 40.0, "tpot_ms": 5.0,
            "e2e_ms": 300.0, "tool": None, "conc": 3, "stream": True, "cost": 0.0001,
        }  # fmt: skip
        pipe.xadd(samples.STREAM, {"r": orjson.dumps(record)})
    pipe.execute()
    started = time.perf_counter()
    stored = samples.consume(consumer="bench", count=records)
    took = time.perf_counter() - started
    print(f"consumer: {stored:,} records stored in one batch in {took * 1000:.0f} ms "
          f"({stored / took:,.0f} records/s)")  # fmt: skip
    redis.delete(samples.STREAM)


if __name__ == "__main__":
    main()
