"""Liveness (`/healthz`) and readiness (`/readyz`) of the control plane.

Readiness checks each dependency with a short timeout and reports every one, so an operator sees
all that is wrong in one call. A dependency that is down is a 503 with its reason, never a 500:
the web process itself stays up and keeps answering.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import redis
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET
from prometheus_api_client import PrometheusConnect
from urllib3.util.retry import Retry

from core.redis import get_redis
from orchestration.gateway_snapshot import LeftOut, left_out_of_published

WORKER_HEARTBEAT_KEY = "tollgate:workers:heartbeat"
# Beat schedules the heartbeat every 10 s; three missed beats mean the workers are not running.
WORKER_HEARTBEAT_STALE_AFTER_S = 30


def check_database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def check_redis() -> None:
    get_redis().ping()


def check_prometheus() -> None:
    prometheus = PrometheusConnect(
        url=settings.PROMETHEUS_URL, disable_ssl=True, retry=Retry(total=0), timeout=2
    )
    if not prometheus.check_prometheus_connection():
        raise ConnectionError(f"Prometheus at {settings.PROMETHEUS_URL} did not answer 2xx")


CHECKS: dict[str, Callable[[], None]] = {
    "database": check_database,
    "redis": check_redis,
    "prometheus": check_prometheus,
}


def describe_error(exc: Exception) -> str:
    # Driver errors can span several lines; the first one names the cause.
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def run_check(check: Callable[[], None]) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        check()
    except (
        Exception  # noqa: BLE001 -- any failure of a dependency is reported, none may escape
    ) as exc:
        return {"status": "error", "error": describe_error(exc)}
    return {"status": "ok", "latency_ms": round((time.perf_counter() - started) * 1000, 1)}


def worker_heartbeat() -> dict[str, Any]:
    """Informational: when the Celery workers last ran the beat-scheduled heartbeat."""
    try:
        raw = get_redis().get(WORKER_HEARTBEAT_KEY)
        last_beat = float(raw) if raw is not None else None
    except (redis.RedisError, ValueError):
        last_beat = None
    if last_beat is None:
        return {"status": "unknown"}
    age = max(0.0, time.time() - last_beat)
    status = "ok" if age <= WORKER_HEARTBEAT_STALE_AFTER_S else "stale"
    return {"status": status, "last_heartbeat_s": round(age, 1)}


def gateway_snapshot_left_out() -> list[LeftOut] | None:
    """The rows the published gateway snapshot left out, or None when Redis cannot tell."""
    try:
        return left_out_of_published()
    except (redis.RedisError, ValueError, KeyError, TypeError):
        return None


def gateway_snapshot() -> dict[str, Any]:
    """Informational: how many rows the published snapshot left out. Not their names: they name
    tenants, and this endpoint answers anyone (the home page shows release managers the rows)."""
    left_out = gateway_snapshot_left_out()
    if left_out is None:
        return {"status": "unknown"}
    return {"status": "error" if left_out else "ok", "rows_left_out": len(left_out)}


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    checks = {name: run_check(check) for name, check in CHECKS.items()}
    ready = all(result["status"] == "ok" for result in checks.values())
    body = {
        "status": "ok" if ready else "error",
        "checks": checks,
        "workers": worker_heartbeat(),
        "gateway_snapshot": gateway_snapshot(),
    }
    return JsonResponse(body, status=200 if ready else 503)
