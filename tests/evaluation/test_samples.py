"""From the gateway's stream into Postgres: nothing lost, nothing counted twice."""

from __future__ import annotations

import datetime as dt
import time
import uuid
from typing import Any

import orjson
import pytest
import redis
from django.utils import timezone

from evaluation import samples
from evaluation.models import RequestSample
from rollouts.choices import RolloutState
from rollouts.models import Rollout, RolloutEvent
from rollouts.services.rollouts import rollout_transition

S = RolloutState


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
    publish(redis_client, record(rid="r-1", pe=15), record(rid="r-2", arm="baseline", status=500))
    assert samples.consume(consumer="w1") == 2
    stored = RequestSample.objects.get(rid="r-1")
    assert (stored.rollout_id, stored.arm, stored.ttft_ms, stored.output_tokens) == (
        3,
        "canary",
        35.5,
        40,
    )
    assert (stored.prompt_tokens, stored.prompt_estimate) == (12, 15)
    older = RequestSample.objects.get(rid="r-2")  # an older gateway's record: no estimate
    assert (older.status, older.prompt_estimate) == (500, 0)
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


def test_refusals_keep_their_reason(redis_client: redis.Redis, db: None) -> None:
    publish(
        redis_client,
        record(rid="refused", status=429, finish="rejected", reason="requests_per_minute"),
    )
    samples.consume(consumer="w1")
    refused = RequestSample.objects.get(rid="refused")
    assert (refused.status, refused.finish, refused.reason) == (
        429,
        "rejected",
        "requests_per_minute",
    )


def test_rule_arms_are_stored_whole(redis_client: redis.Redis, db: None) -> None:
    publish(redis_client, record(rid="ruled", arm="rule:long-prompts-to-the-big-model"))
    samples.consume(consumer="w1")
    assert RequestSample.objects.get(rid="ruled").arm == "rule:long-prompts-to-the-big-model"


def test_samples_are_filed_under_the_step_they_arrived_in_however_late_they_are_consumed(
    running: Rollout, redis_client: redis.Redis
) -> None:
    # Step 0 started a minute ago.
    step_0_started = timezone.now() - dt.timedelta(seconds=60)
    Rollout.objects.filter(pk=running.pk).update(step_started_at=step_0_started)
    RolloutEvent.objects.filter(rollout=running, to_state=S.RUNNING).update(
        created_at=step_0_started
    )
    before_start = step_0_started.timestamp() - 5
    in_step_0 = step_0_started.timestamp() + 0.5
    publish(redis_client, record(rid="early", rollout=str(running.pk), ts=before_start))
    publish(redis_client, record(rid="step-0", rollout=str(running.pk), ts=in_step_0))
    # The rollout moves on before the consumer gets to those two records.
    rollout_transition(
        rollout_id=running.pk, to=S.RUNNING, actor=None, reason="next", expected_step=0
    )
    running.refresh_from_db()
    assert running.step_started_at is not None
    publish(
        redis_client,
        record(rid="step-1", rollout=str(running.pk), ts=running.step_started_at.timestamp() + 1),
    )
    samples.consume(consumer="w1")
    steps = dict(RequestSample.objects.values_list("rid", "step"))
    assert steps == {"early": None, "step-0": 0, "step-1": 1}


def test_samples_without_a_rollout_have_no_step(redis_client: redis.Redis, db: None) -> None:
    publish(redis_client, record(rid="plain", rollout=None))
    samples.consume(consumer="w1")
    assert RequestSample.objects.get(rid="plain").step is None


def test_a_worker_killed_between_commit_and_ack_loses_and_doubles_nothing(
    redis_client: redis.Redis, db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish(redis_client, *(record(rid=f"r-{i}") for i in range(50)))

    class Killed(Exception):
        pass

    def die(*args: Any) -> int:
        raise Killed

    # The worker stores the batch, then dies before acknowledging it.
    with monkeypatch.context() as patched:
        patched.setattr(redis.Redis, "xack", die)
        with pytest.raises(Killed):
            samples.consume(consumer="dead")
    assert RequestSample.objects.count() == 50
    monkeypatch.setattr(samples, "CLAIM_IDLE_MS", 1)
    time.sleep(0.01)
    assert samples.consume(consumer="w2") == 50  # claimed from the dead consumer
    assert RequestSample.objects.count() == 50
    pending: Any = redis_client.xpending(samples.STREAM, samples.GROUP)
    assert pending["pending"] == 0
