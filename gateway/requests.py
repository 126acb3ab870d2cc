"""Checking what a client sent, before anything else happens (every mistake is a clear 400)."""

from __future__ import annotations

import math
from typing import Any

import orjson

from gateway.errors import GatewayError, bad_request

# Chat templates add a few tokens per message (role markers and separators).
TOKENS_PER_MESSAGE = 4
CHARS_PER_TOKEN = 4


def parse_body(body: bytes) -> dict[str, Any]:
    if not body:
        raise bad_request("The request body is empty; send a JSON object.")
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise bad_request(f"The request body is not valid JSON: {exc}.") from exc
    if not isinstance(payload, dict):
        raise bad_request("The request body must be a JSON object.")
    return payload


def _positive_int(payload: dict[str, Any], name: str) -> int | None:
    value = payload.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise bad_request(f"'{name}' must be a positive integer, got {value!r}.", param=name)
    return value


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def validate(payload: dict[str, Any], *, chat: bool) -> None:
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request("'model' must name a model (a route).", param="model")
    if chat:
        messages = payload.get("messages")
        if not isinstance(messages, list) or not messages:
            raise bad_request("'messages' must be a non-empty list.", param="messages")
        for index, message in enumerate(messages):
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                raise bad_request(
                    f"messages[{index}] must be an object with a string 'role'.",
                    param=f"messages[{index}]",
                )
            content = message.get("content")
            if content is not None and not isinstance(content, str | list):
                raise bad_request(
                    f"messages[{index}].content must be a string or a list of parts.",
                    param=f"messages[{index}].content",
                )
    else:
        prompt = payload.get("prompt")
        ok = isinstance(prompt, str) or (
            isinstance(prompt, list)
            and prompt
            and (
                all(isinstance(p, str) for p in prompt)
                or all(isinstance(p, int) and not isinstance(p, bool) for p in prompt)
            )
        )
        if not ok:
            raise bad_request(
                "'prompt' must be a string, a list of strings or a list of token ids.",
                param="prompt",
            )
        if isinstance(prompt, list) and len(prompt) > 1 and isinstance(prompt[0], str):
            # The replica would answer one choice per prompt, each with the whole max_tokens:
            # one reservation cannot cover them, and one measured answer cannot describe them.
            raise bad_request(
                f"'prompt' holds {len(prompt)} prompts; send one prompt per request (like n=1).",
                param="prompt",
                code="multiple_prompts",
            )
    for name in ("max_tokens", "max_completion_tokens"):
        _positive_int(payload, name)
    n = payload.get("n")
    if n is not None and n != 1:
        raise bad_request("Only n=1 is supported: send one request per completion.", param="n")
    for name in ("stream", "ignore_eos"):
        if name in payload and not isinstance(payload[name], bool):
            raise bad_request(f"'{name}' must be true or false.", param=name)
    options = payload.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise bad_request("'stream_options' must be an object.", param="stream_options")
    if "user" in payload and not isinstance(payload["user"], str):
        raise bad_request("'user' must be a string.", param="user")
    tools = payload.get("tools")
    if tools is not None:
        if not chat or not isinstance(tools, list):
            raise bad_request("'tools' must be a list (chat completions only).", param="tools")
        for index, tool in enumerate(tools):
            function = tool.get("function") if isinstance(tool, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                raise bad_request(
                    f"tools[{index}] must be {{'type': 'function', 'function': {{'name': …}}}}.",
                    param=f"tools[{index}]",
                )
            if not isinstance(function.get("parameters", {}), dict):
                raise bad_request(
                    f"tools[{index}].function.parameters must be a JSON schema object.",
                    param=f"tools[{index}].function.parameters",
                )


def requested_max_tokens(payload: dict[str, Any]) -> int | None:
    value = payload.get("max_completion_tokens", payload.get("max_tokens"))
    return value if isinstance(value, int) else None


def estimate_prompt_tokens(payload: dict[str, Any], *, chat: bool) -> int:
    """A cautious estimate, for admission only; the replica's usage settles the real count."""
    if chat:
        chars = sum(len(_text_of(m.get("content"))) for m in payload["messages"])
        extra = TOKENS_PER_MESSAGE * len(payload["messages"])
        if payload.get("tools"):
            chars += len(orjson.dumps(payload["tools"]))
        return math.ceil(chars / CHARS_PER_TOKEN) + extra
    prompt = payload["prompt"]
    if isinstance(prompt, str):
        return math.ceil(len(prompt) / CHARS_PER_TOKEN) + 1
    if prompt and isinstance(prompt[0], int):
        return len(prompt)
    return sum(math.ceil(len(p) / CHARS_PER_TOKEN) + 1 for p in prompt)


def system_prefix(payload: dict[str, Any]) -> str | None:
    """The leading system prompt, which decides prefix affinity."""
    messages = payload.get("messages")
    if messages and messages[0].get("role") == "system":
        return _text_of(messages[0].get("content"))
    return None


def too_large(limit: int) -> GatewayError:
    return GatewayError(
        413, f"The request body is larger than {limit} bytes.", code="request_too_large"
    )
