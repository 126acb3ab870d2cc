"""The gateway's multiplexed Redis connection, against real Redis servers that stop and hang."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.wire import RedisWire


async def test_concurrent_calls_share_one_connection_and_get_their_own_replies() -> None:
    wire = RedisWire(os.environ["REDIS_URL"])
    try:
        await wire.call("DEL", "wire:counter")
        replies = await asyncio.gather(*(wire.call("INCR", "wire:counter") for _ in range(1000)))
        assert sorted(replies) == list(range(1, 1001))
        assert replies == sorted(replies)  # in the order they were sent
        ids = await asyncio.gather(*(wire.call("CLIENT", "ID") for _ in range(20)))
        assert len(set(ids)) == 1
    finally:
        await wire.call("DEL", "wire:counter")
        await wire.close()


async def test_an_error_reply_fails_only_its_own_call() -> None:
    wire = RedisWire(os.environ["REDIS_URL"])
    try:
        results = await asyncio.gather(
            wire.call("PING"), wire.call("NOSUCHCOMMAND"), wire.call("ECHO", "after"),
            return_exceptions=True,
        )  # fmt: skip
        assert results[0] == b"PONG"
        assert isinstance(results[1], ResponseError)
        assert results[2] == b"after"
    finally:
        await wire.close()


async def test_a_batch_gets_its_replies_in_order_with_errors_as_values_amid_single_calls() -> None:
    wire = RedisWire(os.environ["REDIS_URL"])
    try:
        await wire.call("DEL", "wire:batch")
        commands: list[tuple[str | int | bytes, ...]] = [("INCR", "wire:batch")] * 300
        commands[150] = ("NOSUCHCOMMAND",)
        before, batch, after = await asyncio.gather(
            wire.call("ECHO", "before"), wire.call_many(commands), wire.call("ECHO", "after")
        )
        assert (before, after) == (b"before", b"after")
        assert isinstance(batch[150], ResponseError)
        assert batch[:150] + batch[151:] == list(range(1, 300))
        assert await wire.call_many([]) == []
    finally:
        await wire.call("DEL", "wire:batch")
        await wire.close()


async def test_scripts_are_loaded_again_after_redis_forgets_them() -> None:
    wire = RedisWire(os.environ["REDIS_URL"])
    try:
        await wire.call("SCRIPT", "FLUSH")
        assert await wire.run_script("return ARGV[1]", [], ["loaded"]) == b"loaded"
        assert await wire.run_script("return ARGV[1]", [], ["cached"]) == b"cached"
    finally:
        await wire.close()


async def test_a_stopped_redis_fails_fast_and_a_restarted_one_is_used_again(
    redis_server: tuple[str, subprocess.Popen[bytes]],
) -> None:
    url, process = redis_server
    wire = RedisWire(url)
    try:
        assert await wire.call("PING") == b"PONG"
        process.kill()
        process.wait()
        started = time.monotonic()
        with pytest.raises(RedisConnectionError):
            await wire.call("PING")
        assert time.monotonic() - started < 1.0
    finally:
        await wire.close()


async def test_a_hung_redis_times_out_every_waiting_call(
    redis_server: tuple[str, subprocess.Popen[bytes]],
) -> None:
    url, process = redis_server
    wire = RedisWire(url, timeout_s=0.4)
    try:
        assert await wire.call("PING") == b"PONG"
        process.send_signal(signal.SIGSTOP)
        started = time.monotonic()
        results = await asyncio.gather(
            *(wire.call("PING") for _ in range(50)), return_exceptions=True
        )
        assert all(isinstance(r, RedisTimeoutError) for r in results), results[:3]
        assert time.monotonic() - started < 1.5
        process.send_signal(signal.SIGCONT)
        assert await wire.call("PING") == b"PONG"  # a new connection
    finally:
        process.send_signal(signal.SIGCONT)
        await wire.close()
