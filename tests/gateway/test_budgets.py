"""Budget admission and settlement against real Redis, with the Lua scripts the gateway runs."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as redis

from gateway.budgets import Budgets, Refusal, Reservation
from gateway.snapshot import Budget
from gateway.wire import RedisWire

NOW = dt.datetime(2026, 11, 30, 12, 0, 30, tzinfo=dt.UTC)


@pytest.fixture
async def budgets(client: redis.Redis) -> AsyncIterator[Budgets]:
    wire = RedisWire(os.environ["REDIS_URL"])
    yield Budgets(wire)
    await wire.close()


async def admit(
    budgets: Budgets,
    budget: Budget,
    *,
    prompt: int = 10,
    allowance: int = 20,
    now: dt.datetime = NOW,
    deadline_s: float = 60.0,
) -> Reservation | Refusal:
    reservation = budgets.reservation(
        tenant_id="t1",
        budget=budget,
        request_id=uuid.uuid4().hex,
        prompt_tokens=prompt,
        output_allowance=allowance,
        now=now,
    )
    return await budgets.admit(reservation, budget=budget, deadline_s=deadline_s)


async def test_concurrent_admissions_never_exceed_the_request_limit(client: redis.Redis) -> None:
    # Five independent connections race, like gateway processes on different hosts.
    wires = [RedisWire(os.environ["REDIS_URL"]) for _ in range(5)]
    budget = Budget(requests_per_minute=100)
    results = await asyncio.gather(*(admit(Budgets(wires[i % 5]), budget) for i in range(500)))
    for wire in wires:
        await wire.close()
    admitted = [r for r in results if isinstance(r, Reservation)]
    refused = [r for r in results if isinstance(r, Refusal)]
    assert len(admitted) == 100
    assert {r.limit for r in refused} == {"requests_per_minute"}
    # The next request fits 0.6 s later (a limiter of 100 a minute), not at the next minute.
    assert {r.retry_after_s for r in refused} == {1}


async def test_the_output_allowance_is_reserved_then_refunded_to_actual_usage(
    budgets: Budgets,
) -> None:
    budget = Budget(output_tokens_per_minute=100)
    first = await admit(budgets, budget, allowance=60)
    assert isinstance(first, Reservation)
    # 60 reserved: a second request asking 60 more does not fit.
    refused = await admit(budgets, budget, allowance=60)
    assert isinstance(refused, Refusal)
    assert refused.limit == "output_tokens_per_minute"
    await budgets.settle(first, prompt_tokens=10, output_tokens=15)
    # Only 15 were used: 85 are free again.
    assert isinstance(await admit(budgets, budget, allowance=80), Reservation)
    assert isinstance(await admit(budgets, budget, allowance=10), Refusal)


async def test_daily_tokens_count_prompt_and_output(budgets: Budgets) -> None:
    budget = Budget(tokens_per_day=100)
    assert isinstance(await admit(budgets, budget, prompt=40, allowance=40), Reservation)
    refused = await admit(budgets, budget, prompt=10, allowance=20)
    assert isinstance(refused, Refusal)
    assert refused.limit == "tokens_per_day"
    assert refused.retry_after_s == 12 * 3600 - 30


async def test_concurrency_slots_are_freed_when_a_request_settles(budgets: Budgets) -> None:
    budget = Budget(max_concurrent_requests=2)
    first = await admit(budgets, budget)
    second = await admit(budgets, budget)
    assert isinstance(first, Reservation)
    assert isinstance(second, Reservation)
    third = await admit(budgets, budget)
    assert isinstance(third, Refusal)
    assert third.limit == "max_concurrent_requests"
    await budgets.settle(first, prompt_tokens=10, output_tokens=5)
    assert isinstance(await admit(budgets, budget), Reservation)


async def test_reservations_never_settled_expire_and_are_refunded(budgets: Budgets) -> None:
    budget = Budget(tokens_per_day=100, max_concurrent_requests=1)
    crashed = await admit(budgets, budget, prompt=30, allowance=50, deadline_s=5)
    assert isinstance(crashed, Reservation)
    assert isinstance(await admit(budgets, budget, now=NOW + dt.timedelta(seconds=1)), Refusal)
    later = NOW + dt.timedelta(seconds=10)
    # The crashed request's slot and its 80 reserved tokens are back.
    assert isinstance(await admit(budgets, budget, prompt=40, allowance=50, now=later), Reservation)


async def test_settling_after_expiry_charges_what_was_used(budgets: Budgets) -> None:
    budget = Budget(tokens_per_day=100)
    slow = await admit(budgets, budget, prompt=10, allowance=80, deadline_s=5)
    assert isinstance(slow, Reservation)
    later = NOW + dt.timedelta(seconds=10)
    assert isinstance(await admit(budgets, budget, prompt=1, allowance=1, now=later), Reservation)
    await budgets.settle(slow, prompt_tokens=10, output_tokens=70)
    # 2 + 80 used: 18 left.
    assert isinstance(await admit(budgets, budget, prompt=10, allowance=8, now=later), Reservation)
    assert isinstance(await admit(budgets, budget, prompt=1, allowance=1, now=later), Refusal)


async def test_unlimited_budgets_admit_everything(budgets: Budgets) -> None:
    results = [await admit(budgets, Budget(), prompt=10**6, allowance=10**6) for _ in range(5)]
    assert all(isinstance(r, Reservation) for r in results)


async def test_a_minute_boundary_does_not_let_twice_the_limit_through(budgets: Budgets) -> None:
    budget = Budget(requests_per_minute=100)
    end_of_minute = NOW.replace(second=59, microsecond=500_000)
    first = [await admit(budgets, budget, now=end_of_minute) for _ in range(150)]
    assert sum(isinstance(r, Reservation) for r in first) == 100
    # One second later, in the next minute: a fixed window would admit another 100 here.
    next_minute = end_of_minute + dt.timedelta(seconds=1)
    second = [await admit(budgets, budget, now=next_minute) for _ in range(150)]
    assert sum(isinstance(r, Reservation) for r in second) == 1  # 100 a minute: one per 0.6 s
    refusals = [r for r in second if isinstance(r, Refusal)]
    assert {r.retry_after_s for r in refusals} == {1}  # not "come back at :00"


async def test_retry_after_is_when_capacity_for_this_request_is_back(budgets: Budgets) -> None:
    budget = Budget(output_tokens_per_minute=600)  # 10 tokens a second
    assert isinstance(await admit(budgets, budget, allowance=600), Reservation)
    refused = await admit(budgets, budget, allowance=60)
    assert isinstance(refused, Refusal)
    assert refused.retry_after_s == 6
    later = NOW + dt.timedelta(seconds=6)
    assert isinstance(await admit(budgets, budget, allowance=60, now=later), Reservation)


def day_tokens(client: redis.Redis) -> Any:
    return client.get(f"tollgate:budget:{{t1}}:day:{NOW:%Y%m%d}")


async def test_settling_twice_charges_once(budgets: Budgets, client: redis.Redis) -> None:
    reservation = await admit(budgets, Budget(tokens_per_day=1000), prompt=10, allowance=50)
    assert isinstance(reservation, Reservation)
    assert await budgets.settle(reservation, prompt_tokens=10, output_tokens=20) == 1
    assert await budgets.settle(reservation, prompt_tokens=10, output_tokens=20) == 0
    assert int(await day_tokens(client)) == 30


async def test_an_admission_whose_reply_was_lost_is_released_by_settling_it(
    budgets: Budgets, client: redis.Redis
) -> None:
    budget = Budget(tokens_per_day=1000, max_concurrent_requests=1)
    held = await admit(budgets, budget, prompt=10, allowance=50)  # Redis ran it; the reply is lost
    assert isinstance(held, Reservation)
    lost = budgets.reservation(
        tenant_id="t1",
        budget=budget,
        request_id=held.request_id,
        prompt_tokens=10,
        output_allowance=50,
        now=NOW,
    )
    await budgets.settle(lost, prompt_tokens=0, output_tokens=0)  # the request was refused
    assert int(await day_tokens(client)) == 0
    assert isinstance(await admit(budgets, budget), Reservation)  # the slot is free


async def test_a_request_that_held_no_reservation_is_charged_once_for_what_it_used(
    budgets: Budgets, client: redis.Redis
) -> None:
    # Its admission never ran (the budget store was away and the tenant fails open).
    never = budgets.reservation(
        tenant_id="t1",
        budget=Budget(tokens_per_day=1000),
        request_id=uuid.uuid4().hex,
        prompt_tokens=10,
        output_allowance=50,
        now=NOW,
    )
    assert await budgets.settle(never, prompt_tokens=10, output_tokens=5) == 2
    assert await budgets.settle(never, prompt_tokens=10, output_tokens=5) == 0
    assert int(await day_tokens(client)) == 15
