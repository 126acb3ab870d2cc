"""The relay's reading of a replica's events: what it counts, keeps and forwards, byte by byte,
however the stream is cut into reads, with text built to look like the keys it looks for."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import orjson

from gateway.proxy import Progress, StreamRelay
from gateway.upstream import MAX_ERROR_BODY, Exchange, Upstream, UpstreamConnection

HOSTILE = [
    "plain",
    '"finish_reason":null',
    '","finish_reason":"stop"}',
    '"tool_calls":[]',
    '"usage":{"completion_tokens":1}',
    '"error"',
    "error",
    '\\"content\\":\\"\\"',
    '"content":""',
    'back\\slash"quote',
    '"text":"',
    "\n\ndata: [DONE]\n\n",
    '{"model":"served"}',
]


def chunk(delta: dict[str, Any], *, finish: str | None = None, **extra: Any) -> bytes:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    body = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
            "model": "served", "choices": [choice], **extra}  # fmt: skip
    return orjson.dumps(body)


class Line:
    """The client's side of the relay: what it was sent."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.started = False
        self.paused = False
        self.on_writable = None

    def start_stream(self, headers: object, data: bytes) -> None:
        self.started = True
        self.sent.append(data)

    def write(self, data: bytes) -> None:
        self.sent.append(data)


def relay_all(stream: bytes, pieces: list[int], *, client_streams: bool) -> tuple[Progress, bytes]:
    progress, line = Progress(), Line()
    relay = StreamRelay(
        None,  # type: ignore[arg-type]  # never paused, so the replica's socket is not needed
        progress,
        line,  # type: ignore[arg-type]
        client_streams=client_streams,
        client_wants_usage=False,
        served_model="served",
        public_model="public",
    )
    start = 0
    for size in pieces:
        relay.feed(stream[start : start + size])
        start += size
    relay.feed(stream[start:])
    return progress, b"".join(line.sent)


def test_a_stream_split_anywhere_is_measured_and_forwarded_as_when_parsed_whole() -> None:
    rng = random.Random(7)  # noqa: S311 -- reproducible cuts, not secrets
    texts = [rng.choice(HOSTILE) for _ in range(40)]
    stream = b"".join(
        b"data: " + e + b"\n\n"
        for e in [
            chunk({"role": "assistant", "content": ""}),
            *(chunk({"content": t}) for t in texts),
            chunk({"tool_calls": [{"index": 0, "id": "t1", "function": {"name": "f",
                                                                         "arguments": "{}"}}]}),
            chunk({}, finish="tool_calls"),
            orjson.dumps({"id": "chatcmpl-1", "model": "served", "choices": [],
                          "usage": {"prompt_tokens": 3, "completion_tokens": 42}}),
        ]
    ) + b"data: [DONE]\n\n"  # fmt: skip
    whole, sent = relay_all(stream, [], client_streams=True)
    assert whole.token_events == 41  # every text token and the tool call
    assert (whole.finish_reason, whole.saw_done) == ("tool_calls", True)
    assert whole.usage == {"prompt_tokens": 3, "completion_tokens": 42}
    assert whole.tool_calls == {0: {"id": "t1", "name": "f", "arguments": "{}"}}
    forwarded = [orjson.loads(e[6:]) for e in sent.split(b"\n\n") if e.startswith(b"data: {")]
    assert {e["model"] for e in forwarded} == {"public"}
    assert [e["choices"][0]["delta"].get("content") for e in forwarded[1:41]] == texts
    assert b'"usage"' not in sent  # the client did not ask for it

    for _ in range(50):
        cuts = [rng.randint(1, 40) for _ in range(rng.randint(1, 200))]
        split, split_sent = relay_all(stream, cuts, client_streams=True)
        assert split_sent == sent
        assert (split.token_events, split.finish_reason, split.usage, split.tool_calls) == (
            whole.token_events, whole.finish_reason, whole.usage, whole.tool_calls,
        )  # fmt: skip

    # A client that does not stream gets the text assembled from the same events.
    kept, nothing = relay_all(stream, [17, 5], client_streams=False)
    assert nothing == b""
    assert "".join(kept.content) == "".join(texts)
    assert kept.token_events == whole.token_events


async def test_a_streams_first_read_is_kept_whole_until_the_relay_takes_it() -> None:
    # One read can bring the headers and much of the stream before the relay, a turn of the
    # loop later, sets its sink; none of it may be lost, however large.
    loop = asyncio.get_running_loop()
    connection = UpstreamConnection(Upstream(connect_timeout_s=1.0), ("127.0.0.1", 9))
    exchange = Exchange(loop)
    events = [b"data: " + b"x" * 50_000 + b"\n\n" for _ in range(6)]
    chunked = b"".join(b"%x\r\n%b\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"
    connection.send(exchange, b"", b"")
    head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
    connection.data_received(head + chunked[:200_000])  # the headers and four events
    assert await exchange.headers == 200
    taken: list[bytes] = []
    exchange.set_sink(taken.append)
    connection.data_received(chunked[200_000:])
    assert b"".join(taken) == b"".join(events)
    assert exchange.complete

    # A refusal's body is kept only in part.
    refused = Exchange(loop)
    connection.send(refused, b"", b"")
    connection.data_received(
        b"HTTP/1.1 400 Bad Request\r\ncontent-length: 300000\r\n\r\n" + b"y" * 300_000
    )
    assert len(refused.buffered()) == MAX_ERROR_BODY
