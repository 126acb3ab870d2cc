"""Talking to the replicas: one upstream call, streamed, measured, and cut when the client leaves.

The gateway always asks the replica for a stream with usage, whatever the client asked for. That
way every request is measured the same way (TTFT and TPOT from the token events), the tokens
generated before a client disconnect are known and charged, and a non-streaming answer is
assembled here from the stream.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from gateway.errors import GatewayError

Send = Callable[[dict[str, Any]], Awaitable[None]]


class UpstreamFailed(Exception):
    """The replica could not be reached or failed before sending anything: retry elsewhere."""


class UpstreamCutOff(Exception):
    """The replica's stream broke off before its end (it died, or dropped the connection)."""


@dataclass
class Progress:
    """What has come back from the replica so far (read by the caller even after a cancel)."""

    status: int = 0
    headers_sent: bool = False
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
            now = time.monotonic()
            if self.first_token_at is None:
                self.first_token_at = now
            self.last_token_at = now
            self.token_events += 1
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


class Upstream:
    def __init__(self, *, connect_timeout_s: float) -> None:
        self._connect_timeout_s = connect_timeout_s
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._connect_timeout_s),
                auto_decompress=False,
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def open(self, url: str, body: bytes, *, first_token_by: float) -> aiohttp.ClientResponse:
        """Starts the call; UpstreamFailed when the replica is unreachable or answers 5xx.

        `first_token_by` (event-loop time) is the request's first-token deadline: a replica that
        accepts the connection and never sends its headers is given up on then, not never.
        """
        try:
            async with asyncio.timeout_at(first_token_by):
                response = await self.session.post(
                    url, data=body, headers={"content-type": "application/json"}
                )
        except TimeoutError:
            raise first_token_timeout() from None
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamFailed(f"{type(exc).__name__}: {exc}") from exc
        if response.status >= 500:
            detail = (await response.read())[:200]
            response.release()
            raise UpstreamFailed(f"HTTP {response.status}: {detail!r}")
        return response


async def relay(
    response: aiohttp.ClientResponse,
    progress: Progress,
    *,
    send: Send,
    client_streams: bool,
    client_wants_usage: bool,
    public_model: str,
    first_token_by: float,
) -> None:
    """Reads the replica's event stream to the end, passing events on when the client streams.

    Events are forwarded one by one as they arrive, with the public model name; the usage event
    the gateway asked for is dropped unless the client asked for it too.
    """
    progress.status = response.status
    if response.status >= 400:
        progress.error_body = await response.read()
        return
    buffer = b""
    reader = response.content
    while True:
        try:
            if progress.first_token_at is None:
                async with asyncio.timeout_at(first_token_by):
                    chunk = await reader.readany()
            else:
                chunk = await reader.readany()
        except TimeoutError:
            raise first_token_timeout() from None
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamCutOff(str(exc)) from exc
        if not chunk:
            if not progress.done:
                raise UpstreamCutOff("its stream ended without a finish_reason or [DONE]")
            break
        buffer += chunk
        out: list[bytes] = []
        while True:
            end = buffer.find(b"\n\n")
            if end < 0:
                break
            event, buffer = buffer[:end], buffer[end + 2 :]
            forwarded = _handle_event(
                event, progress, client_streams, client_wants_usage, public_model
            )
            if forwarded is not None:
                out.append(forwarded)
        if out and client_streams:
            if not progress.headers_sent:
                await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
                progress.headers_sent = True
            await send({"type": "http.response.body", "body": b"".join(out), "more_body": True})


def _handle_event(
    event: bytes,
    progress: Progress,
    client_streams: bool,
    client_wants_usage: bool,
    public_model: str,
) -> bytes | None:
    if not event.startswith(b"data: "):
        return None
    data = event[6:]
    if data == b"[DONE]":
        progress.saw_done = True
        return b"data: [DONE]\n\n"
    try:
        payload = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None  # not JSON: nothing we can measure or pass on faithfully
    if not isinstance(payload, dict):
        return None
    if "error" in payload:
        progress.finish_reason = "error"
        return event + b"\n\n"
    progress.response_id = progress.response_id or payload.get("id")
    progress.created = progress.created or payload.get("created")
    choices = payload.get("choices") or []
    for choice in choices:
        progress.record_delta(choice, keep_text=not client_streams)
    usage = payload.get("usage")
    if usage:
        progress.usage = usage
        if not choices and not client_wants_usage:
            return None
    if "model" in payload:
        payload["model"] = public_model
    return b"data: " + orjson.dumps(payload) + b"\n\n"


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
