"""simfleet's tokenizer as a model directory (`tokenizer.json`, `tokenizer_config.json`).

The gateway counts prompts with a deployment's own tokenizer and chat template, as vLLM does;
for simfleet's models that is this one. It counts exactly what simfleet.text counts: a word or a
punctuation mark is a token, each message adds CHAT_TOKENS_PER_MESSAGE markers, the generation
prompt adds CHAT_GENERATION_PROMPT_TOKENS, and tool definitions and calls count as their text.
The files in simfleet/tokenizer/ are what `write` makes (a test holds them together):
`python -m simfleet.tokenizer DIR` writes them anew.
"""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
from tokenizers import AddedToken, Regex, Tokenizer, pre_tokenizers
from tokenizers.models import WordLevel

from simfleet.text import CHAT_GENERATION_PROMPT_TOKENS, CHAT_TOKENS_PER_MESSAGE

DIRECTORY = Path(__file__).parent / "tokenizer"
MARKER = "<|m|>"
# The message's text as simfleet.text reads it: a string, or the text of its parts joined.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    + MARKER * CHAT_TOKENS_PER_MESSAGE
    + "{%- if message.content is string %} {{ message.content }}"
    "{%- elif message.content %}{% for part in message.content %}"
    "{% if part is mapping and part.text is defined %} {{ part.text }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{%- for call in message.tool_calls or [] %}"
    " {{ call.function.name }} {{ call.function.arguments }}"
    "{%- endfor %}"
    "{%- endfor %}"
    "{%- if tools %} {{ tools | tojson }}{% endif %}"
    "{%- if add_generation_prompt %}" + MARKER * CHAT_GENERATION_PROMPT_TOKENS + "{% endif %}"
)


def build() -> Tokenizer:
    # Every word is the unknown token: only the count matters.
    tokenizer = Tokenizer(WordLevel({"[UNK]": 0}, unk_token="[UNK]"))  # noqa: S106 -- a vocabulary entry
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.WhitespaceSplit(),
            pre_tokenizers.Split(Regex(r"\w+|[^\w\s]"), behavior="isolated"),
        ]
    )
    tokenizer.add_special_tokens([AddedToken(MARKER, special=True)])
    return tokenizer


def write(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    build().save(str(directory / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": CHAT_TEMPLATE}
    (directory / "tokenizer_config.json").write_bytes(
        orjson.dumps(config, option=orjson.OPT_INDENT_2) + b"\n"
    )


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else DIRECTORY)
