"""What counting a prompt costs the gateway per request, and how far each count is from the truth.

    .venv/bin/python bench/prompt_counting.py [--repeat 2000]

Admission counts every request's prompt on the event loop before it reserves budget. This times,
in one run and for the same bodies, the three ways the gateway has had of counting:

- estimate: characters / 4 plus a few tokens a message (what admission reserved before; now only
  for route rules and for limits when no tokenizer is known);
- bound: UTF-8 bytes plus the template's markers (gateway.tokens.chat_bound; reserved when the
  deployment names no tokenizer);
- tokenizer: the deployment's chat template rendered and tokenized (gateway.tokens), with two
  tokenizers: simfleet's, and a byte-level BPE of 4,000 tokens trained here on the repository's
  own text, behind a ChatML template that renders tools as a system preamble (as Hermes does).

Each figure is the median of `--repeat` calls (microseconds), and each count is shown against
the BPE's, the closest thing here to a real model's tokenizer.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import orjson
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.requests import estimate_prompt_tokens  # after the path above
from gateway.tokens import ChatTokenizer, exact_count, prompt_bound
from simfleet.tokenizer import DIRECTORY as SIMFLEET_TOKENIZER

ROOT = Path(__file__).resolve().parent.parent

CHATML = (
    "{%- if tools %}<|im_start|>system\nYou may call one or more functions. Function "
    "signatures are within <tools></tools>:\n<tools>{% for tool in tools %}\n{{ tool | tojson }}"
    '{% endfor %}\n</tools>\nReturn each call as <tool_call>{"name": …, "arguments": …}'
    "</tool_call>.<|im_end|>\n{% endif %}"
    "{%- for message in messages %}<|im_start|>{{ message.role }}\n"
    "{%- if message.content is string %}{{ message.content }}{% endif %}<|im_end|>\n"
    "{%- endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a given location",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "The city, e.g. Boston, MA"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location"],
        },
    },
}
ENGLISH = (ROOT / "README.md").read_text()[:4096]
BODIES: dict[str, dict[str, Any]] = {
    "short chat": {"messages": [{"role": "user", "content": "How do canaries work?"}]},
    "one tool": {
        "messages": [{"role": "user", "content": "What's the weather like in Boston today?"}],
        "tools": [WEATHER],
    },
    "4 KiB English": {
        "messages": [
            {"role": "system", "content": "You answer questions about Tollgate."},
            {"role": "user", "content": ENGLISH},
        ]
    },
    "1,000 CJK chars": {"messages": [{"role": "user", "content": "東京の天気は晴れです。" * 100}]},
}


def bpe_directory(home: Path) -> Path:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=4000,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|im_start|>", "<|im_end|>"],
    )
    tokenizer.train([str(p) for p in sorted(ROOT.rglob("*.py")) if ".venv" not in p.parts], trainer)
    tokenizer.save(str(home / "tokenizer.json"))
    (home / "tokenizer_config.json").write_bytes(orjson.dumps({"chat_template": CHATML}))
    return home


def median_us(call: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        bpe = ChatTokenizer(bpe_directory(Path(home)))
        simfleet = ChatTokenizer(SIMFLEET_TOKENIZER)

        def exactly(tokenizer: ChatTokenizer) -> Callable[[dict[str, Any]], int]:
            def count(body: dict[str, Any]) -> int:
                bound = prompt_bound(body, chat=True, max_model_len=None)
                exact = exact_count(body, chat=True, tokenizer=tokenizer, bound=bound)
                assert exact is not None
                return exact.tokens

            return count

        ways: dict[str, Callable[[dict[str, Any]], int]] = {
            "estimate": lambda b: estimate_prompt_tokens(b, chat=True),
            "bound": lambda b: prompt_bound(b, chat=True, max_model_len=None).tokens,
            "simfleet tokenizer": exactly(simfleet),
            "BPE tokenizer": exactly(bpe),
        }
        print(f"median of {args.repeat} calls; count / BPE's count in brackets")
        print(f"{'body':<16}" + "".join(f"{name:>24}" for name in ways))
        for label, body in BODIES.items():
            truth = ways["BPE tokenizer"](body)
            cells = []
            for count in ways.values():
                cost = median_us(partial(count, body), args.repeat)
                cells.append(f"{cost:8.1f} µs ({count(body) / truth:4.2f}x)")
            print(f"{label:<16}" + "".join(f"{cell:>24}" for cell in cells))


if __name__ == "__main__":
    main()
