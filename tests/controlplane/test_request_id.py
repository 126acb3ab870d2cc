import io
import json
import logging
from collections.abc import Iterator

import pytest
import redis
from celery.contrib.testing.worker import start_worker
from django.test import Client

from controlplane.celery import app as celery_app
from controlplane.logging import ContextFilter, JsonFormatter, request_id_var
from controlplane.metrics import CELERY_TASKS
from tests.conftest import wait_for

SEEN_KEY = "tests:seen-request-id"


@celery_app.task(name="tests.remember_request_id")
def remember_request_id() -> None:
    from core.redis import get_redis

    get_redis().set(SEEN_KEY, request_id_var.get() or "")


@celery_app.task(name="tests.fail")
def fail() -> None:
    raise RuntimeError("this task fails on purpose")


@pytest.fixture
def celery_worker(redis_client: redis.Redis) -> Iterator[None]:
    """A real Celery worker (Redis broker) running in a thread of the test process."""
    with start_worker(celery_app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
        yield


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(ContextFilter())
    logger = logging.getLogger("tollgate.http")
    logger.addHandler(handler)
    yield stream
    logger.removeHandler(handler)


def test_a_well_formed_request_id_is_kept_and_echoed(client: Client, db: None) -> None:
    response = client.get("/healthz", headers={"X-Request-ID": "ci-run-42.step-3"})
    assert response["X-Request-ID"] == "ci-run-42.step-3"


def test_a_hostile_request_id_is_replaced(client: Client, db: None) -> None:
    response = client.get("/healthz", headers={"X-Request-ID": "x\nfake-log-line " + "a" * 300})
    assert len(response["X-Request-ID"]) == 32
    assert "fake" not in response["X-Request-ID"]


def test_request_logs_are_json_lines_with_the_request_id(
    client: Client, db: None, json_log: io.StringIO
) -> None:
    client.get("/login/", headers={"X-Request-ID": "trace-me"})
    records = [json.loads(line) for line in json_log.getvalue().splitlines()]
    record = next(r for r in records if r.get("path") == "/login/")
    assert record["request_id"] == "trace-me"
    assert record["status"] == 200
    assert record["route"] == "/login/"
    assert {"time", "level", "logger", "duration_ms"} <= record.keys()


def test_celery_tasks_inherit_the_request_id_of_whoever_enqueued_them(
    celery_worker: None, redis_client: redis.Redis
) -> None:
    token = request_id_var.set("req-from-the-web")
    try:
        remember_request_id.delay()
    finally:
        request_id_var.reset(token)
    wait_for(lambda: redis_client.get(SEEN_KEY) is not None)
    assert redis_client.get(SEEN_KEY) == "req-from-the-web"


def test_task_outcomes_are_counted(celery_worker: None, redis_client: redis.Redis) -> None:
    def count(task: str, outcome: str) -> float:
        return float(CELERY_TASKS.labels(task=task, outcome=outcome)._value.get())

    before_ok = count("tests.remember_request_id", "succeeded")
    before_failed = count("tests.fail", "failed")
    remember_request_id.delay()
    fail.delay()
    wait_for(lambda: count("tests.fail", "failed") == before_failed + 1)
    wait_for(lambda: count("tests.remember_request_id", "succeeded") == before_ok + 1)
