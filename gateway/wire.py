"""One multiplexed Redis connection for the gateway's per-request script calls.

Admission is the one Redis call on a request's path, so its cost is the gateway's overhead.
Redis answers the commands of a connection in the order it received them, so every concurrent
admission of a process can share one connection: each call queues its command and waits on a
future, and replies are matched to futures in order. That needs no connection pool, no lock and
no per-call timer, and the commands queued in one turn of the event loop leave in one write.

A single watchdog timer enforces the timeout: when the oldest call has waited longer than
`timeout_s`, the connection is dropped and every waiting call fails at once (behind a stuck reply,
all of them are stuck). The next call reconnects. Errors are redis-py's exception types, so
callers handle one family whichever client they use.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import deque
from typing import Any

import hiredis
from redis.asyncio.connection import parse_url
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

Arg = str | int | bytes


def pack(args: tuple[Arg, ...]) -> bytes:
    """A command in the Redis protocol (RESP): an array of bulk strings."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


class _Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.waiting: deque[tuple[float, asyncio.Future[Any]]] = deque()
        self._reader = hiredis.Reader(replyError=ResponseError)
        self._outgoing: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a TCP connection's transport

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        while self.waiting and (reply := self._reader.gets()) is not False:
            _, future = self.waiting.popleft()
            if future.done():
                continue
            if isinstance(reply, ResponseError):
                error = NoScriptError if str(reply).startswith("NOSCRIPT") else ResponseError
                future.set_exception(error(str(reply)))
            else:
                future.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.fail(
            RedisConnectionError(f"connection to Redis lost: {exc or 'closed by the server'}")
        )

    def fail(self, error: Exception) -> None:
        while self.waiting:
            _, future = self.waiting.popleft()
            if not future.done():
                future.set_exception(error)

    def send(self, command: bytes, timeout_s: float) -> asyncio.Future[Any]:
        if self.transport is None:
            raise RedisConnectionError("the connection to Redis is closed")
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.waiting.append((time.monotonic() + timeout_s, future))
        # The commands of one turn of the event loop leave in one write (one system call).
        if not self._outgoing:
            loop.call_soon(self._flush)
        self._outgoing.append(command)
        return future

    def _flush(self) -> None:
        commands, self._outgoing = self._outgoing, []
        if self.transport is not None:
            self.transport.write(b"".join(commands))


class RedisWire:
    def __init__(self, url: str, *, timeout_s: float = 1.0, connect_timeout_s: float = 0.5):
        options = parse_url(url)
        self._host = str(options.get("host", "127.0.0.1"))
        self._port = int(options.get("port", 6379))
        self._setup: list[tuple[Arg, ...]] = []
        if options.get("password"):
            user = options.get("username")
            self._setup.append(("AUTH", *((user,) if user else ()), options["password"]))
        if options.get("db"):
            self._setup.append(("SELECT", int(options["db"])))
        self._timeout_s = timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._connection: _Connection | None = None
        self._connecting: asyncio.Lock | None = None
        self._watchdog: asyncio.TimerHandle | None = None

    async def call(self, *args: Arg) -> Any:
        connection = await self._connected()
        return await connection.send(pack(args), self._timeout_s)

    async def run_script(self, source: str, keys: list[str], args: list[Arg]) -> Any:
        """EVALSHA, loading the script once when Redis does not know it (after a restart)."""
        sha = script_sha(source)
        try:
            return await self.call("EVALSHA", sha, len(keys), *keys, *args)
        except NoScriptError:
            await self.call("SCRIPT", "LOAD", source)
            return await self.call("EVALSHA", sha, len(keys), *keys, *args)

    async def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        if self._connection is not None and self._connection.transport is not None:
            self._connection.transport.close()
        self._connection = None

    async def _connected(self) -> _Connection:
        connection = self._connection
        if connection is not None and connection.transport is not None:
            return connection
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._connection is None or self._connection.transport is None:
                self._connection = await self._connect()
            return self._connection

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                _, connection = await loop.create_connection(_Connection, self._host, self._port)
                for command in self._setup:
                    await connection.send(pack(command), self._timeout_s)
        except (OSError, TimeoutError) as exc:
            raise RedisConnectionError(
                f"cannot reach Redis at {self._host}:{self._port}: {exc}"
            ) from exc
        if self._watchdog is None:
            self._watchdog = loop.call_later(self._timeout_s / 4, self._check_timeouts)
        return connection

    def _check_timeouts(self) -> None:
        connection = self._connection
        if connection is not None and connection.waiting:
            deadline, _ = connection.waiting[0]
            if time.monotonic() > deadline:
                connection.fail(
                    RedisTimeoutError(f"Redis gave no reply within {self._timeout_s:g} s")
                )
                if connection.transport is not None:
                    connection.transport.abort()
        self._watchdog = asyncio.get_running_loop().call_later(
            self._timeout_s / 4, self._check_timeouts
        )


def script_sha(source: str) -> str:
    return hashlib.sha1(source.encode()).hexdigest()  # noqa: S324 (Redis names scripts by SHA1)
