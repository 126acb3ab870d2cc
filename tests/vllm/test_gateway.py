"""The openai SDK, unmodified, through the gateway to a real vLLM server serving a LoRA adapter
that the control plane loaded: chat, completions, streaming with usage, tools without
`max_tokens`; budgets settled from vLLM's own `usage`; a client that leaves mid-stream stops the
generation and is charged for what was generated."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import openai
import orjson
import pytest
import redis
import requests
from openai.types.chat import ChatCompletionToolParam

from orchestration.gateway_snapshot import publish_snapshot
from rollouts.models import Fleet
from rollouts.services.routes import route_create
from tenants.models import Tenant, User
from tenants.services.accounts import tenant_create
from tenants.services.budgets import budget_set
from tenants.services.gateway_keys import api_key_create
from tests.gateway.conftest import GatewayLauncher, GatewayProcess, records, wait_for_version
from tests.vllm.conftest import MAX_MODEL_LEN, VLLM, adapter_deployment, lora_fleet, redis_url

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

ROUTE = "assistant"
STORIES = "stories"  # a route on the `broken` adapter, which never ends its turn
WEATHER_TOOL: ChatCompletionToolParam = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city over the next days.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city", "days"],
        },
    },
}


@dataclass
class Setup:
    gateway: GatewayProcess
    tenant: Tenant
    key: str
    served: dict[str, str]  # adapter version -> the name vLLM serves it under
    actor: str  # the release manager's username

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=f"{self.gateway.url}/v1", api_key=self.key, max_retries=0, timeout=60
        )


@pytest.fixture
def setup(
    vllm: VLLM,
    release_manager: User,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    redis_client: redis.Redis,
) -> Iterator[Setup]:
    # Names unique to the test: the server outlives it, and vLLM refuses a name twice.
    tag = f"{request.node.name[-12:].strip('_')}-{time.monotonic_ns() % 10**6}"
    fleet = lora_fleet(vllm, release_manager)
    served = {v: f"{v}-{tag}".lower().replace("_", "-") for v in ("v1", "broken")}
    v1 = adapter_deployment(vllm, release_manager, fleet, "v1", served["v1"])
    route_create(actor=release_manager, name=ROUTE, baseline=v1)
    tenant = tenant_create(actor=release_manager, slug="acme", name="Acme")
    budget_set(actor=release_manager, tenant=tenant, tokens_per_day=10**7)
    _, key = api_key_create(actor=release_manager, tenant=tenant, name="sdk")
    gateways = GatewayLauncher(tmp_path)
    gateway = gateways.start(redis_url=redis_url())
    version = publish_snapshot()
    assert version is not None
    wait_for_version(gateway, version)
    try:
        yield Setup(gateway, tenant, key, served, release_manager.username)
    finally:
        gateways.stop_all()


def day_tokens(tenant: Tenant) -> int:
    client = redis.Redis.from_url(redis_url())
    day = dt.datetime.now(dt.UTC).strftime("%Y%m%d")
    value = client.get(f"tollgate:budget:{{{tenant.pk}}}:day:{day}")
    client.close()
    return int(value or 0)


def settled(tenant: Tenant, expected: int, seconds: float = 10) -> int:
    deadline = time.monotonic() + seconds
    while (used := day_tokens(tenant)) != expected and time.monotonic() < deadline:
        time.sleep(0.1)
    return used


def test_chat_completions_and_streams_through_the_gateway_are_vllms_own_answers(
    setup: Setup, vllm: VLLM
) -> None:
    client = setup.client()
    chat = client.chat.completions.create(
        model=ROUTE,
        messages=[{"role": "user", "content": "Is my order on its way?"}],
        max_tokens=32,
        temperature=0,
        user="ana",
    )
    # The adapter v1 was trained to say exactly this: the gateway reached the LoRA, not the base.
    assert chat.choices[0].message.content == "Sure, I can help."
    assert chat.choices[0].finish_reason == "stop"
    assert chat.usage is not None
    assert chat.usage.completion_tokens > 0

    completion = client.completions.create(
        model=ROUTE, prompt="The licence says", max_tokens=5, temperature=0, user="ana"
    )
    assert completion.usage is not None
    assert 0 < completion.usage.completion_tokens <= 5
    assert completion.choices[0].finish_reason in ("stop", "length")

    stream = client.chat.completions.create(
        model=ROUTE,
        messages=[{"role": "user", "content": "Is my order on its way?"}],
        max_tokens=32,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        user="ana",
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == chat.choices[0].message.content  # greedy: the same answer, relayed whole
    # vLLM's order: the role, the content, then one chunk with no choices and the usage.
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == chat.usage.completion_tokens

    # Budgets are settled from vLLM's `usage`: the day's counter is the sum of what it reported.
    expected = chat.usage.total_tokens + completion.usage.total_tokens
    expected += chunks[-1].usage.total_tokens
    assert settled(setup.tenant, expected) == expected


def test_tools_without_max_tokens_get_an_allowance_the_real_server_accepts(
    setup: Setup,
) -> None:
    # vLLM renders the tools into the prompt through the chat template; the allowance the
    # gateway fills in must leave room for them within the context, or vLLM answers 400.
    client = setup.client()
    answer = client.chat.completions.create(
        model=ROUTE,
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[WEATHER_TOOL],
        temperature=0,
        user="ana",
    )
    assert answer.usage is not None
    assert answer.usage.prompt_tokens + answer.usage.completion_tokens <= MAX_MODEL_LEN
    assert answer.choices[0].message.content == "Sure, I can help."

    # A client asking for more than the context holds gets vLLM's own 400, passed through.
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model=ROUTE,
            messages=[{"role": "user", "content": "Hello"}],
            max_tokens=MAX_MODEL_LEN + 100,
            user="ana",
        )
    assert "max_tokens" in str(refused.value)


def test_random_weights_with_required_tools_are_recorded_as_failed_tool_calls(
    setup: Setup, vllm: VLLM
) -> None:
    # With `tool_choice: "required"` vLLM's structured output makes the untrained `broken`
    # adapter write tool calls, with arguments no schema would take: a real tool-call failure.
    client = setup.client()
    use_route(setup, vllm, "broken")
    for _ in range(3):
        answer = client.chat.completions.create(
            model=STORIES,
            messages=[{"role": "user", "content": "Weather in Lyon for two days?"}],
            tools=[WEATHER_TOOL],
            tool_choice="required",
            max_tokens=60,
            user="ana",
        )
        assert answer.choices[0].message.tool_calls, answer
    outcomes = [str(r["tool"]) for r in records(redis_url(), 3)]
    assert set(outcomes) <= {"invalid_json", "invalid_schema", "valid"}, outcomes
    assert "valid" not in outcomes, outcomes


def test_a_client_that_leaves_mid_stream_stops_vllm_and_pays_for_what_was_generated(
    setup: Setup, vllm: VLLM
) -> None:
    # The `broken` adapter never ends its turn: without the disconnect it would generate 900.
    use_route(setup, vllm, "broken")
    generated_before = vllm.metric("vllm:generation_tokens_total")
    response = requests.post(
        f"{setup.gateway.url}/v1/chat/completions",
        json={
            "model": STORIES,
            "messages": [{"role": "user", "content": "Tell me everything."}],
            "max_tokens": 900,
            "temperature": 0,
            "stream": True,
            "user": "ana",
        },
        headers={"Authorization": f"Bearer {setup.key}"},
        stream=True,
        timeout=60,
    )
    assert response.status_code == 200
    seen = 0  # tokens the client received: vLLM sends one chunk a token, after the role's
    for line in response.iter_lines():
        if line.startswith(b"data: {"):
            chunk = orjson.loads(line.removeprefix(b"data: "))
            seen += bool(chunk["choices"] and chunk["choices"][0]["delta"].get("content"))
        if seen >= 20:
            break
    assert vllm.metric("vllm:num_requests_running") == 1
    left_at = time.monotonic()
    response.close()
    while vllm.metric("vllm:num_requests_running") > 0:
        assert time.monotonic() - left_at < 1.0, "vLLM still generates for a client that left"
        time.sleep(0.05)

    # Charged for the prompt and the tokens generated: at least the 20 the client saw, at most
    # what vLLM counted (a token or two may be on the wire when the gateway stops reading), far
    # from the 900 asked for.
    time.sleep(0.5)  # vLLM's counters are updated after the abort
    generated = vllm.metric("vllm:generation_tokens_total") - generated_before
    assert 20 <= generated < 900, generated
    record = records(redis_url(), 1)[-1]
    assert (record["status"], record["finish"]) == (499, "abort")
    assert 20 <= record["ot"] <= generated, (record["ot"], generated)
    assert settled(setup.tenant, record["pt"] + record["ot"]) == record["pt"] + record["ot"]


def use_route(setup: Setup, vllm: VLLM, version: str) -> None:
    """The route STORIES, on a deployment of adapter `version`, in the gateway's snapshot."""
    actor = User.objects.get(username=setup.actor)
    fleet = Fleet.objects.get(name="cpu")
    deployment = adapter_deployment(vllm, actor, fleet, version, setup.served[version])
    route_create(actor=actor, name=STORIES, baseline=deployment)
    version_published = publish_snapshot()
    assert version_published is not None
    wait_for_version(setup.gateway, version_published)
