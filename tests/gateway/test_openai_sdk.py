"""The official openai SDK, unmodified, against the gateway."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest
from openai.types.chat import ChatCompletionToolParam

from gateway.snapshot import Budget
from tests.gateway.conftest import (
    ACME_KEY,
    ROUTE,
    GatewayLauncher,
    GatewayProcess,
    make_snapshot,
    publish,
    wait_for_version,
)
from tests.simfleet.harness import Fleet

WEATHER_TOOL: ChatCompletionToolParam = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}


@pytest.fixture
def gateway(gateways: GatewayLauncher, fleet: Fleet, redis_url: str) -> GatewayProcess:
    gateway = gateways.start(redis_url=redis_url)
    snapshot = make_snapshot(
        fleet.urls[:2], acme_budget=Budget(max_output_tokens=50, over_max_output="reject")
    )
    publish(redis_url, snapshot)
    wait_for_version(gateway, snapshot.version)
    return gateway


def client(gateway: GatewayProcess, key: str = ACME_KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0, timeout=10)


@pytest.fixture
def sdk(gateway: GatewayProcess) -> Iterator[openai.OpenAI]:
    with client(gateway) as sdk:
        yield sdk


def test_models_lists_the_routes_the_tenant_may_use(sdk: openai.OpenAI) -> None:
    assert [m.id for m in sdk.models.list()] == [ROUTE]


def test_chat_completion_answers_under_the_route_name(sdk: openai.OpenAI) -> None:
    answer = sdk.chat.completions.create(
        model=ROUTE, messages=[{"role": "user", "content": "hi"}], max_tokens=4
    )
    assert answer.model == ROUTE
    assert answer.choices[0].message.content
    assert answer.choices[0].finish_reason == "length"
    assert answer.usage is not None
    assert answer.usage.completion_tokens == 4


def test_streaming_chat_passes_tokens_and_usage(sdk: openai.OpenAI) -> None:
    stream = sdk.chat.completions.create(
        model=ROUTE,
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=5,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    usage = chunks[-1].usage
    assert usage is not None
    assert chunks[-1].choices == []
    assert usage.completion_tokens == 5
    assert len(text.split()) == 5


def test_streaming_without_usage_gets_no_usage_chunk(sdk: openai.OpenAI) -> None:
    stream = sdk.chat.completions.create(
        model=ROUTE, messages=[{"role": "user", "content": "hi"}], max_tokens=3, stream=True
    )
    chunks = list(stream)
    assert all(c.choices for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "length"


def test_text_completions_stream_and_not(sdk: openai.OpenAI) -> None:
    answer = sdk.completions.create(model=ROUTE, prompt="Once upon a time", max_tokens=3)
    assert answer.usage is not None
    assert answer.usage.completion_tokens == 3
    streamed = list(sdk.completions.create(model=ROUTE, prompt="Once", max_tokens=3, stream=True))
    assert "".join(c.choices[0].text for c in streamed if c.choices).strip()


def test_tool_calls_come_back_assembled(sdk: openai.OpenAI) -> None:
    answer = sdk.chat.completions.create(
        model=ROUTE,
        messages=[{"role": "user", "content": "Weather in Oslo?"}],
        tools=[WEATHER_TOOL],
        tool_choice="required",
        max_tokens=50,
    )
    calls = answer.choices[0].message.tool_calls
    assert calls
    assert calls[0].type == "function"
    assert calls[0].function.name == "get_weather"
    assert answer.choices[0].finish_reason == "tool_calls"


def test_errors_arrive_as_the_sdk_exceptions(gateway: GatewayProcess, sdk: openai.OpenAI) -> None:
    with client(gateway, key="tk_wrong") as stranger, pytest.raises(openai.AuthenticationError):
        stranger.models.list()
    with pytest.raises(openai.NotFoundError) as not_found:
        sdk.chat.completions.create(
            model="no-such-route", messages=[{"role": "user", "content": "hi"}]
        )
    assert "no-such-route" in str(not_found.value)
    with pytest.raises(openai.BadRequestError) as too_many:
        sdk.chat.completions.create(
            model=ROUTE, messages=[{"role": "user", "content": "hi"}], max_tokens=500
        )
    assert "max_output_tokens" in str(too_many.value)
    with pytest.raises(openai.BadRequestError):
        sdk.chat.completions.create(model=ROUTE, messages=[])
