"""One multiplexed Redis connection for the gateway's per-request script calls.

Admission is the one Redis call on a request's path, so its cost is the gateway's overhead.
Redis answers the commands of a connection in the order it received them, so every concurrent
admission of a process can share one connection: each call queues its command and waits on a
future, and replies are matched to futures in order. That needs no connection pool, no lock and
no per-call timer, and the commands queued in one turn of the event loop leave in one write.

A batch (`call_many`: the ledger's settlements and records) is one entry of the queue, answered
with the list of its replies, errors as exception values, when the last of them arrives.

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


class _Batch:
    __slots__ = ("future", "remaining", "replies")

    def __init__(self, future: asyncio.Future[list[Any]], count: int) -> None:
        self.future = future
        self.remaining = count
        self.replies: list[Any] = []


def _error(reply: ResponseError) -> ResponseError:
    return (NoScriptError if str(reply).startswith("NOSCRIPT") else ResponseError)(str(reply))


class _Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.waiting: deque[tuple[float, asyncio.Future[Any] | _Batch]] = deque()
        self._reader = hiredis.Reader(replyError=ResponseError)
        self._outgoing: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a TCP connection's transport

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        while self.waiting and (reply := self._reader.gets()) is not False:
            _, target = self.waiting[0]
            if isinstance(target, _Batch):
                target.replies.append(_error(reply) if isinstance(reply, ResponseError) else reply)
                target.remaining -= 1
                if target.remaining == 0:
                    self.waiting.popleft()
                    if not target.future.done():
                        target.future.set_result(target.replies)
                continue
            self.waiting.popleft()
            if target.done():
                continue
            if isinstance(reply, ResponseError):
                target.set_exception(_error(reply))
            else:
                target.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.fail(
            RedisConnectionError(f"connection to Redis lost: {exc or 'closed by the server'}")
        )

    def fail(self, error: Exception) -> None:
        while self.waiting:
            _, target = self.waiting.popleft()
            future = target.future if isinstance(target, _Batch) else target
            if not future.done():
                future.set_exception(error)

    def send(self, command: bytes, timeout_s: float) -> asyncio.Future[Any]:
        future = self._loop().create_future()
        self._queue(command, future, timeout_s)
        return future

    def send_many(self, commands: list[bytes], timeout_s: float) -> asyncio.Future[list[Any]]:
        future: asyncio.Future[list[Any]] = self._loop().create_future()
        if not commands:
            future.set_result([])
            return future
        self._queue(b"".join(commands), _Batch(future, len(commands)), timeout_s)
        return future

    def _loop(self) -> asyncio.AbstractEventLoop:
        if self.transport is None:
            raise RedisConnectionError("the connection to Redis is closed")
        return asyncio.get_running_loop()

    def _queue(
        self, command: bytes, target: asyncio.Future[Any] | _Batch, timeout_s: float
    ) -> None:
        self.waiting.append((time.monotonic() + timeout_s, target))
        # The commands of one turn of the event loop leave in one write (one system call).
        if not self._outgoing:
            asyncio.get_running_loop().call_soon(self._flush)
        self._outgoing.append(command)

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

    async def call_many(self, commands: list[tuple[Arg, ...]]) -> list[Any]:
        """The replies to `commands`, sent together; a command's error is its reply's value
        (an exception instance), not raised. Losing the connection or a timeout raises."""
        connection = await self._connected()
        return await connection.send_many([pack(c) for c in commands], self._timeout_s)

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
