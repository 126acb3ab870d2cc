"""The control plane's own Prometheus metrics: HTTP requests and Celery task outcomes.

The web server (several gunicorn processes) and the Celery worker (prefork children) are separate
processes. When PROMETHEUS_MULTIPROC_DIR is set, prometheus_client keeps each process's values in
files there and `/metrics` on the web server merges them, so one scrape shows the whole control
plane on this host. Without it (tests, a single process) the default registry is used.
"""

from __future__ import annotations

import os
import socket

from django.http import HttpRequest, HttpResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
    values,
)


def process_identifier(pid: int | None = None) -> str:
    """Names this process's metric files. Containers sharing the directory (web and worker under
    Compose) each number their processes from 1, so a pid alone would collide. No underscore:
    prometheus_client splits file names on it."""
    return f"{socket.gethostname().replace('_', '-')}-{pid or os.getpid()}"


if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    values.ValueClass = values.MultiProcessValue(process_identifier)  # type: ignore[no-untyped-call]

HTTP_REQUESTS = Counter(
    "tollgate_http_requests",
    "HTTP requests served by the control plane.",
    ["method", "route", "status"],
)
HTTP_REQUEST_DURATION = Histogram(
    "tollgate_http_request_duration_seconds",
    "Time to serve an HTTP request, by route pattern.",
    ["method", "route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 5, 10),
)
CELERY_TASKS = Counter(
    "tollgate_celery_tasks",
    "Celery task executions by outcome (succeeded, failed, retried).",
    ["task", "outcome"],
)
CELERY_TASK_DURATION = Histogram(
    "tollgate_celery_task_duration_seconds",
    "Run time of Celery tasks.",
    ["task"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)


def observe_http_request(method: str, route: str, status: int, seconds: float) -> None:
    HTTP_REQUESTS.labels(method=method, route=route, status=str(status)).inc()
    HTTP_REQUEST_DURATION.labels(method=method, route=route).observe(seconds)


def observe_celery_task(task: str, outcome: str, seconds: float | None) -> None:
    CELERY_TASKS.labels(task=task, outcome=outcome).inc()
    if seconds is not None:
        CELERY_TASK_DURATION.labels(task=task).observe(seconds)


def metrics_view(request: HttpRequest) -> HttpResponse:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:
        registry = REGISTRY
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
