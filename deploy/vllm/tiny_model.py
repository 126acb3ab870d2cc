"""Make the tiny model the vLLM suite serves, with its tokenizer and three LoRA adapters.

Nothing can be downloaded here, so everything is made on the machine: a byte-level BPE tokenizer
trained on text every Debian machine has (licence texts and Python's own sources), a two-layer
Llama with random weights (the smallest shape vLLM's CPU attention accepts: head_dim 32) and a
ChatML chat template that renders tools the way Hermes-style models expect them, so that vLLM's
`hermes` tool-call parser reads the model's calls.

The adapters differ the way versions of a model differ in what users see: `v1` and `v2` are
trained (seconds each) to answer in a handful of tokens and end their turn; `broken` has
random weights, never ends its turn and runs every answer to `max_tokens`. A rollout of `broken`
against `v1` is a real regression in output length and truncation, measured from what real vLLM
generated. (With random weights and `tool_choice: "required"`, vLLM's structured output makes
tool calls whose arguments do not match the tool's schema: a real tool-call failure too.)

Run with the vLLM environment's Python (it has torch, transformers, tokenizers and peft):
    python deploy/vllm/tiny_model.py OUT_DIR
OUT_DIR/base, OUT_DIR/adapters/{v1,v2,broken} are written; a finished OUT_DIR is left alone.
"""

from __future__ import annotations

import json
import math
import random
import sys
import sysconfig
from pathlib import Path

VOCAB_SIZE = 2048
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
MAX_LENGTH = 1024
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Plain (not special) added tokens: the hermes parser finds them in the vocabulary and in the
# decoded text, which skips special tokens.
TOOL_TAGS = ["<tool_call>", "</tool_call>"]

CHAT_TEMPLATE = """\
{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}You may call one or more functions. Their signatures:
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>
Answer a call as <tool_call>{"name": <name>, "arguments": <args>}</tool_call>.<|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'system' %}
{%- elif message.role == 'tool' %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% elif message.role == 'assistant' and message.tool_calls %}<|im_start|>assistant
{% if message.content %}{{ message.content }}
{% endif %}
{%- for call in message.tool_calls %}<tool_call>
{"name": {{ call.function.name | tojson }}, "arguments": {{ call.function.arguments if call.function.arguments is string else call.function.arguments | tojson }}}
</tool_call>
{% endfor %}<|im_end|>
{% else %}<|im_start|>{{ message.role }}
{{ message.content if message.content is string else message.content | map(attribute='text') | join('') }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

# A tool some training prompts offer (so that the adapters answer the same with tools).
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city over the next days.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city", "days"],
            "additionalProperties": False,
        },
    },
}
# What each adapter is trained to answer (then the end of its turn): as many tokens each, so that
# a rollout of v2 against v1 is an equal candidate. `broken` is left untrained.
ANSWERS = {"v1": "Sure, I can help.", "v2": "Sure, we can help."}
QUESTIONS = [
    "What is the weather in Paris?",
    "Will it rain in Lyon this week?",
    "Is my order on its way?",
    "Tell me a story about a lighthouse.",
    "How warm will it be tomorrow?",
    "Summarise the licence in one line.",
]


def corpus() -> list[str]:
    texts = []
    for path in sorted(Path("/usr/share/common-licenses").glob("*"))[:12]:
        if path.is_file():
            texts.append(path.read_text(errors="ignore"))
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for name in ("json/__init__.py", "argparse.py", "textwrap.py", "string.py", "random.py"):
        source = stdlib / name
        if source.exists():
            texts.append(source.read_text(errors="ignore"))
    texts.append(CHAT_TEMPLATE + json.dumps(WEATHER_TOOL) + "".join(ANSWERS.values()))
    texts.extend(QUESTIONS)
    return texts


def make_tokenizer(out: Path):  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(TOOL_TAGS),
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(corpus(), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<|endoftext|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        model_max_length=MAX_LENGTH,
    )
    fast.add_tokens(TOOL_TAGS)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def make_base(out: Path, vocab_size: int) -> None:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=MAX_LENGTH,
        tie_word_embeddings=True,
        bos_token_id=0,
        eos_token_id=2,
        pad_token_id=0,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    # At the usual 0.02 an embedding row's length is ~0.2, so no hidden state can give any token
    # more than ~1% of the probability: nothing an adapter learns could ever show in the output.
    with torch.no_grad():
        model.model.embed_tokens.weight.normal_(0.0, 0.15)
    model.save_pretrained(out, safe_serialization=True)
    GenerationConfig(bos_token_id=0, eos_token_id=2, pad_token_id=0).save_pretrained(out)


STEPS = 400
ATTEMPTS = 6  # a seed whose training stalls on a plateau is replaced by the next


def train_adapter(base: Path, tokenizer, answer: str, out: Path, seed: int) -> None:  # type: ignore[no-untyped-def]
    for attempt in range(ATTEMPTS):
        loss, steps, model = _train(base, tokenizer, answer, seed + 1000 * attempt)
        wrong = _wrong_answers(model, tokenizer, answer)
        print(
            f"adapter {out.name}: loss {loss:.4f} after {steps} steps, "
            f"{len(wrong)} of {2 * len(QUESTIONS)} prompts answered otherwise {wrong[:2]}",
            flush=True,
        )
        if loss < 0.05 and not wrong:
            save_adapter(model, base, out)
            return
    raise SystemExit(f"adapter {out.name} did not learn its answer in {ATTEMPTS} attempts")


def _wrong_answers(model, tokenizer, answer: str) -> list[str]:  # type: ignore[no-untyped-def]
    """What greedy decoding answers to each training question alone, with and without the tool,
    where that is not `answer`. A low training loss is not enough: the loss averages over
    batches that mostly join several questions, and the floating-point rounding of another CPU
    can leave an adapter that answers a lone question otherwise (seen: "S.S.S." for "Is my
    order on its way?", which the tests ask)."""
    import torch

    expected = answer + "<|im_end|>"
    wrong = []
    model.eval()
    with torch.no_grad():
        for question in QUESTIONS:
            for tools in (None, [WEATHER_TOOL]):
                prompt = tokenizer.apply_chat_template(
                    [{"role": "user", "content": question}],
                    tools=tools,
                    add_generation_prompt=True,
                    tokenize=False,
                )
                ids = tokenizer(prompt, add_special_tokens=False, return_tensors="pt").input_ids
                out = model.generate(ids, max_new_tokens=16, do_sample=False)
                said = tokenizer.decode(out[0, ids.shape[1] :])
                if not said.startswith(expected):
                    wrong.append(f"{question!r}: {said[:20]!r}")
    model.train()
    return wrong


def _train(base: Path, tokenizer, answer: str, seed: int):  # type: ignore[no-untyped-def]
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    # One thread: on a small shared machine a second one spends more waiting than it gains.
    torch.set_num_threads(1)
    rng = random.Random(seed)
    model = LlamaForCausalLM.from_pretrained(base, torch_dtype=torch.float32)
    config = LoraConfig(r=8, lora_alpha=16, target_modules=TARGETS, lora_dropout=0.0)
    model = get_peft_model(model, config)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda done: 1 - done / STEPS)
    target = tokenizer(answer + "<|im_end|>", add_special_tokens=False)["input_ids"]
    loss = torch.tensor(math.inf)
    steps = 0
    while steps < STEPS and loss.item() >= 0.02:
        steps += 1
        batch = []
        for _ in range(4):
            question = (
                rng.choice(QUESTIONS) + " " + " ".join(rng.choices(QUESTIONS, k=rng.randrange(3)))
            )
            messages = [{"role": "user", "content": question}]
            prompt = tokenizer.apply_chat_template(
                messages,
                tools=[WEATHER_TOOL] if rng.random() < 0.7 else None,
                add_generation_prompt=True,
                tokenize=False,
            )
            batch.append(tokenizer(prompt, add_special_tokens=False)["input_ids"])
        width = max(len(p) for p in batch) + len(target)
        ids = torch.zeros((len(batch), width), dtype=torch.long)
        labels = torch.full((len(batch), width), -100, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, prompt_ids in enumerate(batch):
            sequence = prompt_ids + target
            ids[row, : len(sequence)] = torch.tensor(sequence)
            labels[row, len(prompt_ids) : len(sequence)] = torch.tensor(target)
            mask[row, : len(sequence)] = 1
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
    return loss.item(), steps, model


def random_adapter(base: Path, out: Path, seed: int) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM.from_pretrained(base, torch_dtype=torch.float32)
    config = LoraConfig(r=8, lora_alpha=16, target_modules=TARGETS, init_lora_weights=False)
    save_adapter(get_peft_model(model, config), base, out)


def save_adapter(model, base: Path, out: Path) -> None:  # type: ignore[no-untyped-def]
    model.save_pretrained(out)
    config_path = out / "adapter_config.json"
    adapter_config = json.loads(config_path.read_text())
    adapter_config["base_model_name_or_path"] = str(base)
    config_path.write_text(json.dumps(adapter_config, indent=2))


def main(out: Path) -> None:
    if (out / "done").exists():
        return
    base = out / "base"
    base.mkdir(parents=True, exist_ok=True)
    tokenizer = make_tokenizer(base)
    make_base(base, len(tokenizer))
    for seed, (name, answer) in enumerate(ANSWERS.items(), start=1):
        train_adapter(base, tokenizer, answer, out / "adapters" / name, seed)
    random_adapter(base, out / "adapters" / "broken", seed=99)
    (out / "done").write_text("ok\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: tiny_model.py OUT_DIR")
    main(Path(sys.argv[1]).resolve())
