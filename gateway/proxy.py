"""Talking to the replicas: one upstream call, streamed, measured, and cut when the client leaves.

The gateway always asks the replica for a stream with usage, whatever the client asked for. That
way every request is measured the same way (TTFT and TPOT from the token events), the tokens
generated before a client disconnect are known and charged, and a non-streaming answer is
assembled here from the stream.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.errors import GatewayError
from gateway.server import ClientLine
from gateway.upstream import Late, Response, UpstreamCutOff


@dataclass
class Progress:
    """What has come back from the replica so far (read by the caller even after a cancel)."""

    status: int = 0
    client_left: bool = False
    first_token_at: float | None = None
    last_token_at: float | None = None
    token_events: int = 0
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    response_id: str | None = None
    created: int | None = None
    content: list[str] = field(default_factory=list)
    # Tool calls by index: id, name, arguments (assembled from the deltas).
    tool_calls: dict[int, dict[str, str]] = field(default_factory=dict)
    error_body: bytes | None = None
    saw_done: bool = False  # the stream's closing `data: [DONE]`

    @property
    def done(self) -> bool:
        """Whether the replica finished its answer (a stream cut off before this is an error)."""
        return self.saw_done or self.finish_reason is not None

    def token(self) -> None:
        now = time.monotonic()
        if self.first_token_at is None:
            self.first_token_at = now
        self.last_token_at = now
        self.token_events += 1

    def record_delta(self, choice: dict[str, Any], keep_text: bool) -> None:
        delta = choice.get("delta")
        text = choice.get("text")
        produced = False
        if isinstance(delta, dict):
            piece = delta.get("content")
            if piece:
                produced = True
                if keep_text:
                    self.content.append(piece)
            for call in delta.get("tool_calls") or ():
                produced = True
                slot = self.tool_calls.setdefault(
                    int(call.get("index", 0)), {"id": "", "name": "", "arguments": ""}
                )
                if call.get("id"):
                    slot["id"] = call["id"]
                function = call.get("function") or {}
                if function.get("name"):
                    slot["name"] = function["name"]
                slot["arguments"] += function.get("arguments") or ""
        elif isinstance(text, str) and text:
            produced = True
            if keep_text:
                self.content.append(text)
        if produced:
            self.token()
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]


def first_token_timeout() -> GatewayError:
    return GatewayError(
        504,
        "The model produced no token within the gateway's first-token deadline "
        "(GATEWAY_FIRST_TOKEN_TIMEOUT_S, counted from the first attempt: connect, headers and the "
        "first event).",
        error_type="timeout",
        code="first_token_timeout",
    )


SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
]


class StreamRelay:
    """The replica's event stream, fed from its socket's callback (gateway.upstream).

    Each event is parsed once, for what the gateway measures (tokens, tool calls, the finish,
    usage). When the client streams, the events of one read go to its socket in one write, the
    public model name put in place of the served one in their bytes (an event is re-encoded only
    where the served name is not found there). A client that cannot keep up pauses the reading
    of the replica's socket until it can (TCP then slows the replica, not the gateway's memory).
    """

    def __init__(
        self,
        response: Response,
        progress: Progress,
        line: ClientLine,
        *,
        client_streams: bool,
        client_wants_usage: bool,
        served_model: str,
        public_model: str,
    ) -> None:
        self.response = response
        self.progress = progress
        self.line = line
        self.client_streams = client_streams
        self.client_wants_usage = client_wants_usage
        self.public_model = public_model
        self.served_field = b'"model":' + orjson.dumps(served_model)
        self.public_field = b'"model":' + orjson.dumps(public_model)
        self.rename = served_model != public_model
        self._rest = b""

    def feed(self, data: bytes) -> None:
        buffer = self._rest + data if self._rest else data
        out: list[bytes] = []
        start = 0
        while (end := buffer.find(b"\n\n", start)) >= 0:
            forwarded = self._event(buffer[start : end + 2])
            if forwarded is not None:
                out.append(forwarded)
            start = end + 2
        self._rest = buffer[start:]
        if out and self.client_streams:
            line = self.line
            if line.started:
                line.write(b"".join(out))
            else:
                line.start_stream(SSE_HEADERS, b"".join(out))
            if line.paused:
                self.response.connection.pause_reading()
                line.on_writable = self._client_writable

    def _client_writable(self) -> None:
        self.line.on_writable = None
        self.response.connection.resume_reading()

    def _event(self, event: bytes) -> bytes | None:
        """Measures one event (`event` ends with its blank line); returns what the client gets.

        Parsed whole: orjson reads a token event (~1 µs) faster than any sound set of byte
        searches could tell that it holds nothing but a token.
        """
        if not event.startswith(b"data: "):
            return None
        data = event[6:-2]
        progress = self.progress
        if data == b"[DONE]":
            progress.saw_done = True
            return event
        try:
            payload = orjson.loads(data)
        except orjson.JSONDecodeError:
            return None  # not JSON: nothing we can measure or pass on faithfully
        if not isinstance(payload, dict):
            return None
        if "error" in payload:
            progress.finish_reason = "error"
            return event
        if progress.response_id is None:
            progress.response_id = payload.get("id")
            progress.created = payload.get("created")
        choices = payload.get("choices") or ()
        for choice in choices:
            progress.record_delta(choice, keep_text=not self.client_streams)
        usage = payload.get("usage")
        if usage:
            progress.usage = usage
            if not choices and not self.client_wants_usage:
                return None
        if not self.client_streams:
            return None
        if payload.get("model") is None:
            return event
        return self._renamed(event, data) or _reencoded(payload, self.public_model)

    def _renamed(self, event: bytes, data: bytes) -> bytes | None:
        """The event with the public model name, in its own bytes (None: it must be re-encoded)."""
        if not self.rename:
            return event
        if self.served_field in data:
            return b"data: " + data.replace(self.served_field, self.public_field, 1) + b"\n\n"
        if self.public_field in data:
            return event
        return None


def _reencoded(payload: dict[str, Any], public_model: str) -> bytes:
    payload["model"] = public_model
    return b"data: " + orjson.dumps(payload) + b"\n\n"


class TotalLate(Exception):
    """The request ran past its total deadline."""


async def relay(
    response: Response,
    progress: Progress,
    line: ClientLine,
    *,
    client_streams: bool,
    client_wants_usage: bool,
    served_model: str,
    public_model: str,
    first_token_by: float,
    total_by: float,
) -> None:
    """Reads the replica's event stream to the end, passing events on when the client streams.

    The usage event the gateway asked for is dropped unless the client asked for it too. Raises
    Late when no token came by `first_token_by`, TotalLate past `total_by` (event-loop times),
    UpstreamCutOff when the stream broke off.
    """
    progress.status = response.status
    exchange = response.exchange
    loop = asyncio.get_running_loop()

    # One timer for both deadlines (this is every request's path; a timer costs less than
    # asyncio.timeout): at the first-token deadline it fails the exchange or moves to the total.
    # A refusal's body is the answer, due by the first-token deadline too.
    timer: list[asyncio.TimerHandle] = []

    def first_token_due() -> None:
        if progress.first_token_at is None:
            exchange.fail(Late())
        else:
            timer[0] = loop.call_at(total_by, exchange.fail, TotalLate())

    timer.append(loop.call_at(min(first_token_by, total_by), first_token_due))
    try:
        if response.status >= 400:
            progress.error_body = await response.read_body()
            return
        stream = StreamRelay(
            response,
            progress,
            line,
            client_streams=client_streams,
            client_wants_usage=client_wants_usage,
            served_model=served_model,
            public_model=public_model,
        )
        exchange.set_sink(stream.feed)
        await exchange.done
    finally:
        timer[0].cancel()
    if not progress.done:
        raise UpstreamCutOff("its stream ended without a finish_reason or [DONE]")


def assemble(progress: Progress, *, chat: bool, public_model: str) -> dict[str, Any]:
    """The non-streaming answer, built from what the stream carried."""
    text = "".join(progress.content)
    usage = progress.usage or {}
    if chat:
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if progress.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
                for _, call in sorted(progress.tool_calls.items())
            ]
        else:
            message["content"] = text
        choice: dict[str, Any] = {"index": 0, "message": message, "logprobs": None}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None}
        obj = "text_completion"
    choice["finish_reason"] = progress.finish_reason
    return {
        "id": progress.response_id,
        "object": obj,
        "created": progress.created or int(time.time()),
        "model": public_model,
        "choices": [choice],
        "usage": usage,
    }
