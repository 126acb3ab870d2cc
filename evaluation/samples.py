"""Moving the gateway's request records from the Redis stream into Postgres.

A consumer group makes this safe with many workers and with workers that die: each entry goes to
one consumer, and is acknowledged only after the transaction that stored it has committed. An
entry whose consumer died stays pending and is claimed by another after `CLAIM_IDLE_MS`. Storing
is idempotent on the response id, so an entry processed twice (claimed after its first consumer
committed but before it acknowledged) is stored once.

Each sample is filed under the rollout step it arrived in, from the arrival time and the times
the rollout's steps started (their RUNNING events, and `step_started_at` for the current one),
not from the step that is current when the sample happens to be consumed: a consumer that lags,
or one that dies and leaves its entries to be claimed 30 s later, still files them correctly.
The one window this leaves: a sample that arrives while the transition to the next step is
being committed is filed under the step before (milliseconds; accepted).
"""

from __future__ import annotations

import bisect
import datetime as dt
import logging
import socket
from collections import defaultdict
from typing import Any

import orjson
import redis
from django.db import transaction
from django.db.models import Min

from controlplane.redis import get_redis
from evaluation.models import RequestSample
from rollouts.choices import RolloutState
from rollouts.models import Rollout, RolloutEvent

logger = logging.getLogger(__name__)

STREAM = "tollgate:samples"
GROUP = "tollgate-evaluation"
BATCH = 5000
CLAIM_IDLE_MS = 30_000


def _sample(fields: dict[str, Any]) -> RequestSample | None:
    try:
        record = orjson.loads(fields["r"])
        return RequestSample(
            rid=str(record["rid"])[:100],
            ts=dt.datetime.fromtimestamp(float(record["ts"]), tz=dt.UTC),
            rollout_id=int(record["rollout"]) if record.get("rollout") else None,
            route=str(record["route"])[:100],
            arm=str(record["arm"])[:100],
            deployment=str(record["dep"])[:64],
            tenant=str(record["tenant"])[:63],
            replica=str(record.get("replica") or "")[:200],
            status=int(record["status"]),
            finish=str(record.get("finish") or "")[:16],
            prompt_tokens=int(record["pt"]),
            output_tokens=int(record["ot"]),
            ttft_ms=record.get("ttft_ms"),
            tpot_ms=record.get("tpot_ms"),
            e2e_ms=float(record["e2e_ms"]),
            tool=str(record.get("tool") or "")[:16],
            concurrency=int(record.get("conc") or 0),
            stream=bool(record.get("stream")),
            cost=float(record.get("cost") or 0.0),
            reason=str(record.get("reason") or "")[:32],
        )
    except (KeyError, TypeError, ValueError, orjson.JSONDecodeError) as exc:
        # A malformed record is logged and acknowledged: retrying it forever would block none of
        # the others but would never succeed either.
        logger.warning("dropping a malformed sample: %s", exc)
        return None


def step_starts(rollout_ids: set[int]) -> dict[int, list[tuple[dt.datetime, int]]]:
    """When each step of these rollouts started, in time order: (start, step index)."""
    starts: dict[int, dict[int, dt.datetime]] = defaultdict(dict)
    events = (
        RolloutEvent.objects.filter(rollout_id__in=rollout_ids, to_state=RolloutState.RUNNING)
        .values("rollout_id", "step_index")
        .annotate(start=Min("created_at"))
    )
    for event in events:
        starts[event["rollout_id"]][event["step_index"]] = event["start"]
    # The current step's own start time is set in the same transaction as its event, a moment
    # earlier; the guardrails count from it, so the judge's step does too.
    current = Rollout.objects.filter(pk__in=rollout_ids, step_started_at__isnull=False)
    for rollout_id, step, started in current.values_list("pk", "step_index", "step_started_at"):
        if started is not None:
            starts[rollout_id][step] = started
    return {
        rollout_id: sorted((start, step) for step, start in by_step.items())
        for rollout_id, by_step in starts.items()
    }


def file_under_steps(samples: list[RequestSample]) -> None:
    """Sets each sample's step: the last step of its rollout that had started when it arrived."""
    rollout_ids = {s.rollout_id for s in samples if s.rollout_id is not None}
    if not rollout_ids:
        return
    starts = step_starts(rollout_ids)
    for sample in samples:
        timeline = starts.get(sample.rollout_id or 0, [])
        at = bisect.bisect_right([start for start, _ in timeline], sample.ts)
        sample.step = timeline[at - 1][1] if at else None


def _ensure_group(client: redis.Redis) -> None:
    try:
        client.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def consume(*, consumer: str | None = None, count: int = BATCH) -> int:
    """Stores one batch (claimed stale entries first, then new ones); returns how many entries
    it took off the stream (malformed ones included)."""
    client = get_redis()
    _ensure_group(client)
    name = consumer or f"{socket.gethostname()}"
    # (redis-py's stubs do not describe these replies; their shapes are Redis's documented ones.)
    claimed: Any = client.xautoclaim(STREAM, GROUP, name, CLAIM_IDLE_MS, "0-0", count=count)
    entries: list[tuple[str, dict[str, Any]]] = list(claimed[1])
    if len(entries) < count:
        response: Any = client.xreadgroup(GROUP, name, {STREAM: ">"}, count=count - len(entries))
        for _, items in response or []:
            entries.extend(items)
    if not entries:
        return 0
    samples = [s for _, fields in entries if (s := _sample(fields)) is not None]
    file_under_steps(samples)
    with transaction.atomic():
        RequestSample.objects.bulk_create(samples, ignore_conflicts=True)
    # After the commit: a crash before this line leaves the entries pending, to be claimed again.
    client.xack(STREAM, GROUP, *[entry_id for entry_id, _ in entries])
    return len(entries)
