"""Calls to the replicas over asyncio Protocols: HTTP/1.1 keep-alive parsed by httptools.

The response body is handed to a sink from the socket's own callback (`data_received`), so a
token event costs one parse and one write, not a coroutine wake-up and a stream reader each.
What the sink does with it is gateway.proxy's business. Connections are kept per replica and
reused; an idle one is dropped before a replica's own keep-alive timer would close it under us
(uvicorn, which vLLM runs on, closes after 5 s).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections import defaultdict
from collections.abc import Callable
from urllib.parse import urlsplit

import httptools

IDLE_S = 4.0  # under vLLM's (uvicorn's) 5 s keep-alive timeout
MAX_IDLE_PER_HOST = 1024  # kept connections a replica may hold idle for us (one fd each)
MAX_ERROR_BODY = 64 * 1024  # a refusal's body is kept up to this, for the client

Sink = Callable[[bytes], None]


class UpstreamFailed(Exception):
    """The replica could not be reached or failed before sending anything: retry elsewhere."""


class UpstreamCutOff(Exception):
    """The replica's stream broke off before its end (it died, or dropped the connection)."""


class Late(Exception):
    """A deadline of the request passed while waiting on the replica."""


class Exchange:
    """One request and its response on one connection.

    `headers` resolves with the status; the body then goes to the sink set by `set_sink`
    (kept in a buffer until then); `done` resolves at the response's end or fails with
    UpstreamCutOff when the connection is lost first.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.status = 0
        self.headers: asyncio.Future[int] = loop.create_future()
        self.done: asyncio.Future[None] = loop.create_future()
        self.received = False  # any byte of the response
        self.complete = False  # the whole response was read
        self._sink: Sink | None = None
        self._early = bytearray()

    def body(self, data: bytes) -> None:
        if self._sink is not None:
            self._sink(data)
        elif self.status < 400 or len(self._early) < MAX_ERROR_BODY:
            # A stream's first bytes (one read can bring a lot of them before the relay sets
            # its sink, a turn of the loop later) are kept whole; a refusal's only in part.
            self._early += data

    def set_sink(self, sink: Sink) -> None:
        self._sink = sink
        if self._early:
            early, self._early = bytes(self._early), bytearray()
            sink(early)

    def buffered(self) -> bytes:
        return bytes(self._early)[:MAX_ERROR_BODY]

    def fail(self, error: Exception) -> None:
        for future in (self.headers, self.done):
            if not future.done():
                future.set_exception(error)
                # Retrieved by whoever awaits it; unawaited (the caller gave up) is not an error.
                future.exception()


class UpstreamConnection(asyncio.Protocol):
    def __init__(self, pool: Upstream, key: tuple[str, int]) -> None:
        self.pool = pool
        self.key = key
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.exchange: Exchange | None = None
        self.keep_alive = True
        self.framed = False  # the response has a length or chunks (else it ends at EOF)
        self.idle_since = 0.0
        self.reused = False

    # --- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a TCP connection's

    def data_received(self, data: bytes) -> None:
        exchange = self.exchange
        if exchange is None:
            self.close()  # bytes nobody asked for: this connection cannot be trusted
            return
        exchange.received = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.keep_alive = False
            error = f"an HTTP response that cannot be parsed ({exc})"
            started = exchange.headers.done()
            exchange.fail(UpstreamCutOff(error) if started else UpstreamFailed(error))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.keep_alive = False
        self.pool.forget(self)
        exchange, self.exchange = self.exchange, None
        if exchange is None:
            return
        if exchange.headers.done() and not self.framed and exc is None:
            exchange.complete = True  # a body without a length ends with the connection
            if not exchange.done.done():
                exchange.done.set_result(None)
        elif exchange.headers.done():
            exchange.fail(UpstreamCutOff(f"the connection was lost ({exc or 'closed'})"))
        else:
            exchange.fail(UpstreamFailed(f"the connection was lost ({exc or 'closed'})"))

    def pause_writing(self) -> None:
        """A request body larger than the socket's buffer: asyncio keeps it, nothing to do."""

    def resume_writing(self) -> None:
        """See pause_writing."""

    # --- httptools callbacks ------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in (b"content-length", b"transfer-encoding"):
            self.framed = True

    def on_headers_complete(self) -> None:
        exchange = self.exchange
        if exchange is None:
            return
        self.keep_alive = self.parser.should_keep_alive()
        exchange.status = self.parser.get_status_code()
        if not exchange.headers.done():
            exchange.headers.set_result(exchange.status)

    def on_body(self, body: bytes) -> None:
        if self.exchange is not None:
            self.exchange.body(body)

    def on_message_complete(self) -> None:
        exchange, self.exchange = self.exchange, None
        if exchange is None:
            return
        exchange.complete = True
        if not exchange.done.done():
            exchange.done.set_result(None)
        if self.keep_alive:
            self.pool.put_back(self)
        else:
            self.close()

    # --- ours ---------------------------------------------------------------------------------

    def send(self, exchange: Exchange, head: bytes, body: bytes) -> None:
        self.exchange = exchange
        self.parser = httptools.HttpResponseParser(self)
        self.framed = False
        if self.transport is not None:
            self.transport.write(head + body)

    def pause_reading(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def close(self) -> None:
        """Closes the socket: a replica mid-answer sees the disconnect and aborts the request."""
        self.keep_alive = False
        if self.transport is not None:
            self.transport.close()


class Response:
    """A replica's answer as it arrives: its exchange and the connection carrying it."""

    def __init__(self, connection: UpstreamConnection, exchange: Exchange) -> None:
        self.connection = connection
        self.exchange = exchange

    @property
    def status(self) -> int:
        return self.exchange.status

    async def read_body(self) -> bytes:
        """The whole (error) body, up to MAX_ERROR_BODY."""
        await self.exchange.done
        return self.exchange.buffered()

    def finish(self) -> None:
        """After a complete response: the connection was put back already; an unfinished one
        (the caller gave up: client gone, timeout, a cut stream) is closed."""
        if not self.exchange.complete:
            self.exchange.fail(UpstreamCutOff("abandoned"))
            self.connection.close()


class Upstream:
    """Keep-alive connections to the replicas, a pool per host and port."""

    def __init__(self, *, connect_timeout_s: float) -> None:
        self._connect_timeout_s = connect_timeout_s
        self._idle: defaultdict[tuple[str, int], list[UpstreamConnection]] = defaultdict(list)

    async def close(self) -> None:
        for connections in list(self._idle.values()):
            for connection in list(connections):
                connection.close()
        self._idle.clear()

    def put_back(self, connection: UpstreamConnection) -> None:
        idle = self._idle[connection.key]
        if len(idle) >= MAX_IDLE_PER_HOST:
            connection.close()
            return
        connection.idle_since = time.monotonic()
        connection.reused = True
        idle.append(connection)

    def forget(self, connection: UpstreamConnection) -> None:
        idle = self._idle.get(connection.key)
        if idle and connection in idle:
            idle.remove(connection)

    def _take_idle(self, key: tuple[str, int]) -> UpstreamConnection | None:
        idle = self._idle.get(key)
        now = time.monotonic()
        while idle:
            connection = idle.pop()  # the most recently used: the least likely to be timed out
            if now - connection.idle_since < IDLE_S and connection.keep_alive:
                return connection
            connection.close()
        return None

    async def _connect(self, key: tuple[str, int], deadline: float) -> UpstreamConnection:
        loop = asyncio.get_running_loop()
        connect_by = loop.time() + self._connect_timeout_s
        try:
            async with asyncio.timeout_at(min(connect_by, deadline)):
                _, protocol = await loop.create_connection(
                    lambda: UpstreamConnection(self, key), key[0], key[1]
                )
        except TimeoutError:
            if connect_by > deadline:
                raise Late() from None
            raise UpstreamFailed(f"no connection within {self._connect_timeout_s:g} s") from None
        except OSError as exc:
            raise UpstreamFailed(f"{type(exc).__name__}: {exc}") from exc
        return protocol

    async def open(self, url: str, body: bytes, *, deadline: float) -> Response:
        """Sends the request and waits for the status line and headers.

        Raises UpstreamFailed when the replica is unreachable or answers 5xx (the caller may try
        another), Late past `deadline` (event-loop time: the request's first-token deadline). A
        kept connection that the replica closed as it was reused is replaced once by a new one.
        """
        host, port, head = _request_head(url, len(body))
        loop = asyncio.get_running_loop()
        for _ in range(2):
            connection = self._take_idle((host, port)) or await self._connect(
                (host, port), deadline
            )
            exchange = Exchange(loop)
            # A timer, not asyncio.timeout: this is every request's path, and a timer costs less.
            timer = loop.call_at(deadline, exchange.fail, Late())
            connection.send(exchange, head, body)
            try:
                status = await exchange.headers
            except UpstreamFailed:
                connection.close()
                if connection.reused and not exchange.received:
                    continue  # closed by the replica while idle; our request never ran
                raise
            except BaseException:
                connection.close()
                raise
            finally:
                timer.cancel()
            response = Response(connection, exchange)
            if status >= 500:
                timer = loop.call_at(deadline, exchange.fail, Late())
                try:
                    detail = (await response.read_body())[:200]
                except UpstreamCutOff:
                    detail = b""
                finally:
                    timer.cancel()
                    response.finish()
                raise UpstreamFailed(f"HTTP {status}: {detail!r}")
            return response
        raise UpstreamFailed("kept connections closed under every attempt")


def _request_head(url: str, length: int) -> tuple[str, int, bytes]:
    host, port, head = _target(url)
    return host, port, head + b"content-length: %d\r\n\r\n" % length


@functools.lru_cache(maxsize=1024)
def _target(url: str) -> tuple[str, int, bytes]:
    parts = urlsplit(url)
    head = (
        f"POST {parts.path} HTTP/1.1\r\nhost: {parts.netloc}\r\ncontent-type: application/json\r\n"
    )
    return parts.hostname or "127.0.0.1", parts.port or 80, head.encode("latin-1")
