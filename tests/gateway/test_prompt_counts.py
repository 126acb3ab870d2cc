"""Admission never reserves less than a prompt really costs, and a filled-in max_tokens fits.

The replica's count is what is charged in the end; what admission reserves and what `max_tokens`
the gateway fills in must not fall below it, whatever the prompt holds (tool definitions, CJK
text, images): with the deployment's tokenizer the count is exact, without it a bound.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from gateway.snapshot import Budget, Snapshot
from gateway.tokens import ChatTokenizer, chat_bound, completion_bound
from simfleet import text as simfleet_text
from simfleet.tokenizer import DIRECTORY as SIMFLEET_TOKENIZER
from simfleet.tokenizer import write
from tests.conftest import ROOT
from tests.gateway.conftest import (
    ACME_KEY,
    ROUTE,
    GatewayLauncher,
    auth,
    make_snapshot,
    serve,
)
from tests.gateway.test_limits import post
from tests.simfleet.harness import Fleet, FleetLauncher, model

# OpenAI's function-calling example, as clients send it: no max_tokens.
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a given location",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {
                    "type": "string",
                    "description": "The city and state, e.g. San Francisco, CA",
                },
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location"],
        },
    },
}
WEATHER: dict[str, object] = {
    "model": ROUTE,
    "messages": [{"role": "user", "content": "What's the weather like in Boston today?"}],
    "tools": [WEATHER_TOOL],
    "tool_choice": "auto",
}
# One token a character in simfleet's count, as CJK text is for real tokenizers; 4 characters a
# token in a characters-over-four estimate.
CJK = "東、京、の、天、気、" * 30


@pytest.fixture(scope="module")
def fleet(fleets: FleetLauncher) -> Fleet:
    """The demo's model: a 1,024-token context."""
    return fleets.start([model(answer_tokens=6, max_model_len=1024)])


def with_tokenizer(snapshot: Snapshot, directory: Path | None) -> Snapshot:
    deployments = {
        key: deployment.model_copy(
            update={
                "max_model_len": 1024,
                "tokenizer_dir": str(directory) if directory else None,
            }
        )
        for key, deployment in snapshot.deployments.items()
    }
    return snapshot.model_copy(update={"deployments": deployments})


@pytest.mark.parametrize("tokenizer", [SIMFLEET_TOKENIZER, None], ids=["tokenizer", "bound"])
def test_the_weather_example_without_max_tokens_is_served(
    gateways: GatewayLauncher, fleet: Fleet, redis_url: str, tokenizer: Path | None
) -> None:
    snapshot = with_tokenizer(make_snapshot(fleet.urls[:1]), tokenizer)
    gateway = serve(gateways, redis_url, snapshot)
    status, body, _ = post(gateway, WEATHER)
    assert status == 200, body
    assert body["usage"]["prompt_tokens"] > 100  # type: ignore[index]  # the tools count


async def burst(url: str, count: int, body: dict[str, Any]) -> list[dict[str, Any]]:
    async with aiohttp.ClientSession() as session:

        async def one() -> dict[str, Any]:
            async with session.post(
                url + "/v1/chat/completions", json=body, headers=auth(ACME_KEY)
            ) as response:
                answer: dict[str, Any] = await response.json()
                return {"status": response.status, **answer}

        return await asyncio.gather(*(one() for _ in range(count)))


@pytest.mark.parametrize("tokenizer", [SIMFLEET_TOKENIZER, None], ids=["tokenizer", "bound"])
def test_a_burst_of_cjk_prompts_stays_within_the_minutes_input_tokens(
    gateways: GatewayLauncher, fleet: Fleet, redis_url: str, tokenizer: Path | None
) -> None:
    limit = 2000
    budget = Budget(input_tokens_per_minute=limit)
    snapshot = with_tokenizer(make_snapshot(fleet.urls[:1], acme_budget=budget), tokenizer)
    gateway = serve(gateways, redis_url, snapshot)
    body = {"model": ROUTE, "messages": [{"role": "user", "content": CJK}], "max_tokens": 4}
    answers = asyncio.run(burst(gateway.url, 30, body))
    served = [a for a in answers if a["status"] == 200]
    assert served
    assert {a["status"] for a in answers} <= {200, 429}
    one_request = served[0]["usage"]["prompt_tokens"]
    assert one_request >= len(CJK)
    used = sum(a["usage"]["prompt_tokens"] for a in served)
    # The limiter refills while the burst runs (2,000 a minute: 33 a second); one request's
    # worth covers that and the last admission.
    assert used <= limit + one_request, (len(served), used)


# --- the bound and the tokenizers ------------------------------------------------------------

texts = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=200)
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user", "assistant"]), "content": texts}
    ),
    min_size=1,
    max_size=4,
)


@pytest.fixture(scope="module")
def byte_level_bpe() -> Tokenizer:
    """A real byte-level BPE, as GPT-2 and Llama 3 tokenizers are, trained on the repository's
    own text."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=2000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    sources = [str(p) for p in sorted(ROOT.glob("*.md")) + sorted(ROOT.glob("gateway/*.py"))]
    tokenizer.train(sources, trainer)
    return tokenizer


@settings(max_examples=200, deadline=None)
@given(conversation=messages)
def test_the_bound_is_never_below_a_byte_level_bpe_count(
    byte_level_bpe: Tokenizer, conversation: list[dict[str, str]]
) -> None:
    rendered = "".join(m["role"] + "\n" + m["content"] + "\n" for m in conversation)
    real = len(byte_level_bpe.encode(rendered).ids)
    assert chat_bound({"messages": conversation}, max_model_len=None) >= real


@settings(max_examples=200, deadline=None)
@given(conversation=messages, with_tools=st.booleans())
def test_the_bound_is_never_below_simfleets_count(
    conversation: list[dict[str, str]], with_tools: bool
) -> None:
    tools = [WEATHER_TOOL] if with_tools else None
    real = simfleet_text.count_chat_tokens(conversation, tools)
    payload: dict[str, Any] = {"messages": conversation, "tools": tools}
    assert chat_bound(payload, max_model_len=None) >= real


@settings(max_examples=200, deadline=None)
@given(conversation=messages, with_tools=st.booleans(), prompt=texts)
def test_simfleets_tokenizer_counts_what_simfleet_counts(
    conversation: list[dict[str, str]], with_tools: bool, prompt: str
) -> None:
    tokenizer = ChatTokenizer(SIMFLEET_TOKENIZER)
    tools = [WEATHER_TOOL] if with_tools else None
    assert tokenizer.count_chat(conversation, tools) == simfleet_text.count_chat_tokens(
        conversation, tools
    )
    assert tokenizer.count_text(prompt) == simfleet_text.count_tokens(prompt)


def test_the_committed_simfleet_tokenizer_is_what_write_makes(tmp_path: Path) -> None:
    write(tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (tmp_path / name).read_bytes() == (SIMFLEET_TOKENIZER / name).read_bytes()


def test_an_image_part_is_bounded_by_the_models_context() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    payload = {"messages": [{"role": "user", "content": [image, {"type": "text", "text": "hi"}]}]}
    assert chat_bound(payload, max_model_len=4096) == 4097  # more than fits: the whole context
    assert completion_bound("東京") == 6 + 2


def test_a_bound_above_the_input_limit_does_not_refuse_a_prompt_that_fits(
    gateways: GatewayLauncher, fleet: Fleet, redis_url: str
) -> None:
    # 300 bytes of English: bounded at 380 tokens, counted by the replica at ~60.
    budget = Budget(input_tokens_per_minute=100)
    snapshot = with_tokenizer(make_snapshot(fleet.urls[:1], acme_budget=budget), None)
    gateway = serve(gateways, redis_url, snapshot)
    words = "the canary answers every question " * 9
    body = {"model": ROUTE, "messages": [{"role": "user", "content": words}], "max_tokens": 4}
    status, answer, _ = post(gateway, body)
    assert status == 200, answer
    assert answer["usage"]["prompt_tokens"] <= 100  # type: ignore[index]
