"""Tool schemas are tenant input: they cannot reach the network, stall the loop or free a request.

The gateway checks a model's tool-call arguments against the schema the tenant sent, after the
answer is on its way. Whatever the schema does, the request is recorded and settled.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from gateway.tools import ToolChecker
from tests.conftest import free_port
from tests.gateway.conftest import (
    GatewayLauncher,
    chat_body,
    make_snapshot,
    records,
    serve,
)
from tests.gateway.test_limits import post
from tests.simfleet.harness import Fleet, FleetLauncher, model

# 34 characters: `^(a+)+$` backtracks for minutes on this before it fails.
CATASTROPHIC = "a" * 33 + "b"


def tool(parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": "get_weather", "parameters": parameters}}


def call(arguments: str) -> dict[str, str]:
    return {"id": "call_1", "name": "get_weather", "arguments": arguments}


@pytest.fixture(scope="module")
def fleet(fleets: FleetLauncher) -> Fleet:
    """A replica whose tool calls always parse, so that only the schema decides the outcome."""
    return fleets.start([model(answer_tokens=6, tool_call_validity=1.0)])


@pytest.fixture
def listener() -> Iterator[list[tuple[str, int]]]:
    """A TCP port that records who connects to it (nobody should)."""
    server = socket.create_server(("127.0.0.1", free_port()))
    server.settimeout(0.1)
    seen: list[tuple[str, int]] = []
    stopping = threading.Event()

    def accept() -> None:
        while not stopping.is_set():
            try:
                connection, address = server.accept()
            except TimeoutError:
                continue
            seen.append(address)
            connection.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    seen.append(("port", server.getsockname()[1]))  # first entry: where it listens
    yield seen
    stopping.set()
    thread.join()
    server.close()


def in_flight(redis_url: str) -> int:
    client = redis.Redis.from_url(redis_url)
    try:
        return int(client.zcard("tollgate:budget:{acme}:inflight"))
    finally:
        client.close()


def test_a_remote_ref_is_never_fetched_and_the_request_is_recorded_and_settled(
    gateways: GatewayLauncher, fleet: Fleet, redis_url: str, listener: list[tuple[str, int]]
) -> None:
    port = listener[0][1]
    snapshot = make_snapshot(fleet.urls[:1])
    gateway = serve(gateways, redis_url, snapshot)
    body = chat_body(
        tools=[tool({"$ref": f"http://127.0.0.1:{port}/schema.json"})],
        tool_choice="required",
        max_tokens=100,
    )
    status, answer, _ = post(gateway, body)
    assert status == 200
    assert answer["choices"][0]["message"]["tool_calls"]  # type: ignore[index]
    [record] = records(redis_url, 1)
    assert record["tool"] == "unchecked"
    assert record["status"] == 200
    assert record["ot"] > 0  # charged for what the model wrote
    deadline = time.monotonic() + 5
    while in_flight(redis_url) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert in_flight(redis_url) == 0  # settled: the concurrency slot is free again
    assert listener[1:] == []  # and nobody connected to the address in the schema


def test_a_catastrophic_pattern_does_not_stall_the_requests_of_others(
    gateways: GatewayLauncher, fleet: Fleet, redis_url: str
) -> None:
    snapshot = make_snapshot(fleet.urls[:1])
    gateway = serve(gateways, redis_url, snapshot)
    hostile = tool(
        {
            "type": "object",
            "properties": {
                "city": {"type": "string", "enum": [CATASTROPHIC], "pattern": "^(a+)+$"}
            },
            "required": ["city"],
        }
    )
    assert (
        post(gateway, chat_body(tools=[hostile], tool_choice="required", max_tokens=100))[0] == 200
    )
    started = time.monotonic()
    assert post(gateway, chat_body())[0] == 200
    assert time.monotonic() - started < 2  # the loop was not busy backtracking
    outcomes = sorted(str(record["tool"]) for record in records(redis_url, 2))
    assert outcomes == ["None", "unchecked"]


async def test_the_checker_tells_valid_from_invalid_and_gives_up_on_what_it_cannot_check() -> None:
    checker = ToolChecker()
    city = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    try:
        assert await checker.outcome([tool(city)], []) == "no_call"
        assert await checker.outcome([tool(city)], [call('{"city": "Oslo"}')]) == "valid"
        assert await checker.outcome([tool(city)], [call('{"city": 3}')]) == "invalid_schema"
        assert await checker.outcome([tool(city)], [call('{"city": ')]) == "invalid_json"
        remote = tool({"$ref": "http://127.0.0.1:9/schema.json"})
        assert await checker.outcome([remote], [call("{}")]) == "unchecked"
        slow = tool({"type": "object", "properties": {"c": {"pattern": "^(a+)+$"}}})

        # The loop keeps turning while the worker gives up on the pattern.
        gaps: list[float] = []

        async def tick() -> None:
            last = time.monotonic()
            while True:
                await asyncio.sleep(0.005)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        ticker = asyncio.ensure_future(tick())
        outcome = await checker.outcome([slow], [call(f'{{"c": "{CATASTROPHIC}"}}')])
        ticker.cancel()
        assert outcome == "unchecked"
        assert max(gaps) < 0.05
        # The worker survives its deadline and goes on checking.
        assert await checker.outcome([tool(city)], [call('{"city": "Oslo"}')]) == "valid"
    finally:
        await checker.close()


async def test_a_worker_that_dies_is_replaced() -> None:
    checker = ToolChecker()
    city = {"type": "object", "properties": {"city": {"type": "string"}}}
    try:
        assert await checker.outcome([tool(city)], [call('{"city": "Oslo"}')]) == "valid"
        process = await checker._worker()
        process.kill()
        await process.wait()
        assert await checker.outcome([tool(city)], [call('{"city": "Oslo"}')]) == "valid"
    finally:
        await checker.close()
