"""Token counting, generated text and tool-call arguments for the simulated models.

Token counts are what every number downstream (usage, budgets, cost) rests on, so they are
deterministic: the same text always counts the same. A token is a word or a punctuation mark,
which is close to what BPE tokenizers give for English.
"""

from __future__ import annotations

import random
from functools import cache
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from tokenizers import Tokenizer

# Chat templates add a few tokens per message (role markers, separators) and a generation prompt.
CHAT_TOKENS_PER_MESSAGE = 4
CHAT_GENERATION_PROMPT_TOKENS = 2

WORDS = [
    "the",
    "model",
    "answers",
    "your",
    "question",
    "about",
    "deployment",
    "latency",
    "with",
    "a",
    "short",
    "clear",
    "note",
    "and",
    "then",
    "explains",
    "how",
    "canary",
    "traffic",
    "moves",
    "from",
    "five",
    "to",
    "one",
    "hundred",
    "percent",
    "while",
    "the",
    "judge",
    "compares",
    "time",
    "to",
    "first",
    "token",
    "tokens",
    "per",
    "second",
    "errors",
    "tool",
    "calls",
    "and",
    "cost",
    "between",
    "both",
    "arms",
]


def count_tokens(text: str) -> int:
    """Words and punctuation marks, as simfleet's tokenizer (simfleet.tokenizer) splits them:
    the gateway counts prompts with that tokenizer, so the two must agree to the token."""
    return len(_tokenizer().encode(text, add_special_tokens=False).ids)


@cache
def _tokenizer() -> Tokenizer:
    from simfleet.tokenizer import build  # it reads this module's constants

    return build()


def _content_text(content: Any) -> str:
    """Message content is a string or a list of parts ({"type": "text", "text": ...})."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def count_chat_tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
    total = CHAT_GENERATION_PROMPT_TOKENS
    for message in messages:
        total += CHAT_TOKENS_PER_MESSAGE + count_tokens(_content_text(message.get("content")))
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            total += count_tokens(str(function.get("name", "")))
            total += count_tokens(str(function.get("arguments", "")))
    if tools:
        total += count_tokens(orjson.dumps(tools).decode())
    return total


# Generated tokens, as text and pre-encoded as JSON strings (the streaming hot path uses these).
TOKENS = [" " + w for w in WORDS]
ENCODED_TOKENS = [orjson.dumps(t) for t in TOKENS]


def word(rng: random.Random) -> str:
    return TOKENS[int(rng.random() * len(TOKENS))]


def encoded_word(rng: random.Random) -> bytes:
    """The same draw as word(), already JSON-encoded."""
    return ENCODED_TOKENS[int(rng.random() * len(ENCODED_TOKENS))]


# --- tool calls -----------------------------------------------------------------------------------


def _value_for(schema: dict[str, Any], rng: random.Random, depth: int = 0) -> Any:
    kind = schema.get("type")
    if schema.get("enum"):
        return rng.choice(schema["enum"])
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "integer":
        low = int(schema.get("minimum", 0))
        return rng.randint(low, max(low, int(schema.get("maximum", low + 100))))
    if kind == "number":
        bottom = float(schema.get("minimum", 0.0))
        return round(rng.uniform(bottom, float(schema.get("maximum", bottom + 100.0))), 3)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        items = schema.get("items") or {"type": "string"}
        count = max(int(schema.get("minItems", 1)), 1)
        return [_value_for(items, rng, depth + 1) for _ in range(count)]
    if kind == "object" or "properties" in schema:
        return valid_arguments(schema, rng, depth + 1) if depth < 4 else {}
    return rng.choice(WORDS)


def valid_arguments(schema: dict[str, Any], rng: random.Random, depth: int = 0) -> dict[str, Any]:
    """Arguments that satisfy the schema: every required property, each of the right type."""
    properties: dict[str, Any] = schema.get("properties") or {}
    required = [name for name in schema.get("required") or [] if name in properties]
    chosen = set(required) | {name for name in properties if rng.random() < 0.5}
    return {name: _value_for(properties[name], rng, depth) for name in properties if name in chosen}


def invalid_arguments(schema: dict[str, Any], rng: random.Random) -> str:
    """Arguments a tool cannot accept, in one of the ways real models get them wrong."""
    good = valid_arguments(schema, rng)
    required = [name for name in schema.get("required") or [] if name in good]
    failure = rng.choice(("truncated", "missing", "wrong_type") if required else ("truncated",))
    if failure == "missing":
        del good[rng.choice(required)]
        return orjson.dumps(good).decode()
    if failure == "wrong_type":
        name = rng.choice(required)
        good[name] = {"unexpected": [good[name]]}
        return orjson.dumps(good).decode()
    text = orjson.dumps(good).decode()
    return text[: max(1, len(text) // 2)]


def split_for_stream(text: str, pieces: int) -> list[str]:
    """Cuts a string into `pieces` consecutive parts (some may be empty when the text is short)."""
    pieces = max(1, pieces)
    size, extra = divmod(len(text), pieces)
    parts, start = [], 0
    for i in range(pieces):
        end = start + size + (1 if i < extra else 0)
        parts.append(text[start:end])
        start = end
    return parts
