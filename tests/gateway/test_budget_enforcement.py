"""Budgets through real gateway processes: exact under concurrency, settled to real usage."""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import time

import aiohttp
import redis

from gateway.snapshot import Budget
from tests.gateway.conftest import (
    ACME_KEY,
    GatewayLauncher,
    auth,
    chat_body,
    make_snapshot,
    publish,
    wait_for_version,
)
from tests.simfleet.harness import Fleet, FleetLauncher, metric, model, wait_until


async def fire(urls: list[str], count: int, body: dict[str, object]) -> list[int]:
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(i: int) -> int:
            url = urls[i % len(urls)] + "/v1/chat/completions"
            async with session.post(url, json=body, headers=auth(ACME_KEY)) as response:
                await response.read()
                return response.status

        return await asyncio.gather(*(one(i) for i in range(count)))


def day_tokens(redis_url: str) -> int:
    client = redis.Redis.from_url(redis_url)
    day = dt.datetime.now(dt.UTC).strftime("%Y%m%d")
    value = client.get(f"tollgate:budget:{{acme}}:day:{day}")
    client.close()
    return int(value or 0)


def test_500_concurrent_requests_over_two_gateways_of_two_workers_admit_exactly_100(
    gateways: GatewayLauncher, fleet: Fleet, redis_url: str
) -> None:
    # Four processes in all (GATEWAY_WORKERS=2 each): the limiters are Redis's, not theirs.
    first = gateways.start(redis_url=redis_url, workers=2)
    second = gateways.start(redis_url=redis_url, workers=2)
    snapshot = make_snapshot(fleet.urls[:2], acme_budget=Budget(requests_per_minute=100))
    publish(redis_url, snapshot)
    wait_for_version(first, snapshot.version)
    wait_for_version(second, snapshot.version)

    started = time.monotonic()
    statuses = asyncio.run(fire([first.url, second.url], 500, chat_body()))
    elapsed = time.monotonic() - started

    # The minute's 100 at once, and the limiter's refill (100 a minute) while the burst lasted.
    refill = math.ceil(elapsed * 100 / 60)
    assert 100 <= statuses.count(200) <= 100 + refill, (sorted(set(statuses)), elapsed)
    assert statuses.count(200) + statuses.count(429) == 500, {
        s: statuses.count(s) for s in statuses
    }


def test_tokens_are_settled_to_what_the_replica_reports(
    gateways: GatewayLauncher, fleet: Fleet, redis_url: str
) -> None:
    gateway = gateways.start(redis_url=redis_url)
    snapshot = make_snapshot(fleet.urls[:2], acme_budget=Budget(tokens_per_day=10**6))
    publish(redis_url, snapshot)
    wait_for_version(gateway, snapshot.version)
    before = metric(fleet.urls[0], "vllm:generation_tokens_total") + metric(
        fleet.urls[1], "vllm:generation_tokens_total"
    )
    prompt_before = metric(fleet.urls[0], "vllm:request_prompt_tokens_sum") + metric(
        fleet.urls[1], "vllm:request_prompt_tokens_sum"
    )

    # max_tokens 200 is reserved for each, but the model answers in 6 tokens.
    statuses = asyncio.run(fire([gateway.url], 20, chat_body(max_tokens=200)))
    assert statuses == [200] * 20

    generated = (
        metric(fleet.urls[0], "vllm:generation_tokens_total")
        + metric(fleet.urls[1], "vllm:generation_tokens_total")
        - before
    )
    prompt = (
        metric(fleet.urls[0], "vllm:request_prompt_tokens_sum")
        + metric(fleet.urls[1], "vllm:request_prompt_tokens_sum")
        - prompt_before
    )
    assert generated == 20 * 6
    wait_until(lambda: day_tokens(redis_url) == int(generated + prompt))


def test_a_stream_cut_short_is_charged_for_what_was_generated(
    gateways: GatewayLauncher, fleets: FleetLauncher, redis_url: str
) -> None:
    # A slow model: 20 ms a token, so the client can leave mid-answer.
    slow = fleets.start(
        [model(speed={"step_base_ms": 20, "decode_per_seq_ms": 0, "prefill_per_token_ms": 0})]
    )
    gateway = gateways.start(redis_url=redis_url)
    snapshot = make_snapshot(slow.urls, acme_budget=Budget(tokens_per_day=10**6))
    publish(redis_url, snapshot)
    wait_for_version(gateway, snapshot.version)

    async def read_some_then_leave() -> int:
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                gateway.url + "/v1/chat/completions",
                json=chat_body(max_tokens=500, stream=True, ignore_eos=True),
                headers=auth(ACME_KEY),
            ) as response,
        ):
            events = 0
            async for line in response.content:
                if line.startswith(b'data: {"id"') and b'"content":" ' in line:
                    events += 1
                if events == 10:
                    break
            return events

    assert asyncio.run(read_some_then_leave()) == 10
    wait_until(lambda: metric(slow.url, "vllm:num_requests_running") == 0, seconds=2)
    generated = metric(slow.url, "vllm:generation_tokens_total")
    prompt = metric(slow.url, "vllm:prompt_tokens_total")
    assert 10 <= generated < 60
    # Charged: the prompt and the tokens generated before the cut, not the 500 reserved.
    wait_until(lambda: day_tokens(redis_url) > 0)
    charged = day_tokens(redis_url)
    assert generated + prompt - 3 <= charged <= generated + prompt + 3, (charged, generated, prompt)
