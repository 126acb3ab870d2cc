"""The gateway's HTTP protocol: uvicorn's httptools protocol with two guards for slow clients.

uvicorn holds a connection that never sends a request, or sends its headers a byte at a time,
for as long as the client likes (its keep-alive timer starts only after a first response). A
flood of such sockets would exhaust the process's file descriptors and starve the loop. Here:

- a connection past `GATEWAY_MAX_CONNECTIONS` open ones is answered 503 and closed at once;
- a request's headers must be complete within `GATEWAY_HEADER_TIMEOUT_S` of the connection
  opening or of the request's first byte, or the client gets 408 and the connection is closed.

The body has its own deadline in the application (`GATEWAY_BODY_TIMEOUT_S`, gateway.app). This
subclasses uvicorn's protocol (pinned in pyproject.toml) and calls only its documented parser
callbacks and the transport.
"""

from __future__ import annotations

import asyncio
from functools import cache

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

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


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    _header_timer: asyncio.TimerHandle | None = None

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

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._start_header_timer()

    def on_headers_complete(self) -> None:
        self._stop_header_timer()
        super().on_headers_complete()

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
