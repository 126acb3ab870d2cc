"""Settlements and request records written after the response, in batches, to real Redis."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
import uuid
from typing import Any

import orjson
import redis.asyncio as redis

from gateway.budget_keys import limiter_usage
from gateway.budgets import Budgets, Reservation
from gateway.ledger import Ledger, Settlement
from gateway.sample import Sample
from gateway.snapshot import Budget
from gateway.wire import RedisWire
from tests.gateway.test_budgets import NOW, admit

STREAM = "tollgate:samples:test"


def sample(rid: str) -> Sample:
    return Sample(
        ts=NOW.timestamp(), rid=rid, route="chat", arm="baseline", dep="d1", rollout=None,
        tenant="t1", key="7", replica="r1", status=200, finish="stop", pt=10, ot=5, ttft_ms=12.0,
        tpot_ms=3.0, e2e_ms=30.0, tool=None, conc=1, stream=True, cost=0.0,
    )  # fmt: skip


async def reserve(client: redis.Redis, count: int) -> list[Reservation]:
    del client  # the fixture emptied the database
    wire = RedisWire(os.environ["REDIS_URL"])
    budget = Budget(output_tokens_per_minute=100 * count, max_concurrent_requests=count)
    reservations = [await admit(Budgets(wire), budget, allowance=100) for _ in range(count)]
    await wire.close()
    assert all(isinstance(r, Reservation) for r in reservations)
    return reservations  # type: ignore[return-value]


async def output_in_use(client: redis.Redis, reservation: Reservation, limit: int) -> int:
    """What the output-tokens-per-minute limiter holds, at the tests' clock."""
    tat = await client.get(reservation.keys[2])
    return limiter_usage(float(tat) if tat else None, NOW.timestamp() * 1000, limit)


async def test_a_burst_is_settled_and_recorded_in_full_then_the_writer_stops(
    client: redis.Redis,
) -> None:
    reservations = await reserve(client, 300)
    ledger = Ledger(RedisWire(os.environ["REDIS_URL"]), stream=STREAM, max_len=10_000)
    # Queued before the writer runs: the burst goes out in a few batches of MAX_BATCH.
    for reservation in reservations:
        ledger.record(Settlement(reservation, 10, 5), sample(reservation.request_id))
    ledger.record(None, sample("refused-before-admission"))
    ledger.start()
    await ledger.close()

    entries: Any = await client.xrange(STREAM)
    rids = [orjson.loads(fields[b"r"])["rid"] for _, fields in entries]
    assert rids == [r.request_id for r in reservations] + ["refused-before-admission"]
    keys = reservations[0].keys
    assert await client.zcard(keys[5]) == 0  # every concurrency slot freed
    assert await client.hlen(keys[6]) == 0  # every reservation settled
    # Output charged as used, not reserved.
    assert await output_in_use(client, reservations[0], 100 * 300) == 300 * 5


async def test_settlement_survives_a_redis_that_forgot_the_script(client: redis.Redis) -> None:
    (reservation,) = await reserve(client, 1)
    await client.script_flush()  # what a Redis restart does
    ledger = Ledger(RedisWire(os.environ["REDIS_URL"]), stream=STREAM, max_len=10_000)
    ledger.start()
    ledger.record(Settlement(reservation, 10, 7), sample(uuid.uuid4().hex))
    await ledger.close()

    assert await client.hlen(reservation.keys[6]) == 0
    assert await output_in_use(client, reservation, 100) == 7
    assert await client.xlen(STREAM) == 1  # recorded once, not again with the retry


async def test_a_settlement_that_meets_a_stalled_redis_is_retried_until_it_lands(
    redis_server: tuple[str, subprocess.Popen[bytes]],
) -> None:
    url, process = redis_server
    wire = RedisWire(url)
    budget = Budget(tokens_per_day=1000, max_concurrent_requests=1)
    reservation = await admit(Budgets(wire), budget, prompt=10, allowance=50)
    await wire.close()
    assert isinstance(reservation, Reservation)
    client = redis.Redis.from_url(url)
    ledger = Ledger(RedisWire(url, timeout_s=0.3), stream=STREAM, max_len=10_000)
    ledger.start()
    process.send_signal(signal.SIGSTOP)  # a stall: the write times out
    try:
        ledger.record(Settlement(reservation, 10, 20), sample(reservation.request_id))
        await asyncio.sleep(1.0)
    finally:
        process.send_signal(signal.SIGCONT)
    deadline = time.monotonic() + 10
    while await client.zcard(reservation.keys[5]) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    await ledger.close()
    assert await client.zcard(reservation.keys[5]) == 0  # the concurrency slot is free again
    assert int(await client.get(reservation.keys[3]) or 0) == 30  # charged once, as used
    await client.aclose()
