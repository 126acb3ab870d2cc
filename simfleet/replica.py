"""One simulated vLLM server: its engines, LoRA adapters, faults and health."""

from __future__ import annotations

import asyncio
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path

from simfleet.engine import Engine
from simfleet.metrics import ReplicaMetrics
from simfleet.profiles import AdapterProfile, Faults, ModelProfile, OutputLength, ReplicaSpec

OOM_MESSAGE = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB "
    "of which 1.12 GiB is free. Including non-PyTorch memory, this process has 78.06 GiB memory "
    "in use."
)


class AdapterError(Exception):
    """A LoRA load or unload that vLLM refuses; carries vLLM's status, type and message."""

    def __init__(self, status: int, error_type: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type


@dataclass(frozen=True)
class Served:
    """What a model name in a request resolves to: the engine and the behaviour to simulate."""

    name: str
    engine: Engine
    base: ModelProfile
    adapter: AdapterProfile | None
    root: str
    parent: str | None

    @property
    def output(self) -> OutputLength:
        return (self.adapter and self.adapter.output) or self.base.output

    @property
    def error_rate(self) -> float:
        if self.adapter is not None and self.adapter.error_rate is not None:
            return self.adapter.error_rate
        return self.base.error_rate

    @property
    def tool_call_validity(self) -> float:
        if self.adapter is not None and self.adapter.tool_call_validity is not None:
            return self.adapter.tool_call_validity
        return self.base.tool_call_validity

    @property
    def cost(self) -> float:
        return self.adapter.decode_cost_multiplier if self.adapter else 1.0


class Replica:
    def __init__(self, spec: ReplicaSpec, *, index: int, seed: int) -> None:
        self.spec = spec
        self.index = index
        self.seed = seed
        self.faults = spec.faults
        self.metrics = ReplicaMetrics(max(m.max_model_len for m in spec.models))
        self.engines = {
            profile.name: Engine(profile, self.metrics.for_model(profile), lambda: self.faults)
            for profile in spec.models
        }
        self.adapters: dict[str, tuple[str, str]] = {}  # name -> (path, parent model)
        self.created = int(time.time())
        self._requests = 0
        self._dead = False
        self._healthy_at = 0.0  # monotonic time after which a restarted replica is healthy
        for profile in spec.models:
            for name, path in profile.lora_modules.items():
                self.adapters[name] = (path, profile.name)

    async def start(self) -> None:
        for engine in self.engines.values():
            engine.start()

    async def stop(self) -> None:
        await asyncio.gather(*(engine.stop() for engine in self.engines.values()))

    # --- model names --------------------------------------------------------------------------

    def resolve(self, name: str) -> Served | None:
        engine = self.engines.get(name)
        if engine is not None:
            return Served(name, engine, engine.profile, None, engine.profile.root or name, None)
        if name in self.adapters:
            path, parent = self.adapters[name]
            engine = self.engines[parent]
            adapter = engine.profile.adapters.get(path, AdapterProfile())
            return Served(name, engine, engine.profile, adapter, path, parent)
        return None

    def served_models(self) -> list[Served]:
        names = [*self.engines, *self.adapters]
        return [served for name in names if (served := self.resolve(name)) is not None]

    # --- LoRA at run time ---------------------------------------------------------------------

    def load_adapter(self, name: str, path: str) -> None:
        if name in self.adapters or name in self.engines:
            raise AdapterError(
                400, "BadRequestError", f"The lora adapter '{name}' has already been loaded."
            )
        parent = next(
            (p for p in self.spec.models if path in p.adapters or Path(path).is_dir()), None
        )
        if parent is None:
            raise AdapterError(
                404, "NotFoundError", f"Loading lora {name} failed: No adapter found for {path}"
            )
        if sum(1 for _, base in self.adapters.values() if base == parent.name) >= parent.max_loras:
            raise AdapterError(
                400, "BadRequestError", f"Cannot load more than {parent.max_loras} adapters."
            )
        self.adapters[name] = (path, parent.name)

    def unload_adapter(self, name: str) -> None:
        if name not in self.adapters:
            raise AdapterError(404, "NotFoundError", f"The lora adapter '{name}' cannot be found.")
        del self.adapters[name]

    # --- health and faults --------------------------------------------------------------------

    @property
    def healthy(self) -> bool:
        return not self._dead and time.monotonic() >= self._healthy_at

    @property
    def dead_reason(self) -> str | None:
        return OOM_MESSAGE if self._dead else None

    def oom(self) -> None:
        """The engine runs out of GPU memory: in-flight requests fail, /health turns 503."""
        self._dead = True
        for engine in self.engines.values():
            engine.kill(OOM_MESSAGE)

    def restart(self) -> None:
        """Back after an OOM, once the warm-up (weights loading) has passed."""
        self._dead = False
        self._healthy_at = time.monotonic() + self.faults.restart_warmup_s
        for engine in self.engines.values():
            engine.revive()

    def set_faults(self, faults: Faults) -> None:
        self.faults = faults

    # --- randomness ---------------------------------------------------------------------------

    def request_rng(self, request_seed: int | None, prompt_key: str) -> random.Random:
        """Deterministic for a fleet seed: by arrival order, or by (seed, prompt) when the client
        passes its own `seed`, so that identical seeded requests get identical answers."""
        self._requests += 1
        if request_seed is not None:
            return random.Random(f"{self.seed}:{request_seed}:{prompt_key}")
        return random.Random(f"{self.seed}:{self.index}:{self._requests}")


def output_length(output: OutputLength, rng: random.Random) -> int:
    if output.distribution == "eos":
        # Geometric: the number of tokens until the first end-of-sequence draw.
        u = 1.0 - rng.random()
        return max(1, math.ceil(math.log(u) / math.log1p(-output.eos_probability)))
    mu = math.log(output.mean) - output.sigma**2 / 2  # so that the mean is output.mean
    return max(1, round(rng.lognormvariate(mu, output.sigma)))
