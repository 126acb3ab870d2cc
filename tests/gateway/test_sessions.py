"""The unit of diversion: a request without a user or session id is never folded into its tenant."""

from __future__ import annotations

import math
from typing import Any

from gateway.routing import choose_arm
from gateway.sessions import conversation_key, session_key
from tests.gateway.test_routing import route


def chat(first_user: str, *later: str, system: str = "You are terse.") -> dict[str, Any]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": first_user},
    ]
    for turn, text in enumerate(later):
        messages.append({"role": "assistant" if turn % 2 == 0 else "user", "content": text})
    return {"model": "chat", "messages": messages}


def key(payload: dict[str, Any], *, stickiness: str = "user", request_id: str = "r1") -> str:
    return session_key(
        stickiness=stickiness, payload=payload, session_header=None, request_id=request_id
    )


def test_every_turn_of_a_conversation_keeps_its_key() -> None:
    first = key(chat("What is 2+2?"), request_id="r1")
    later = key(chat("What is 2+2?", "4.", "And 3+3?"), request_id="r2")
    assert first == later
    assert first.startswith("conversation:")


def test_two_conversations_of_one_tenant_get_different_keys() -> None:
    assert key(chat("What is 2+2?")) != key(chat("Translate 'cat' to French."))
    assert key(chat("Hi", system="You are a pirate.")) != key(chat("Hi", system="You are terse."))


def test_a_user_field_or_a_session_header_is_the_key_as_it_is() -> None:
    assert key({**chat("Hi"), "user": "alice"}) == "alice"
    header = session_key(
        stickiness="session", payload=chat("Hi"), session_header="s-9", request_id="r1"
    )
    assert header == "s-9"
    # An empty user falls back to the conversation, never to the tenant.
    assert key({**chat("Hi"), "user": ""}).startswith("conversation:")


def test_a_completion_or_an_empty_chat_is_assigned_per_request() -> None:
    completion = {"model": "chat", "prompt": "Once upon a time"}
    assert key(completion, request_id="a") == "request:a"
    assert key(completion, request_id="b") == "request:b"
    assert conversation_key({"messages": []}, "c") == "request:c"
    assert conversation_key({"messages": "not a list"}, "d") == "request:d"


def test_only_a_route_that_asks_for_it_diverts_by_tenant() -> None:
    assert key(chat("Hi"), stickiness="tenant") == ""


def test_a_tenant_bursting_without_a_user_field_spreads_over_both_arms_by_weight() -> None:
    # Before, every request of a tenant without `user` landed on one arm: a tenant bursting into
    # its budget put all of its refusals on it.
    chosen = route(25)
    conversations = 4000
    arms = [
        choose_arm(chosen, f"tenant-1\0{key(chat(f'question {i}'))}").name
        for i in range(conversations)
    ]
    share = arms.count("canary") / conversations
    assert abs(share - 0.25) < 4 * math.sqrt(0.25 * 0.75 / conversations), share
