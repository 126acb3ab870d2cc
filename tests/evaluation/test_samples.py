"""From the gateway's stream into Postgres: nothing lost, nothing counted twice."""

from __future__ import annotations

import time
import uuid
from typing import Any

import orjson
import pytest
import redis

from evaluation import samples
from evaluation.models import RequestSample


def record(**overrides: Any) -> dict[str, Any]:
    return {
        "ts": time.time(),
        "rid": "chatcmpl-" + uuid.uuid4().hex,
        "route": "chat",
        "arm": "canary",
        "dep": "7",
        "rollout": "3",
        "tenant": "acme",
        "replica": "fleet/r0",
        "status": 200,
        "finish": "stop",
        "pt": 12,
        "ot": 40,
        "ttft_ms": 35.5,
        "tpot_ms": 4.1,
        "e2e_ms": 210.0,
        "tool": None,
        "conc": 3,
        "stream": True,
        "cost": 0.0001,
        **overrides,
    }


def publish(client: redis.Redis, *records: dict[str, Any]) -> None:
    for item in records:
        client.xadd(samples.STREAM, {"r": orjson.dumps(item)})


def test_records_are_stored_with_their_measurements(redis_client: redis.Redis, db: None) -> None:
    publish(redis_client, record(rid="r-1"), record(rid="r-2", arm="baseline", status=500))
    assert samples.consume(consumer="w1") == 2
    stored = RequestSample.objects.get(rid="r-1")
    assert (stored.rollout_id, stored.arm, stored.ttft_ms, stored.output_tokens) == (
        3,
        "canary",
        35.5,
        40,
    )
    assert RequestSample.objects.get(rid="r-2").status == 500
    assert samples.consume(consumer="w1") == 0
    pending: Any = redis_client.xpending(samples.STREAM, samples.GROUP)
    assert pending["pending"] == 0  # acknowledged after the commit


def test_a_record_seen_twice_is_stored_once(redis_client: redis.Redis, db: None) -> None:
    same = record(rid="dup")
    publish(redis_client, same, same)
    samples.consume(consumer="w1")
    assert RequestSample.objects.filter(rid="dup").count() == 1


def test_entries_of_a_consumer_that_died_are_claimed_by_another(
    redis_client: redis.Redis, db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish(redis_client, record(rid="orphan"))
    samples._ensure_group(redis_client)
    # A worker reads the entry, then dies before storing or acknowledging it.
    redis_client.xreadgroup(samples.GROUP, "dead-worker", {samples.STREAM: ">"}, count=10)
    assert samples.consume(consumer="w2") == 0  # not idle long enough to take over yet
    monkeypatch.setattr(samples, "CLAIM_IDLE_MS", 1)
    time.sleep(0.01)
    assert samples.consume(consumer="w2") == 1
    assert RequestSample.objects.filter(rid="orphan").exists()


def test_malformed_records_are_dropped_without_blocking_the_rest(
    redis_client: redis.Redis, db: None
) -> None:
    redis_client.xadd(samples.STREAM, {"r": b"not json"})
    publish(redis_client, record(rid="fine"), record(rid="bad", status="many"))
    assert samples.consume(consumer="w1") == 3
    assert list(RequestSample.objects.values_list("rid", flat=True)) == ["fine"]
