"""The gateway's HTTP protocol: uvicorn's httptools protocol with two guards for slow clients.

uvicorn holds a connection that never sends a request, or sends its headers a byte at a time,
for as long as the client likes (its keep-alive timer starts only after a first response). A
flood of such sockets would exhaust the process's file descriptors and starve the loop. Here:

- a connection past `GATEWAY_MAX_CONNECTIONS` open ones is answered 503 and closed at once;
- a request's headers must be complete within `GATEWAY_HEADER_TIMEOUT_S` of the connection
  opening or of the request's first byte, or the client gets 408 and the connection is closed.

The body has its own deadline in the application (`GATEWAY_BODY_TIMEOUT_S`, gateway.app).

Each request's scope also carries a `ClientLine` (extension `tollgate.client`): the client's
socket, so that a stream relayed from the replica's socket callbacks (gateway.proxy) is written
without an ASGI message and a coroutine step per event, and so that the relay hears of a client
that leaves, or cannot keep up, from the transport itself. This subclasses uvicorn's protocol
(pinned in pyproject.toml); besides its parser callbacks and the transport, ClientLine sets the
three fields of uvicorn's request cycle that say a chunked response has started.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import cache

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from gateway.settings import Settings


def _closing_response(status: str, message: str, error_type: str, code: str) -> bytes:
    """A whole HTTP response in the OpenAI error envelope, sent before closing the socket."""
    body = orjson.dumps({"error": {"message": message, "type": error_type, "code": code}})
    head = (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\nconnection: close\r\n"
        f"retry-after: 1\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


BUSY = _closing_response(
    "503 Service Unavailable", "Too many open connections; retry shortly.", "server_error", "busy"
)
SLOW = _closing_response(
    "408 Request Timeout",
    "The request headers did not arrive in time.",
    "invalid_request_error",
    "request_timeout",
)


@cache
def _settings() -> Settings:
    return Settings.from_env()


CLIENT_LINE = "tollgate.client"


class ClientLine:
    """One request's client socket, for a streamed answer written from socket callbacks.

    `on_gone` is called once if the client disconnects before the response is complete,
    `on_writable` whenever its socket takes writes again after `paused`.
    """

    __slots__ = ("_cycle", "on_gone", "on_writable")

    def __init__(self, cycle: RequestResponseCycle) -> None:
        self._cycle = cycle
        self.on_gone: Callable[[], None] | None = None
        self.on_writable: Callable[[], None] | None = None

    @property
    def gone(self) -> bool:
        return self._cycle.disconnected or self._cycle.transport.is_closing()

    @property
    def paused(self) -> bool:
        return self._cycle.flow.write_paused

    @property
    def started(self) -> bool:
        return self._cycle.response_started

    def start_stream(self, headers: list[tuple[bytes, bytes]], data: bytes) -> None:
        """Sends a 200 status line and headers for a chunked body, with its first chunk in the
        same write. The application ends the body with an ASGI `http.response.body` message,
        which uvicorn frames as the last chunk."""
        cycle = self._cycle
        lines = [b"HTTP/1.1 200 OK\r\n"]
        lines.extend(b"%s: %s\r\n" % pair for pair in (*cycle.default_headers, *headers))
        if not cycle.keep_alive:
            lines.append(b"connection: close\r\n")
        lines.append(b"transfer-encoding: chunked\r\n\r\n")
        if data:
            lines.append(_chunk(data))
        cycle.response_started = True
        cycle.chunked_encoding = True
        cycle.waiting_for_100_continue = False
        if not self.gone:
            cycle.transport.write(b"".join(lines))

    def write(self, data: bytes) -> None:
        """One chunk of the body (after start_stream)."""
        if data and not self.gone:
            self._cycle.transport.write(_chunk(data))

    def _lost(self) -> None:
        if not self._cycle.response_complete and self.on_gone is not None:
            on_gone, self.on_gone = self.on_gone, None
            on_gone()


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    _header_timer: asyncio.TimerHandle | None = None
    _lines: list[ClientLine] | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > _settings().max_connections:
            transport.write(BUSY)
            transport.close()
            return
        self._start_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_header_timer()
        super().connection_lost(exc)
        for line in self._lines or ():
            line._lost()
        self._lines = None

    def resume_writing(self) -> None:
        super().resume_writing()
        for line in self._lines or ():
            if line.on_writable is not None:
                line.on_writable()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._start_header_timer()

    def on_headers_complete(self) -> None:
        self._stop_header_timer()
        super().on_headers_complete()
        if self.cycle is None or self.cycle.scope is not self.scope:
            return  # an upgrade request: no cycle of its own
        line = ClientLine(self.cycle)
        extensions: dict[str, object] = self.scope.setdefault("extensions", {})  # type: ignore[assignment]
        extensions[CLIENT_LINE] = line
        # The lines of this connection's requests still being answered (pipelining aside, one).
        self._lines = [old for old in self._lines or () if not old._cycle.response_complete]
        self._lines.append(line)

    def _start_header_timer(self) -> None:
        self._stop_header_timer()
        self._header_timer = self.loop.call_later(
            _settings().header_timeout_s, self._headers_too_slow
        )

    def _stop_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.write(SLOW)
            self.transport.close()
