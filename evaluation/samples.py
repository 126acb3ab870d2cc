"""Moving the gateway's request records from the Redis stream into Postgres.

A consumer group makes this safe with many workers and with workers that die: each entry goes to
one consumer, and is acknowledged only after the transaction that stored it has committed. An
entry whose consumer died stays pending and is claimed by another after `CLAIM_IDLE_MS`. Storing
is idempotent on the response id, so an entry processed twice (claimed after its first consumer
committed but before it acknowledged) is stored once.
"""

from __future__ import annotations

import datetime as dt
import logging
import socket
from typing import Any

import orjson
import redis
from django.db import transaction

from controlplane.redis import get_redis
from evaluation.models import RequestSample

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
            arm=str(record["arm"])[:16],
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
        )
    except (KeyError, TypeError, ValueError, orjson.JSONDecodeError) as exc:
        # A malformed record is logged and acknowledged: retrying it forever would block none of
        # the others but would never succeed either.
        logger.warning("dropping a malformed sample: %s", exc)
        return None


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
    with transaction.atomic():
        RequestSample.objects.bulk_create(samples, ignore_conflicts=True)
    # After the commit: a crash before this line leaves the entries pending, to be claimed again.
    client.xack(STREAM, GROUP, *[entry_id for entry_id, _ in entries])
    return len(entries)
