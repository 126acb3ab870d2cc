"""The ASGI plumbing a replica's routes and its completions share: the message types, vLLM's error
envelope, reading a request body and answering one."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

JSON_HEADERS = [(b"content-type", b"application/json")]
MAX_BODY_BYTES = 16 * 1024 * 1024


class ApiError(Exception):
    """An error answered in vLLM's envelope: {"error": {"message", "type", "param", "code"}}."""

    def __init__(
        self,
        status: int,
        message: str,
        error_type: str = "BadRequestError",
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.param = param

    def body(self) -> bytes:
        error = {
            "message": str(self),
            "type": self.error_type,
            "param": self.param,
            "code": self.status,
        }
        return orjson.dumps({"error": error})


async def respond(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def respond_json(send: Send, status: int, payload: Any) -> None:
    await respond(send, status, orjson.dumps(payload), JSON_HEADERS)


async def read_body(receive: Receive) -> bytes:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ConnectionAbortedError
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise ApiError(413, "Request body too large.")
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


def parse_json(body: bytes) -> dict[str, Any]:
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"The request body is not valid JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    return payload


def int_field(payload: dict[str, Any], name: str, *, minimum: int) -> int | None:
    value = payload.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ApiError(400, f"{name} must be an integer >= {minimum}, got {value!r}.", param=name)
    return value
