"""A continuous-batching engine, as vLLM's scheduler runs one: the performance model of simfleet.

Each step admits waiting requests while the KV cache (counted in tokens) has room, pays prefill
time for the prompt tokens it admitted, and emits one token for every running request. A step
costs more the more sequences run, so TTFT is queueing plus prefill and TPOT rises with
concurrency, as on the real server. When generated tokens outgrow the KV cache, the most recently
admitted request is preempted back to the queue and must recompute its prefill when readmitted.

Hot path: at a few thousand concurrent streams one step touches every running request, so the
step loop avoids per-token allocations and wakes each stream's writer at most once per step.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client import Histogram

from simfleet.metrics import ModelMetrics
from simfleet.profiles import Faults, ModelProfile


class EngineDead(Exception):
    """The engine crashed (simulated OOM); its requests fail until it is restarted."""


@dataclass(eq=False)
class SimRequest:
    """One request inside the engine. The API layer reads `generated` and waits on `wakeup`."""

    request_id: str
    model: str  # the served name asked for: the base model or one of its LoRA adapters
    prompt_tokens: int
    max_tokens: int
    # Tokens to generate before the answer ends by itself; >= max_tokens means cut by length.
    target_tokens: int
    cost: float = 1.0  # relative decode cost (LoRA adapters may be heavier)
    hang: bool = False  # a hung request holds its KV cache and never produces a token
    arrived: float = field(default_factory=time.monotonic)
    generated: int = 0
    preemptions: int = 0
    scheduled_at: float | None = None
    first_token_at: float | None = None
    finished_at: float | None = None
    finish_reason: str | None = None
    error: str | None = None
    kv_tokens: int = 0
    _wakeup: asyncio.Future[None] | None = None

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    def wake(self) -> None:
        waiter = self._wakeup
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self) -> None:
        """Until the engine produced a token or finished this request."""
        self._wakeup = asyncio.get_running_loop().create_future()
        await self._wakeup
        self._wakeup = None


def observe_many(histogram: Histogram, value: float, count: int) -> None:
    """`count` observations of one value in O(1) instead of O(count).

    Every running request sees the same inter-token latency in a step, and a step can hold
    thousands of them. prometheus_client has no bulk observe, so this updates the child's
    bucket and sum directly, exactly as `count` calls to observe() would.
    """
    if count <= 0:
        return
    bounds = histogram._upper_bounds
    histogram._sum.inc(value * count)
    histogram._buckets[bisect.bisect_left(bounds, value)].inc(count)


class Engine:
    def __init__(
        self,
        profile: ModelProfile,
        metrics: ModelMetrics,
        faults: Callable[[], Faults],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.profile = profile
        self.metrics = metrics
        self._faults = faults
        self._clock = clock
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.kv_used = 0
        self.dead_reason: str | None = None
        self._work = asyncio.Event()
        self._last_emit = clock()
        self._task: asyncio.Task[None] | None = None

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def kill(self, reason: str) -> None:
        """Simulates the engine process dying: every request in it fails at once."""
        self.dead_reason = reason
        for request in [*self.running, *self.waiting]:
            self._finish(request, "error", error=reason)
        self.running.clear()
        self.waiting.clear()
        self.kv_used = 0
        self._publish_gauges()

    def revive(self) -> None:
        self.dead_reason = None

    # --- requests -----------------------------------------------------------------------------

    def submit(self, request: SimRequest) -> None:
        if self.dead_reason is not None:
            raise EngineDead(self.dead_reason)
        request.arrived = self._clock()
        m = self.metrics
        m.params_n.observe(1)
        m.params_max_tokens.observe(request.max_tokens)
        m.max_num_generation_tokens.observe(request.max_tokens)
        self.waiting.append(request)
        self._publish_gauges()
        self._work.set()

    def abort(self, request: SimRequest) -> None:
        """The client went away: stop generating for it at once and free its KV cache."""
        if request.done:
            return
        if request in self.waiting:
            self.waiting.remove(request)
        elif request in self.running:
            self.running.remove(request)
            self.kv_used -= request.kv_tokens
        # vLLM does not count client aborts in request_success{finished_reason="abort"}.
        request.finish_reason = "abort"
        request.finished_at = self._clock()
        request.kv_tokens = 0
        request.wake()
        self._publish_gauges()

    # --- the step loop ------------------------------------------------------------------------

    @property
    def kv_capacity(self) -> int:
        return max(1, int(self.profile.kv_cache_tokens * self._faults().kv_cache_fraction))

    async def _loop(self) -> None:
        next_step = self._clock()
        while True:
            if not self.running and not self.waiting:
                self._work.clear()
                await self._work.wait()
                next_step = self._clock()
            duration = self._plan_step()
            # Keep to the model's schedule: when the work of a step itself took longer than
            # the step, the next one starts at once (the simulator is then the bottleneck).
            next_step = max(next_step + duration, self._clock())
            delay = next_step - self._clock()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                await asyncio.sleep(0)
            self._emit()

    def _plan_step(self) -> float:
        """Admits what fits and returns the step's duration in seconds."""
        faults = self._faults()
        speed = self.profile.speed
        capacity = self.kv_capacity
        now = self._clock()
        prefill_tokens = 0
        while self.waiting and len(self.running) < self.profile.max_num_seqs:
            candidate = self.waiting[0]
            # Preempted requests recompute their prompt and what they had generated.
            need = candidate.prompt_tokens + candidate.generated
            if self.kv_used + need > capacity:
                break
            self.waiting.popleft()
            candidate.kv_tokens = need
            self.kv_used += need
            if candidate.scheduled_at is None:
                candidate.scheduled_at = now
                self.metrics.queue_time.observe(now - candidate.arrived)
            self.running.append(candidate)
            prefill_tokens += need
        if prefill_tokens:
            self.metrics.prompt_tokens.inc(prefill_tokens)
            self.metrics.prompt_tokens_computed.inc(prefill_tokens)
        decode_cost = sum(r.cost for r in self.running) if self.running else 0.0
        decode_ms = (speed.step_base_ms + speed.decode_per_seq_ms * decode_cost) * (
            faults.tpot_multiplier
        )
        prefill_ms = speed.prefill_per_token_ms * prefill_tokens * faults.ttft_multiplier
        self.metrics.iteration_tokens.observe(prefill_tokens + len(self.running))
        self._publish_gauges()
        return (decode_ms + prefill_ms) / 1000.0

    def _emit(self) -> None:
        now = self._clock()
        # The time since the previous token, as measured, not as planned: when the simulator
        # itself falls behind, its metrics show it.
        step_seconds = now - self._last_emit
        self._last_emit = now
        producing = 0
        later_tokens = 0
        still_running: list[SimRequest] = []
        for request in self.running:
            if request.done:  # aborted during the step
                continue
            if request.hang:
                still_running.append(request)
                continue
            request.generated += 1
            request.kv_tokens += 1
            self.kv_used += 1
            producing += 1
            if request.first_token_at is None:
                request.first_token_at = now
                self.metrics.ttft.observe(now - request.arrived)
            else:
                later_tokens += 1
            if request.generated >= min(request.target_tokens, request.max_tokens):
                reason = "length" if request.generated >= request.max_tokens else "stop"
                self.kv_used -= request.kv_tokens
                self._finish(request, reason)
            else:
                still_running.append(request)
                request.wake()
        self.running = still_running
        self.metrics.generation_tokens.inc(producing)
        observe_many(self.metrics.itl, step_seconds, later_tokens)
        self._preempt_if_full()
        self._publish_gauges()

    def _preempt_if_full(self) -> None:
        capacity = self.kv_capacity
        while self.kv_used > capacity and len(self.running) > 1:
            victim = self.running.pop()  # the most recently admitted, as vLLM does
            self.kv_used -= victim.kv_tokens
            victim.kv_tokens = 0
            victim.preemptions += 1
            self.metrics.preemptions.inc()
            self.waiting.appendleft(victim)

    def _finish(self, request: SimRequest, reason: str, error: str | None = None) -> None:
        now = self._clock()
        request.finish_reason = reason
        request.finished_at = now
        request.error = error
        request.kv_tokens = 0
        m = self.metrics
        m.success[reason].inc()
        m.request_prompt_tokens.observe(request.prompt_tokens)
        m.request_generation_tokens.observe(request.generated)
        m.e2e.observe(now - request.arrived)
        m.request_preemptions.observe(request.preemptions)
        m.prefill_kv_computed.observe(request.prompt_tokens)
        if request.scheduled_at is not None:
            m.inference_time.observe(now - request.scheduled_at)
            first = request.first_token_at or now
            m.prefill_time.observe(first - request.scheduled_at)
            m.decode_time.observe(now - first)
        if request.generated > 1 and request.first_token_at is not None:
            m.tpot.observe((now - request.first_token_at) / (request.generated - 1))
        request.wake()

    def _publish_gauges(self) -> None:
        m = self.metrics
        m.running.set(len(self.running))
        m.waiting.set(len(self.waiting))
        m.waiting_capacity.set(len(self.waiting))
        m.kv_usage.set(min(1.0, self.kv_used / self.kv_capacity))
