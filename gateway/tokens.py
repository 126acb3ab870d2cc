"""How many tokens a request's prompt holds, before the replica says.

With the deployment's tokenizer (a directory with `tokenizer.json` and the `chat_template` of its
`tokenizer_config.json`, as a Hugging Face model ships them) the count is the replica's own: the
chat template renders the messages *and the tool definitions* as vLLM renders them, and the
tokenizer counts the result. Without one, the count is a bound that is never below the real
count: every token of a byte-level BPE (or byte-fallback) tokenizer covers at least one UTF-8
byte, so the bytes of everything a template renders, plus its markers per message, plus a fixed
allowance for its own text, bound the prompt. A part that is not text (an image, audio) is
bounded by the model's whole context.

Admission reserves the count, and a `max_tokens` filled in for the client leaves room for it, so
neither a burst of CJK text nor a tool-laden prompt costs more than was reserved, nor makes the
replica refuse the `max_tokens` the gateway chose. The bound costs microseconds; the exact count
is taken only where the bound is not good enough (`exact_count`).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import orjson
from jinja2 import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

logger = logging.getLogger("gateway.tokens")

# The bound's allowance for a chat template's own text: role markers and separators per message,
# and its fixed text (a system preamble, the generation prompt, the instructions it wraps tool
# definitions in).
BOUND_TOKENS_PER_MESSAGE = 16
BOUND_TEMPLATE_TOKENS = 64
BOUND_TOOLS_TEMPLATE_TOKENS = 512
# A part that is not text, where the model's context length is not known.
BOUND_NON_TEXT_PART_TOKENS = 32_768
# Prompts whose bound is past this are not tokenized on the event loop (~4 ms): they keep the
# bound.
EXACT_UP_TO = 8_192


@dataclass(frozen=True)
class PromptCount:
    tokens: int
    exact: bool  # counted with the deployment's tokenizer; otherwise an upper bound


def _utf8(value: Any) -> int:
    if isinstance(value, str):
        return len(value.encode())
    if value is None:
        return 0
    return len(orjson.dumps(value))


def chat_bound(payload: dict[str, Any], *, max_model_len: int | None) -> int:
    """An upper bound on the prompt tokens of a chat request, for any byte-level tokenizer."""
    non_text = max_model_len or BOUND_NON_TEXT_PART_TOKENS
    total = BOUND_TEMPLATE_TOKENS
    for message in payload["messages"]:
        total += BOUND_TOKENS_PER_MESSAGE + _utf8(message.get("role")) + _utf8(message.get("name"))
        content = message.get("content")
        if isinstance(content, list):
            for part in content:
                text = part.get("text") if isinstance(part, dict) else None
                total += _utf8(text) if isinstance(text, str) else non_text
        else:
            total += _utf8(content)
        # Everything else a template may render from a message (tool calls and their ids).
        rest = {k: v for k, v in message.items() if k not in ("role", "name", "content")}
        total += _utf8(rest) if rest else 0
    if payload.get("tools"):
        total += BOUND_TOOLS_TEMPLATE_TOKENS + _utf8(payload["tools"])
    return total if max_model_len is None else min(total, max_model_len + 1)


def completion_bound(prompt: str | list[str]) -> int:
    """An upper bound on the prompt tokens of a completion (one prompt: see gateway.requests)."""
    text = prompt if isinstance(prompt, str) else "".join(prompt)
    return _utf8(text) + 2  # the tokenizer's BOS and EOS at most


class ChatTokenizer:
    """A deployment's tokenizer and chat template, loaded from its model directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        config_path = directory / "tokenizer_config.json"
        config = orjson.loads(config_path.read_bytes()) if config_path.exists() else {}
        self.special = {
            name: _token_text(config.get(name))
            for name in ("bos_token", "eos_token", "unk_token", "pad_token")
        }
        source = config.get("chat_template")
        if isinstance(source, list):  # several named templates: the default one
            source = next((t["template"] for t in source if t.get("name") == "default"), None)
        self.template_source: str | None = source if isinstance(source, str) else None

    @cached_property
    def _template(self) -> Any:
        # As Hugging Face renders chat templates: a sandbox, trimmed blocks, loop controls.
        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
        )
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: dt.datetime.now(dt.UTC).strftime(fmt)
        return env.from_string(self.template_source or "")

    def count_chat(self, messages: list[Any], tools: list[Any] | None) -> int | None:
        """The replica's prompt tokens for a chat request, or None when the template cannot
        render it (no template, or one that refuses these messages)."""
        if self.template_source is None:
            return None
        try:
            text = self._template.render(
                messages=messages, tools=tools, add_generation_prompt=True, **self.special
            )
        except (TemplateError, TypeError, ValueError, KeyError, AttributeError) as exc:
            logger.debug("chat template of %s did not render: %s", self.directory, exc)
            return None
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def count_text(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=True).ids)


def prompt_bound(payload: dict[str, Any], *, chat: bool, max_model_len: int | None) -> PromptCount:
    """The bound, in microseconds; exact only for a prompt of token ids."""
    if chat:
        return PromptCount(chat_bound(payload, max_model_len=max_model_len), exact=False)
    prompt = payload["prompt"]
    if not _is_text(prompt):
        return PromptCount(len(prompt), exact=True)  # token ids
    return PromptCount(completion_bound(prompt), exact=False)


def exact_count(
    payload: dict[str, Any], *, chat: bool, tokenizer: ChatTokenizer | None, bound: PromptCount
) -> PromptCount | None:
    """The replica's own count, or None when there is no tokenizer, the template cannot render
    the request, or the prompt is too long to count on the event loop.

    Rendering and tokenizing cost ~0.1 ms for a short chat and ~0.5 ms a KiB beyond (the
    tokenizer holds the GIL; bench/prompt_counting.py), so the gateway counts exactly only when
    the bound is not good enough: a limit it would refuse, or a max_tokens it cannot fit."""
    if bound.exact:
        return bound
    if tokenizer is None or bound.tokens > EXACT_UP_TO:
        return None
    if chat:
        counted = tokenizer.count_chat(payload["messages"], payload.get("tools"))
        return PromptCount(counted, exact=True) if counted is not None else None
    prompt = payload["prompt"]
    text = prompt if isinstance(prompt, str) else prompt[0]
    return PromptCount(tokenizer.count_text(text), exact=True)


def load(directory: str) -> ChatTokenizer | None:
    """The tokenizer in `directory`, or None (logged) when it cannot be read."""
    try:
        return ChatTokenizer(Path(directory))
    # Whatever a bad file makes the tokenizers library raise, the snapshot still applies.
    except Exception as exc:  # noqa: BLE001
        logger.warning("tokenizer in %s not loaded (prompts are bounded): %s", directory, exc)
        return None


def _is_text(prompt: str | list[Any]) -> bool:
    return isinstance(prompt, str) or (bool(prompt) and isinstance(prompt[0], str))


def _token_text(value: Any) -> str:
    if isinstance(value, dict):
        return str(value.get("content", ""))
    return value if isinstance(value, str) else ""


def _tojson(value: Any, indent: int | None = None) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent)


def _raise(message: str) -> None:
    raise TemplateError(message)
