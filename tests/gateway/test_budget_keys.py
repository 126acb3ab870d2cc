"""The day and month counter names that the control plane reads and rebuilds are the ones that
admission charges (gateway/budgets.py), whatever the script does with its minute windows."""

from __future__ import annotations

import datetime as dt
import os
import uuid

import redis.asyncio as redis

from gateway.budget_keys import DAY_TTL_S, MONTH_TTL_S, day_key, month_key
from gateway.budgets import Budgets, Reservation
from gateway.snapshot import Budget
from gateway.wire import RedisWire


async def test_admission_charges_the_day_and_month_counters_named_here(
    client: redis.Redis,
) -> None:
    wire = RedisWire(os.environ["REDIS_URL"])
    budget = Budget(tokens_per_day=10_000, tokens_per_month=100_000)
    now = dt.datetime.now(dt.UTC)
    budgets = Budgets(wire)
    reservation = budgets.reservation(
        tenant_id="t1",
        budget=budget,
        request_id=uuid.uuid4().hex,
        prompt_tokens=10,
        output_allowance=20,
    )
    result = await budgets.admit(reservation, budget=budget, deadline_s=60.0)
    await wire.close()
    assert isinstance(result, Reservation)
    assert int(await client.get(day_key("t1", now)) or 0) == 30
    assert int(await client.get(month_key("t1", now)) or 0) == 30
    assert 0 < await client.ttl(day_key("t1", now)) <= DAY_TTL_S
    assert 0 < await client.ttl(month_key("t1", now)) <= MONTH_TTL_S
