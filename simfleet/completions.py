"""The completion engine's wire format: a chat or text completion request checked as vLLM checks
it, then answered whole or streamed as server-sent events, in vLLM's exact bytes."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from typing import Any

import orjson

from simfleet import text
from simfleet.asgi import ApiError, Receive, Send, int_field, respond_json
from simfleet.engine import EngineDead, SimRequest
from simfleet.replica import Replica, Served, output_length

SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
]


def chat_completion(replica: Replica, payload: dict[str, Any]) -> Completion:
    """A chat completion request: its messages and tools counted as the chat template does."""
    messages = payload.get("messages")
    if (
        not isinstance(messages, list)
        or not messages
        or not all(isinstance(m, dict) for m in messages)
    ):
        raise ApiError(
            400, "'messages' must be a non-empty list of message objects.", param="messages"
        )
    tools = payload.get("tools")
    if tools is not None and not (
        isinstance(tools, list) and all(isinstance(t, dict) for t in tools)
    ):
        raise ApiError(400, "'tools' must be a list of tool objects.", param="tools")
    prompt_tokens = text.count_chat_tokens(messages, tools)
    return Completion(
        replica, payload, prompt_tokens, chat=True, prompt_key=orjson.dumps(messages).decode()
    )


def text_completion(replica: Replica, payload: dict[str, Any]) -> Completion:
    """A text completion request: a prompt string, a list of one string, or token ids."""
    prompt = payload.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str):
        prompt_tokens = text.count_tokens(prompt)
    elif isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        prompt_tokens = len(prompt)  # token ids
    else:
        raise ApiError(
            400,
            "'prompt' must be a string, a list of one string, or a list of token ids.",
            param="prompt",
        )
    return Completion(replica, payload, prompt_tokens, chat=False, prompt_key=str(prompt))


class Completion:
    """One chat or text completion: validation as vLLM does it, then generation and streaming."""

    def __init__(
        self,
        replica: Replica,
        payload: dict[str, Any],
        prompt_tokens: int,
        *,
        chat: bool,
        prompt_key: str,
    ) -> None:
        self.replica = replica
        self.payload = payload
        self.prompt_tokens = prompt_tokens
        self.chat = chat
        self.prompt_key = prompt_key
        self.created = int(time.time())
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.served = self._resolve()
        self.max_tokens = self._max_tokens()
        self._check_tool_choice()
        self.stream = bool(payload.get("stream"))
        options = payload.get("stream_options") or {}
        self.include_usage = bool(isinstance(options, dict) and options.get("include_usage"))
        self.tool_call: dict[str, Any] | None = None
        self.tool_pieces: list[str] = []

    def _resolve(self) -> Served:
        model = self.payload.get("model")
        if not isinstance(model, str) or not model:
            raise ApiError(400, "'model' must name a served model.", param="model")
        served = self.replica.resolve(model)
        if served is None:
            raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
        return served

    def _max_tokens(self) -> int:
        limit = self.served.base.max_model_len
        # vLLM keeps at least one position of the context for the answer.
        if self.prompt_tokens >= limit:
            raise ApiError(
                400,
                f"This model's maximum context length is {limit} tokens. However, your request "
                f"has {self.prompt_tokens} input tokens. Please reduce the length of the input "
                f"messages. (parameter=input_tokens, value={self.prompt_tokens})",
                param="input_tokens",
            )
        requested = int_field(self.payload, "max_completion_tokens", minimum=1)
        if requested is None:
            requested = int_field(self.payload, "max_tokens", minimum=1)
        if requested is None:
            return limit - self.prompt_tokens
        if requested > limit:
            raise ApiError(
                400,
                f"max_tokens={requested} cannot be greater than max_model_len={limit}. Please "
                f"request fewer output tokens. (parameter=max_tokens, value={requested})",
                param="max_tokens",
            )
        if requested > limit - self.prompt_tokens:
            raise ApiError(
                400,
                f"'max_tokens' or 'max_completion_tokens' is too large: {requested}. This "
                f"model's maximum context length is {limit} tokens and your request has "
                f"{self.prompt_tokens} input tokens ({requested} > {limit} - "
                f"{self.prompt_tokens}). (parameter=max_tokens, value={requested})",
                param="max_tokens",
            )
        return requested

    def _check_tool_choice(self) -> None:
        choice = self.payload.get("tool_choice")
        tools = self.payload.get("tools") or []
        if choice is None or choice == "none":
            return
        if not tools:
            raise ApiError(
                400, "When using `tool_choice`, `tools` must be set.", param="tool_choice"
            )
        if isinstance(choice, dict):
            wanted = (choice.get("function") or {}).get("name")
            names = {(t.get("function") or {}).get("name") for t in tools}
            if wanted not in names:
                raise ApiError(
                    400,
                    "The tool specified in `tool_choice` does not match any of the specified "
                    "`tools`",
                    param="tool_choice",
                )

    def _wants_tool_call(self, rng: Any) -> bool:
        tools = self.payload.get("tools")
        if not self.chat or not tools:
            return False
        choice = self.payload.get("tool_choice", "auto")
        if choice == "none":
            return False
        if choice == "required" or isinstance(choice, dict):
            return True
        return bool(rng.random() < self.served.base.tool_call_probability)

    def _plan_tool_call(self, rng: Any) -> int:
        tools: list[dict[str, Any]] = self.payload["tools"]
        choice = self.payload.get("tool_choice")
        functions = [t.get("function") or {} for t in tools]
        if isinstance(choice, dict):
            wanted = (choice.get("function") or {}).get("name")
            functions = [f for f in functions if f.get("name") == wanted]
        function = rng.choice(functions)
        schema = function.get("parameters") or {}
        faults = self.replica.faults
        validity = (
            faults.tool_call_validity
            if faults.tool_call_validity is not None
            else self.served.tool_call_validity
        )
        if rng.random() < validity:
            arguments = orjson.dumps(text.valid_arguments(schema, rng)).decode()
        else:
            arguments = text.invalid_arguments(schema, rng)
        self.tool_call = {
            "id": "chatcmpl-tool-" + uuid.uuid4().hex,
            "name": str(function.get("name", "")),
            "arguments": arguments,
        }
        tokens = max(1, text.count_tokens(arguments))
        self.tool_pieces = text.split_for_stream(arguments, tokens)
        return tokens

    async def run(self, receive: Receive, send: Send) -> None:
        replica = self.replica
        if not replica.healthy:
            raise ApiError(
                500, replica.dead_reason or "The engine is starting up.", "InternalServerError"
            )
        seed = int_field(self.payload, "seed", minimum=0)
        rng = replica.request_rng(seed, self.prompt_key)
        faults = replica.faults
        fails = 1 - (1 - self.served.error_rate) * (1 - faults.error_rate)
        if rng.random() < fails:
            raise ApiError(
                500,
                "Internal server error: the engine failed to process the request.",
                "InternalServerError",
            )
        if self._wants_tool_call(rng):
            target = self._plan_tool_call(rng)
        else:
            target = output_length(self.served.output, rng)
        if self.payload.get("ignore_eos"):
            target = self.max_tokens
        request = SimRequest(
            request_id=self.id,
            model=self.served.name,
            prompt_tokens=self.prompt_tokens,
            max_tokens=self.max_tokens,
            target_tokens=target,
            cost=self.served.cost,
            hang=rng.random() < faults.hang_rate,
        )
        try:
            self.served.engine.submit(request)
        except EngineDead as exc:
            raise ApiError(500, str(exc), "InternalServerError") from exc
        watcher = asyncio.get_running_loop().create_task(self._watch_disconnect(receive, request))
        try:
            if self.stream:
                await self._stream(request, rng, send)
            else:
                await self._respond_when_done(request, rng, send)
        finally:
            watcher.cancel()
            self.served.engine.abort(request)  # no-op when it finished

    async def _watch_disconnect(self, receive: Receive, request: SimRequest) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.served.engine.abort(request)
                return

    # --- output -------------------------------------------------------------------------------

    def _usage(self, request: SimRequest) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": self.prompt_tokens + request.generated,
            "completion_tokens": request.generated,
            "prompt_tokens_details": None,
        }

    def _finish_reason(self, request: SimRequest) -> str | None:
        # vLLM reports tool_calls for auto and required tool choice; a named function the
        # client forced ends with a plain stop.
        named = isinstance(self.payload.get("tool_choice"), dict)
        if request.finish_reason == "stop" and self.tool_call is not None and not named:
            return "tool_calls"
        return request.finish_reason

    async def _respond_when_done(self, request: SimRequest, rng: Any, send: Send) -> None:
        while not request.done:
            await request.wait()
        if request.finish_reason == "abort":
            return  # the client is gone
        if request.finish_reason == "error":
            raise ApiError(500, request.error or "engine error", "InternalServerError")
        words = "".join(text.word(rng) for _ in range(request.generated))
        reason = self._finish_reason(request)
        if self.chat:
            message: dict[str, Any] = {
                "role": "assistant",
                "content": words,
                "refusal": None,
                "tool_calls": [],
            }
            if self.tool_call is not None:
                arguments = "".join(self.tool_pieces[: request.generated])
                message["content"] = None
                message["tool_calls"] = [
                    {
                        "id": self.tool_call["id"],
                        "type": "function",
                        "function": {"name": self.tool_call["name"], "arguments": arguments},
                    }
                ]
            choice = {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": reason,
                "stop_reason": None,
            }
            body = {
                "id": self.id,
                "object": "chat.completion",
                "created": self.created,
                "model": self.served.name,
                "choices": [choice],
                "usage": self._usage(request),
                "system_fingerprint": None,
            }
        else:
            choice = {
                "index": 0,
                "text": words,
                "logprobs": None,
                "finish_reason": reason,
                "stop_reason": None,
            }
            body = {
                "id": self.id,
                "object": "text_completion",
                "created": self.created,
                "model": self.served.name,
                "choices": [choice],
                "usage": self._usage(request),
            }
        await respond_json(send, 200, body)

    async def _stream(self, request: SimRequest, rng: Any, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        head = orjson.dumps(
            {"id": self.id, "object": obj, "created": self.created, "model": self.served.name}
        )[:-1]
        prefix = b"data: " + head + b',"choices":[{"index":0,'
        written = 0
        chunks: list[bytes] = []
        if self.chat:
            role = b'"delta":{"role":"assistant","content":""}'
            chunks.append(prefix + role + self._tail(None))
        while True:
            produced = request.generated
            for index in range(written, produced):
                last = request.done and index == produced - 1
                chunks.append(
                    prefix + self._delta(index, rng) + self._tail(request if last else None)
                )
            written = produced
            if request.done:
                break
            if chunks:
                with contextlib.suppress(OSError):
                    await send(
                        {"type": "http.response.body", "body": b"".join(chunks), "more_body": True}
                    )
                chunks.clear()
            await request.wait()
        if request.finish_reason == "abort":
            return
        if request.finish_reason == "error":
            error = ApiError(500, request.error or "engine error", "InternalServerError")
            chunks.append(b"data: " + error.body() + b"\n\n")
        elif written == 0:
            chunks.append(prefix + self._empty_delta() + self._tail(request))
        if self.include_usage:
            usage = orjson.dumps({"choices": [], "usage": self._usage(request)})
            chunks.append(b"data: " + head + b"," + usage[1:] + b"\n\n")
        chunks.append(b"data: [DONE]\n\n")
        with contextlib.suppress(OSError):
            await send({"type": "http.response.body", "body": b"".join(chunks)})

    def _delta(self, index: int, rng: Any) -> bytes:
        if self.tool_call is None:
            piece = text.encoded_word(rng)
            return (b'"delta":{"content":' + piece + b"}") if self.chat else (b'"text":' + piece)
        arguments = orjson.dumps(self.tool_pieces[index] if index < len(self.tool_pieces) else "")
        if index == 0:
            call = self.tool_call
            return (
                b'"delta":{"tool_calls":[{"index":0,"id":'
                + orjson.dumps(call["id"])
                + b',"type":"function","function":{"name":'
                + orjson.dumps(call["name"])
                + b',"arguments":'
                + arguments
                + b"}}]}"
            )
        return b'"delta":{"tool_calls":[{"index":0,"function":{"arguments":' + arguments + b"}}]}"

    def _empty_delta(self) -> bytes:
        return b'"delta":{"content":""}' if self.chat else b'"text":""'

    def _tail(self, finished: SimRequest | None) -> bytes:
        if finished is None:
            return b',"logprobs":null,"finish_reason":null}]}\n\n'
        reason = orjson.dumps(self._finish_reason(finished))
        return b',"logprobs":null,"finish_reason":' + reason + b',"stop_reason":null}]}\n\n'
