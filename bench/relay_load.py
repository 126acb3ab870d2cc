"""The relay bench's load generator: N closed-loop streaming clients, each on its own connection.

    .venv/bin/python bench/relay_load.py --url http://127.0.0.1:PORT/v1/chat/completions \
        --model MODEL [--header "authorization: Bearer KEY"] [--concurrency 50] \
        [--warmup 2] [--window 15]

Each client opens a keep-alive connection and, until the end, POSTs a streaming chat request
(max_tokens 32) and reads the answer to the end of its chunked body, then sends the next one. For
each stream that ends inside the measured window it records the time to first token (from writing
the request to the arrival of the first bytes carrying a content event) and the total (to the end
of the body). A stream counts as an error unless it is a 200 with TOKENS content events and ends
with `data: [DONE]`; the check is a byte count of the token text, not a JSON parse, so that this
process stays cheap next to what it measures.

Output, on stdout, one line each: `window-start` and `window-end` at those moments (the driver
reads the processes' CPU time then), and a JSON object with the samples and counts (or that in
the file --out names). After the
window each client finishes the stream it is reading (not a new one), so the proxy under test is
idle when this process exits and the next run starts clean.

Why not aiohttp: at thousands of streams a second its per-chunk work would make the client the
bottleneck on the core it shares with the stub upstream. A Protocol with httptools' parser (the
parser uvicorn uses) costs a fraction of that.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import httptools
import orjson
import uvloop

TOKENS = 32  # content events per stream; the stub's relay_upstream.TOKENS
TOKEN = b'"tok"'  # the stub's token text, as it appears in every content event
DONE = b"data: [DONE]\n\n"
TAIL = 16  # bytes of the body kept to check its end and to count tokens split across reads
PROMPT = "Relay this stream, please."
RECONNECT_S = 0.01  # after a failure, so that a refusing target is not hammered in a hot loop


class Tally:
    """What every client reports to: whether the window is open, and what ended inside it."""

    def __init__(self) -> None:
        self.measuring = False
        self.stopping = False
        self.ttft_ms: list[float] = []
        self.total_ms: list[float] = []
        self.errors = 0
        self.error_examples: list[str] = []
        self.warmup_streams = 0

    def done(self, ttft: float, total: float) -> None:
        if self.measuring:
            self.ttft_ms.append(round(ttft * 1000, 3))
            self.total_ms.append(round(total * 1000, 3))
        else:
            self.warmup_streams += 1

    def error(self, why: str) -> None:
        if self.measuring:
            self.errors += 1
            if len(self.error_examples) < 5:
                self.error_examples.append(why)


class Client(asyncio.Protocol):
    """One connection, one stream at a time: request, read to the end, again."""

    def __init__(self, request: bytes, tally: Tally, finished: asyncio.Future[None]) -> None:
        self.request = request
        self.tally = tally
        self.finished = finished  # set when this client stops for good or its connection drops
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.reading = False  # inside a response
        self.status = 0
        self.tokens = 0
        self.tail = b""
        self.sent_at = 0.0
        self.first_at = 0.0

    # --- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have its methods.
        self.transport = cast(asyncio.Transport, transport)
        self._send()

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(f"unparsable response: {exc}")

    def connection_lost(self, exc: Exception | None) -> None:
        if self.reading:
            self.tally.error(f"connection lost mid-stream ({exc or 'closed by the target'})")
        self.transport = None
        if not self.finished.done():
            self.finished.set_result(None)

    # --- httptools callbacks ------------------------------------------------------------------

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        joined = self.tail + body
        # Tokens wholly inside the old tail were counted with the read they came in.
        found = joined.count(TOKEN) - self.tail.count(TOKEN)
        if found and not self.tokens:
            self.first_at = time.perf_counter()
        self.tokens += found
        self.tail = joined[-TAIL:]

    def on_message_complete(self) -> None:
        ended = time.perf_counter()
        self.reading = False
        if self.status != 200:
            self.tally.error(f"HTTP {self.status}: {self.tail!r}")
        elif self.tokens != TOKENS or not self.tail.endswith(DONE):
            self.tally.error(f"{self.tokens} token events, ending {self.tail!r}")
        else:
            self.tally.done(self.first_at - self.sent_at, ended - self.sent_at)
        if self.tally.stopping or not self.parser.should_keep_alive():
            self._close()
        else:
            self._send()

    # --- the loop -----------------------------------------------------------------------------

    def _send(self) -> None:
        if self.transport is None:
            return
        self.reading = True
        self.status = self.tokens = 0
        self.tail = b""
        self.sent_at = time.perf_counter()
        self.transport.write(self.request)

    def _fail(self, why: str) -> None:
        self.tally.error(why)
        self.reading = False
        self._close()

    def _close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def request_bytes(url: str, model: str, headers: list[str]) -> tuple[str, int, bytes]:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    body = orjson.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": TOKENS,
            "stream": True,
        }
    )
    head = [
        f"POST {parts.path or '/'} HTTP/1.1",
        f"host: {host}:{port}",
        "content-type: application/json",
        "accept: text/event-stream",
        f"content-length: {len(body)}",
        *headers,
    ]
    return host, port, ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def client_loop(host: str, port: int, request: bytes, tally: Tally, delay: float) -> None:
    """One of the N clients: a connection at a time, a new one when the target drops it."""
    # Staggered starts: clients that all began together would stay in step (paced streams all
    # last the same) and the window would see their ends in waves.
    await asyncio.sleep(delay)
    loop = asyncio.get_running_loop()
    while not tally.stopping:
        finished: asyncio.Future[None] = loop.create_future()
        try:
            await loop.create_connection(partial(Client, request, tally, finished), host, port)
        except OSError as exc:
            tally.error(f"connect: {exc}")
            await asyncio.sleep(RECONNECT_S)
            continue
        await finished
        if not tally.stopping:
            await asyncio.sleep(RECONNECT_S)


def mark(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    host, port, request = request_bytes(args.url, args.model, args.header)
    tally = Tally()
    spread = min(1.0, args.warmup / 2)  # over about one paced stream, within the warm-up
    clients = [
        asyncio.create_task(client_loop(host, port, request, tally, i * spread / args.concurrency))
        for i in range(args.concurrency)
    ]
    await asyncio.sleep(args.warmup)
    tally.measuring = True
    started = time.perf_counter()
    mark("window-start")
    await asyncio.sleep(args.window)
    tally.measuring = False
    window = time.perf_counter() - started
    mark("window-end")
    tally.stopping = True
    # Each client ends the stream it is reading; a paced stream takes under a second.
    _, late = await asyncio.wait(clients, timeout=args.drain)
    for task in late:
        task.cancel()
    return {
        "window_s": window,
        "completed": len(tally.total_ms),
        "errors": tally.errors,
        "error_examples": tally.error_examples,
        "warmup_streams": tally.warmup_streams,
        "unfinished_clients": len(late),
        "ttft_ms": tally.ttft_ms,
        "total_ms": tally.total_ms,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="the relay bench's closed-loop stream client")
    parser.add_argument("--url", required=True, help="the chat completions URL (http only)")
    parser.add_argument("--model", required=True)
    parser.add_argument("--header", action="append", default=[], help="'name: value', repeatable")
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds before the window")
    parser.add_argument("--window", type=float, default=15.0, help="seconds measured")
    parser.add_argument("--out", type=Path, help="write the result here, not to stdout")
    parser.add_argument("--drain", type=float, default=10.0, help="seconds to end the streams")
    args = parser.parse_args()
    result = orjson.dumps(uvloop.run(run(args))) + b"\n"
    if args.out is not None:
        args.out.write_bytes(result)
        return
    # A write to a pipe may take only part of a large buffer (seen after the loop has run), and
    # sys.stdout.buffer.write then returns the count rather than retrying: write until all is out.
    fd = sys.stdout.fileno()
    os.set_blocking(fd, True)
    view = memoryview(result)
    while view:
        view = view[os.write(fd, view) :]


if __name__ == "__main__":
    main()
