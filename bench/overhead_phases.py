"""The gateway overhead bench's driver and its two phases: added latency under held streams, and
the rate sweep."""

from __future__ import annotations

import math
import multiprocessing
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from overhead_load import Job, Outcome, load_generator
from overhead_setup import CAPACITY_MS
from overhead_targets import Processes, Target, cpu_seconds, http, machine_cpu_seconds


class Bench:
    def __init__(self, procs: Processes, targets: list[Target], redis_pid: int | None) -> None:
        self.procs = procs
        self.targets = targets
        self.upstream = targets[0].base_url
        self._conn, child = multiprocessing.Pipe()
        cpus = procs.layout.get("loadgen", set())
        self.loadgen = multiprocessing.Process(
            target=load_generator, args=(child, cpus, procs.nice), daemon=True
        )
        self.loadgen.start()
        self.redis_pid = redis_pid
        self.noisy = False
        self.others_limit = 0.4  # cores used by other processes that disturb a run

    def close(self) -> None:
        self._conn.send(None)
        self.loadgen.join(timeout=10)

    def ours(self) -> dict[str, int]:
        pids = {"main": os.getpid(), "loadgen": self.loadgen.pid or 0}
        pids |= {name: p.pid for name, p in self.procs.started.items()}
        if self.redis_pid:
            pids["redis"] = self.redis_pid
        return pids

    def _upstream_busy(self) -> int:
        _, body = http("GET", f"{self.upstream}/metrics")
        return sum(
            int(float(line.rsplit(" ", 1)[1]))
            for line in body.decode().splitlines()
            if line.startswith(("vllm:num_requests_running{", "vllm:num_requests_waiting{"))
        )

    def settle(self) -> None:
        """Until simfleet runs nothing and every proxy is idle; one busy for 10 s is restarted."""
        deadline = time.monotonic() + 10
        while True:
            pids = {t.name: t.process.pid for t in self.targets if t.process is not None}
            pids["simfleet"] = self.procs.started["simfleet"].pid
            before = cpu_seconds(pids)
            time.sleep(0.3)
            busy = {k: (v - before[k]) / 0.3 for k, v in cpu_seconds(pids).items()}
            if self._upstream_busy() == 0 and max(busy.values()) < 0.05:
                return
            if time.monotonic() > deadline:
                break
        restarted = False
        for target in self.targets:
            if target.start is not None and busy.get(target.name, 0.0) >= 0.05:
                progress(f"{target.name} still busy after 10 s (its backlog): restarting it")
                self.procs.stop(target.name)
                target.process = target.start()
                restarted = True
        if not restarted:
            raise SystemExit("simfleet never went idle")
        self.settle()

    def quiet(self) -> None:
        """Until the rest of the machine is under the limit: 20 s at most, 5 s while noisy."""
        deadline = time.monotonic() + (5 if self.noisy else 20)
        while time.monotonic() < deadline:
            other = self._other_cores(0.5)
            if other < self.others_limit:
                self.noisy = False
                return
        if not self.noisy:
            progress(f"the machine is not quiet ({other:.2f} cores used by others): going on")
        self.noisy = True

    def _other_cores(self, seconds: float) -> float:
        pids = self.ours()
        machine, ours = machine_cpu_seconds()[0], sum(cpu_seconds(pids).values())
        time.sleep(seconds)
        machine = machine_cpu_seconds()[0] - machine
        ours = sum(cpu_seconds(pids).values()) - ours
        return max(0.0, (machine - ours) / seconds)

    def run(self, target: Target, job: Job) -> Outcome:
        """One measured run, repeated once when other work on the machine disturbed it."""
        kept: Outcome | None = None
        for _ in range(2):
            self.settle()
            self.quiet()
            outcome = self._run_once(target, job)
            outcome.disturbed = outcome.other_cores > self.others_limit
            if kept is None or outcome.other_cores < kept.other_cores:
                kept = outcome
            if not kept.disturbed:
                break
            progress(f"{target.name}: others used {outcome.other_cores:.2f} cores: again")
        assert kept is not None
        return kept

    def _run_once(self, target: Target, job: Job) -> Outcome:
        pids = self.ours()
        watch = {"loadgen": "loadgen", "simfleet": "simfleet"}  # shown as: process
        if target.process is not None:
            watch["proxy"] = target.name
        if target.name == "tollgate" and "redis" in pids:
            watch["redis"] = "redis"
        before, (busy, stolen) = cpu_seconds(pids), machine_cpu_seconds()
        started = time.monotonic()
        self._conn.send(job)
        outcome: Outcome = self._conn.recv()
        elapsed = time.monotonic() - started
        after, (busy_after, stolen_after) = cpu_seconds(pids), machine_cpu_seconds()
        used = {k: after[k] - before.get(k, after[k]) for k in after}
        outcome.cpu = {label: round(used[name] / elapsed, 2) for label, name in watch.items()}
        outcome.other_cores = max(0.0, (busy_after - busy - sum(used.values())) / elapsed)
        outcome.steal_cores = (stolen_after - stolen) / elapsed
        return outcome


def progress(line: str) -> None:
    print(f"  {line}", file=sys.stderr, flush=True)


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True)
class Figures:
    rt: tuple[float, float]  # p50, p99 in ms
    ttft: tuple[float, float]

    @classmethod
    def of(cls, *outcomes: Outcome) -> Figures:
        """The percentiles of one run, or of several runs' samples pooled."""

        def pair(values: list[float]) -> tuple[float, float]:
            return percentile(values, 0.5), percentile(values, 0.99)

        rt = [v for outcome in outcomes for v in outcome.rt_ms]
        ttft = [v for outcome in outcomes for v in outcome.ttft_ms]
        return cls(rt=pair(rt), ttft=pair(ttft))

    def minus(self, other: Figures) -> Figures:
        return Figures(
            rt=(self.rt[0] - other.rt[0], self.rt[1] - other.rt[1]),
            ttft=(self.ttft[0] - other.ttft[0], self.ttft[1] - other.ttft[1]),
        )

    @property
    def worst_p99(self) -> float:
        return max(self.rt[1], self.ttft[1])


def fmt(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f}"


Level = dict[str, tuple[Outcome, Figures]]


def reference(level: Level) -> Figures:
    """What the targets' figures are compared with: both direct runs of the level, pooled (a
    p99 from twice the samples, taken before and after the proxies ran)."""
    return Figures.of(level["direct"][0], level["direct-again"][0])


def concurrency_phase(
    bench: Bench, levels: list[int], seconds: float, probe_rate: float
) -> dict[int, Level]:
    direct, tollgate, nginx, litellm = bench.targets
    # Direct once more before LiteLLM (whose overload would disturb what follows): the gap
    # between the two direct runs is the noise floor, and both together are the reference.
    order = [
        (direct, "direct"),
        (tollgate, "tollgate"),
        (nginx, "nginx"),
        (direct, "direct-again"),
        (litellm, "litellm"),
    ]
    results: dict[int, Level] = {}
    for level in levels:
        results[level] = {}
        for target, label in order:
            job = Job(target.url, target.headers, probe_rate, seconds, level, seed=level)
            outcome = bench.run(target, job)
            figures = Figures.of(outcome)
            results[level][label] = (outcome, figures)
            progress(
                f"{level} streams, {label}: RT p50/p99 {fmt(figures.rt[0])}/{fmt(figures.rt[1])} "
                f"ms, TTFT {fmt(figures.ttft[0])}/{fmt(figures.ttft[1])} ms, open streams >= "
                f"{outcome.streams_min_open}, errors {outcome.errors}, cpu {outcome.cpu}, "
                f"others {outcome.other_cores:.2f}, steal {outcome.steal_cores:.2f}"
            )
    return results


@dataclass
class Sweep:
    sustained: float = 0.0  # the last rate with p99 added <= the limit
    capacity: float = 0.0  # the last rate answered in full with p99 added < CAPACITY_MS
    strict_end: str = ""  # why the latency limit failed (empty while it holds)
    capacity_end: str = ""
    cpu: dict[str, float] = field(default_factory=dict)  # at the sustained rate


def sweep_window(rate: float, quick: bool) -> float:
    # Enough samples for a p99 (500: the five slowest decide it), within 20 s at the lowest rates.
    return min(8.0 if quick else 20.0, max(1.5 if quick else 2.0, (250 if quick else 500) / rate))


def rate_phase(bench: Bench, rates: list[float], limit_ms: float, quick: bool) -> dict[str, Sweep]:
    direct, *proxies = bench.targets
    sweeps = {t.name: Sweep() for t in bench.targets}
    active = list(proxies)  # until over capacity
    reference: list[float] = []  # direct's p50 round trip at the first rate

    def measure(target: Target, rate: float) -> tuple[Outcome, Figures]:
        job = Job(target.url, target.headers, rate, sweep_window(rate, quick), seed=int(rate))
        outcome = bench.run(target, job)
        return outcome, Figures.of(outcome)

    def direct_at(rate: float) -> Figures | None:
        problem: str | None = None
        for _ in range(2):  # once more before calling the bench itself saturated
            outcome, figures = measure(direct, rate)
            reference[:] = reference or [figures.rt[0]]
            problem = failure(outcome, None, math.inf)
            if problem is None and figures.rt[0] - reference[0] > 5:
                problem = f"its p50 round trip rose {figures.rt[0] - reference[0]:.1f} ms"
            progress(
                f"{rate:g}/s direct: RT p50/p99 {fmt(figures.rt[0])}/{fmt(figures.rt[1])} ms, "
                f"TTFT p99 {fmt(figures.ttft[1])} ms, {problem or 'ok'}, cpu {outcome.cpu}"
            )
            if problem is None:
                sweeps[direct.name].sustained = sweeps[direct.name].capacity = rate
                return figures
        sweeps[direct.name].strict_end = f"saturates at {rate:g}/s: {problem}"
        return None

    def attempt(target: Target, rate: float, base: Figures) -> tuple[str | None, str | None]:
        """Why this rate fails the latency limit, and capacity (None: it passes)."""
        outcome, figures = measure(target, rate)
        added = figures.minus(base)
        strict = failure(outcome, added, limit_ms)
        loose = failure(outcome, added, CAPACITY_MS)
        progress(
            f"{rate:g}/s {target.name}: added p99 RT {fmt(added.rt[1])} ms, TTFT "
            f"{fmt(added.ttft[1])} ms, {strict or 'ok'}, cpu {outcome.cpu}"
        )
        sweep = sweeps[target.name]
        if strict is None and not sweep.strict_end:
            sweep.sustained, sweep.cpu = rate, outcome.cpu
        if loose is None:
            sweep.capacity = rate
        return strict, loose

    def bench_limit(rate: float, why: str) -> None:
        for target in active:
            sweep = sweeps[target.name]
            sweep.strict_end = sweep.strict_end or f"at least: {why}"
            sweep.capacity_end = sweep.capacity_end or f"at least: {why}"

    for rate in rates:
        if not active:
            break
        base = direct_at(rate)
        if base is None:
            bench_limit(rate, f"direct saturates at {rate:g}/s")
            break
        first = {t.name: attempt(t, rate, base) for t in active}
        doubtful = [
            t
            for t in active
            if first[t.name][1] is not None
            or (first[t.name][0] is not None and not sweeps[t.name].strict_end)
        ]
        if not doubtful:
            continue
        # A failing step is measured once more, against a fresh direct run, before it counts.
        base = direct_at(rate)
        if base is None:
            bench_limit(rate, f"direct saturates at {rate:g}/s")
            break
        for target in doubtful:
            again = attempt(target, rate, base)
            sweep = sweeps[target.name]
            strict = again[0] if first[target.name][0] is not None else None
            loose = again[1] if first[target.name][1] is not None else None
            if strict is not None and not sweep.strict_end:
                sweep.strict_end = f"fails at {rate:g}/s: {strict}"
            if loose is not None:
                sweep.capacity_end = f"fails at {rate:g}/s: {loose}"
                sweep.strict_end = sweep.strict_end or sweep.capacity_end
                active.remove(target)
    else:
        bench_limit(rates[-1], f"the sweep ends at {rates[-1]:g}/s")
    return sweeps


def failure(outcome: Outcome, added: Figures | None, limit_ms: float) -> str | None:
    """Why a run does not count at this limit, or None."""
    if outcome.errors:
        return f"{outcome.errors} errors ({'; '.join(outcome.error_examples)})"
    if outcome.max_lag_ms > 50:
        return f"the client fell {outcome.max_lag_ms:.0f} ms behind its schedule"
    if added is not None and added.worst_p99 > limit_ms:
        return f"p99 added {added.worst_p99:.1f} ms > {limit_ms:g} ms"
    return None
