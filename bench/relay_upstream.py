"""The relay bench's stub upstream: an OpenAI-style streaming endpoint that costs next to nothing.

    .venv/bin/python bench/relay_upstream.py --port PORT --mode burst|paced

It answers POST /v1/chat/completions (and /v1/completions) with a server-sent event stream,
`transfer-encoding: chunked`, one HTTP chunk per event: TOKENS content events, a finish event
(finish_reason "length"), a usage event (`"choices": []`) and `data: [DONE]`, whatever the request
asked (stream or not, max_tokens): the bench only streams, and the gateway always asks upstream for
a stream with usage. GET /health and GET /v1/models answer 200 for the proxies' checks.

  burst  the whole stream in one write, as soon as the request is read: what is measured is the
         relay's cost per stream, with nothing to wait for
  paced  headers at once, the first token after --first-ms, then one every --step-ms, like a GPU
         decoding; the finish, usage and [DONE] events go with the last token

Why so bare (asyncio Protocol on uvloop, httptools' parser, the events prebuilt per model with only
the id filled in per request): the stub shares a core with the load generator, and neither may be
what limits the proxy under test.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import time
from collections import deque
from typing import Literal, cast

import httptools
import orjson
import uvloop

TOKENS = 32
PROMPT_TOKENS = 16  # reported in the usage event; the bench's prompt is about this long
CONTENT_TEXT = "tok"  # the load generator counts the events by this text, quotes included
# Where each response's id goes in the prebuilt events: as long as every id (ids are fixed width),
# so filling it in keeps the chunk sizes right.
ID_MARK = b"chatcmpl-" + b"#" * 16

Mode = Literal["burst", "paced"]


def chunk(data: bytes) -> bytes:
    """One HTTP/1.1 chunk."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def event(payload: dict[str, object]) -> bytes:
    return chunk(b"data: " + orjson.dumps(payload) + b"\n\n")


def stream_parts(model: str, created: int) -> tuple[list[bytes], bytes]:
    """The content events' chunks and the tail (finish, usage, [DONE], the last chunk), each with
    ID_MARK where the response id goes."""
    base = {
        "id": ID_MARK.decode(),
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
    }

    def choice(delta: dict[str, str], finish: str | None) -> dict[str, object]:
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}

    tokens = [event({**base, "choices": [choice({"content": CONTENT_TEXT}, None)]})] * TOKENS
    usage = {
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": TOKENS,
        "total_tokens": PROMPT_TOKENS + TOKENS,
    }
    tail = (
        event({**base, "choices": [choice({}, "length")]})
        + event({**base, "choices": [], "usage": usage})
        + chunk(b"data: [DONE]\n\n")
        + b"0\r\n\r\n"
    )
    return tokens, tail


HEADERS = (
    b"HTTP/1.1 200 OK\r\n"
    b"content-type: text/event-stream; charset=utf-8\r\n"
    b"cache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n"
)
CLOSE = b"connection: close\r\n\r\n"
KEEP = b"\r\n"


def plain(status: bytes, body: bytes, keep_alive: bool) -> bytes:
    return b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s%s" % (
        status,
        len(body),
        KEEP if keep_alive else CLOSE,
        body,
    )


class Stub:
    """What every connection shares: the mode, the prebuilt events per model, the id counter."""

    def __init__(self, mode: Mode, first_s: float, step_s: float) -> None:
        self.mode = mode
        self.first_s = first_s
        self.step_s = step_s
        self.created = int(time.time())
        self.ids = itertools.count(1)
        self._parts: dict[str, tuple[list[bytes], bytes]] = {}
        self._burst: dict[str, list[bytes]] = {}  # the whole body split at ID_MARK

    def parts(self, model: str) -> tuple[list[bytes], bytes]:
        found = self._parts.get(model)
        if found is None:
            found = self._parts[model] = stream_parts(model, self.created)
        return found

    def burst_body(self, model: str, response_id: bytes) -> bytes:
        pieces = self._burst.get(model)
        if pieces is None:
            tokens, tail = self.parts(model)
            pieces = self._burst[model] = b"".join([*tokens, tail]).split(ID_MARK)
        return response_id.join(pieces)

    def next_id(self) -> bytes:
        return b"chatcmpl-%016x" % next(self.ids)


class Request:
    __slots__ = ("body", "keep_alive", "method", "path")

    def __init__(self, method: bytes, path: bytes, body: bytes, keep_alive: bool) -> None:
        self.method = method
        self.path = path
        self.body = body
        self.keep_alive = keep_alive


class Connection(asyncio.Protocol):
    """One client connection: requests answered in order, one at a time (a paced stream holds
    the next request back until it ends)."""

    def __init__(self, stub: Stub) -> None:
        self.stub = stub
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.body: list[bytes] = []
        self.pending: deque[Request] = deque()
        self.busy = False
        self.timer: asyncio.TimerHandle | None = None

    # --- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have its methods.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self._write(plain(b"400 Bad Request", b'{"error":"bad request"}', False))
            self._close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.transport = None

    # --- httptools callbacks ------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self.url = b""
        self.body.clear()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        path = self.url.split(b"?", 1)[0]
        request = Request(
            self.parser.get_method(), path, b"".join(self.body), self.parser.should_keep_alive()
        )
        self.pending.append(request)
        if not self.busy:
            self._next_request()

    # --- answering ----------------------------------------------------------------------------

    def _next_request(self) -> None:
        while self.pending and not self.busy and self.transport is not None:
            self._answer(self.pending.popleft())

    def _answer(self, request: Request) -> None:
        if request.method == b"POST" and request.path in (
            b"/v1/chat/completions",
            b"/v1/completions",
        ):
            try:
                model = str(orjson.loads(request.body).get("model") or "stub")
            except (orjson.JSONDecodeError, AttributeError):
                self._write(plain(b"400 Bad Request", b'{"error":"bad json"}', request.keep_alive))
                self._done(request)
                return
            self._stream(model, request)
        elif request.method == b"GET" and request.path in (b"/health", b"/v1/models"):
            body = b'{"object":"list","data":[]}' if request.path == b"/v1/models" else b"{}"
            self._write(plain(b"200 OK", body, request.keep_alive))
            self._done(request)
        else:
            self._write(plain(b"404 Not Found", b'{"error":"not found"}', request.keep_alive))
            self._done(request)

    def _stream(self, model: str, request: Request) -> None:
        stub = self.stub
        head = HEADERS + (KEEP if request.keep_alive else CLOSE)
        response_id = stub.next_id()
        if stub.mode == "burst":
            self._write(head + stub.burst_body(model, response_id))
            self._done(request)
            return
        self.busy = True
        self._write(head)
        tokens, tail = stub.parts(model)
        loop = asyncio.get_running_loop()
        sent = 0

        def step() -> None:
            # One token per step; the finish, usage and [DONE] ride with the last one.
            nonlocal sent
            self.timer = None
            data = tokens[sent].replace(ID_MARK, response_id)
            sent += 1
            if sent == len(tokens):
                self._write(data + tail.replace(ID_MARK, response_id))
                self.busy = False
                self._done(request)
                self._next_request()
                return
            self._write(data)
            if self.transport is not None:
                self.timer = loop.call_later(stub.step_s, step)

        self.timer = loop.call_later(stub.first_s, step)

    def _done(self, request: Request) -> None:
        if not request.keep_alive:
            self._close()

    def _write(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)

    def _close(self) -> None:
        if self.transport is not None:
            self.transport.close()
            self.transport = None


async def serve(port: int, stub: Stub) -> None:
    # No signal handling: SIGTERM's default (exit at once) is what the bench wants, with nothing
    # to flush, and it does not wait for open connections as a graceful close would.
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: Connection(stub), "127.0.0.1", port, backlog=4096, reuse_address=True
    )
    await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description="the relay bench's stub upstream")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", choices=("burst", "paced"), default="burst")
    parser.add_argument("--first-ms", type=float, default=20.0, help="paced: time to first token")
    parser.add_argument("--step-ms", type=float, default=20.0, help="paced: time between tokens")
    args = parser.parse_args()
    mode: Mode = "paced" if args.mode == "paced" else "burst"
    stub = Stub(mode, args.first_ms / 1000, args.step_ms / 1000)
    print(f"stub upstream on 127.0.0.1:{args.port}, {mode}, pid {os.getpid()}", flush=True)
    uvloop.run(serve(args.port, stub))


if __name__ == "__main__":
    main()
