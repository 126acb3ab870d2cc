"""The unit of diversion: which key keeps a request on the same arm as the ones before it.

A route says where the key comes from (its stickiness): the request's `user` field, or the
`X-Session-Id` header. A request without one is never folded into its tenant (a tenant-wide
key puts a whole tenant, often most of the traffic, on one arm, and with it that tenant's
prompts, its bursts and its budget refusals): it gets a key that keeps its conversation together
instead. Every turn of a chat resends the conversation from its start, so the first system
message and the first user message name the conversation on every turn; a request with neither
(a completion, an empty chat) is a conversation of its own and is assigned by its request id.

Two conversations that open with the same system prompt and the same first message share a key
and an arm: an application whose every conversation opens alike is diverted per opening, which
still spreads over many openings rather than one tenant.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

USER_FIELD = "user"


def conversation_key(payload: dict[str, Any], request_id: str) -> str:
    """The conversation's opening, hashed; the request id when there is none to go by."""
    messages = payload.get("messages")
    if not isinstance(messages, list):
        return f"request:{request_id}"
    system = _first(messages, "system", "developer")
    user = _first(messages, "user")
    if system is None and user is None:
        return f"request:{request_id}"
    # The content as the client sent it (a string or a list of parts), which each turn repeats.
    opening = orjson.dumps([system, user])
    return "conversation:" + hashlib.sha256(opening).hexdigest()[:32]


def _first(messages: list[Any], *roles: str) -> Any:
    for message in messages:
        if isinstance(message, dict) and message.get("role") in roles:
            return message.get("content")
    return None


def session_key(
    *, stickiness: str, payload: dict[str, Any], session_header: str | None, request_id: str
) -> str:
    """The key the arm is drawn from (the caller scopes it to the tenant). A user or session id
    is the key as it is, so that those already in a rollout keep their arm."""
    if stickiness == "tenant":
        return ""  # the route's owner chose one arm per tenant
    if stickiness == "user":
        user = payload.get(USER_FIELD)
        if isinstance(user, str) and user:
            return user
    elif stickiness == "session" and session_header:
        return session_header
    return conversation_key(payload, request_id)
