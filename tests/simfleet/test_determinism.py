"""Deterministic with a seed: a demo or a CI run replays the same answers every time."""

from __future__ import annotations

from typing import Any

import openai
from openai.types.chat import ChatCompletionMessageFunctionToolCall

from tests.simfleet.harness import Fleet, FleetLauncher, model
from tests.simfleet.tools import TOOLS

# Answer lengths and words both vary from request to request; only the seed fixes them.
VARIED = model("varied", output={"distribution": "lognormal", "mean": 12.0, "sigma": 0.8})


def replay(fleet: Fleet) -> list[Any]:
    """A fixed sequence of requests; what came back, without ids and timestamps."""
    seen: list[Any] = []
    with fleet.client() as client:
        for prompt in ("first question", "second question", "first question"):
            answer = client.chat.completions.create(
                model="varied", messages=[{"role": "user", "content": prompt}], max_tokens=64
            )
            choice = answer.choices[0]
            seen.append((choice.message.content, choice.finish_reason, answer.usage))
        with client.chat.completions.create(
            model="varied",
            messages=[{"role": "user", "content": "stream it"}],
            max_tokens=64,
            stream=True,
            stream_options={"include_usage": True},
        ) as stream:
            seen.append([(c.choices[0].delta.content if c.choices else c.usage) for c in stream])
        text = client.completions.create(model="varied", prompt="complete me", max_tokens=64)
        seen.append((text.choices[0].text, text.usage))
        tools = client.chat.completions.create(
            model="varied",
            messages=[{"role": "user", "content": "call something"}],
            tools=TOOLS,
            tool_choice="required",
            max_tokens=200,
        )
        (call,) = tools.choices[0].message.tool_calls or []
        assert isinstance(call, ChatCompletionMessageFunctionToolCall)
        seen.append((call.function.name, call.function.arguments))
    return seen


def test_fleets_with_the_same_seed_answer_the_same(fleets: FleetLauncher) -> None:
    first = replay(fleets.start([VARIED], seed=7))
    second = replay(fleets.start([VARIED], seed=7))
    assert first == second
    lengths = {usage.completion_tokens for _, _, usage in first[:3]}
    assert len(lengths) > 1  # the answers really vary, so the equality above means something


def test_a_different_seed_gives_different_answers(fleets: FleetLauncher) -> None:
    assert replay(fleets.start([VARIED], seed=7)) != replay(fleets.start([VARIED], seed=8))


def test_a_request_with_its_own_seed_gets_the_same_answer_twice(fleets: FleetLauncher) -> None:
    fleet = fleets.start([VARIED])

    def ask(client: openai.OpenAI, seed: int | None) -> tuple[str | None, int]:
        answer = client.chat.completions.create(
            model="varied",
            messages=[{"role": "user", "content": "same question"}],
            max_tokens=64,
            seed=seed,
        )
        assert answer.usage is not None
        return answer.choices[0].message.content, answer.usage.completion_tokens

    with fleet.client() as client:
        seeded = ask(client, 42)
        others = [ask(client, None) for _ in range(3)]
        assert ask(client, 42) == seeded
        assert ask(client, 43) != seeded
        assert any(other != seeded for other in others)
