"""The gateway overhead bench's load generator: probes and held streams, run in its own process."""

from __future__ import annotations

import asyncio
import os
import random
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import aiohttp
import orjson
import uvloop
from overhead_setup import FAST_MODEL, MAX_TOKENS, PROMPT, STREAM_MODEL, STREAM_TOKENS


@dataclass(frozen=True)
class Job:
    url: str
    headers: dict[str, str]
    rate: float  # probe arrivals per second (Poisson); every other probe streams
    seconds: float  # the measured window
    streams: int = 0  # streams held open through the target meanwhile
    seed: int = 1


@dataclass
class Outcome:
    rt_ms: list[float] = field(default_factory=list)
    ttft_ms: list[float] = field(default_factory=list)
    sent: int = 0
    errors: int = 0
    error_examples: list[str] = field(default_factory=list)
    max_lag_ms: float = 0.0  # how far the dispatcher fell behind the arrival schedule
    streams_min_open: int = 0
    stream_events_per_s: float = 0.0
    stream_errors: int = 0
    cpu: dict[str, float] = field(default_factory=dict)  # cores; filled in by the parent
    other_cores: float = 0.0  # everything else on the machine meanwhile
    steal_cores: float = 0.0  # taken by the hypervisor meanwhile
    disturbed: bool = False  # others used more than the limit


def probe_body(*, stream: bool) -> dict[str, Any]:
    return {
        "model": FAST_MODEL,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": MAX_TOKENS,
        "ignore_eos": True,
        "stream": stream,
    }


def has_content(event: bytes) -> bool:
    if not event.startswith(b"data: ") or event == b"data: [DONE]":
        return False
    try:
        payload = orjson.loads(event[6:])
    except orjson.JSONDecodeError:
        return False
    return any((c.get("delta") or {}).get("content") for c in payload.get("choices") or ())


class Load:
    def __init__(self, session: aiohttp.ClientSession, job: Job) -> None:
        self.session = session
        self.job = job
        self.out = Outcome()
        self.headers = {"content-type": "application/json", **job.headers}
        self.plain = orjson.dumps(probe_body(stream=False))
        self.streaming = orjson.dumps(probe_body(stream=True))
        self.open_streams = 0
        self.stream_events = 0

    def _error(self, what: str) -> None:
        self.out.errors += 1
        if len(self.out.error_examples) < 3:
            self.out.error_examples.append(what[:200])

    async def plain_probe(self) -> None:
        started = time.perf_counter()
        try:
            async with self.session.post(
                self.job.url, data=self.plain, headers=self.headers
            ) as response:
                body = await response.read()
            elapsed = time.perf_counter() - started
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            self._error(f"{type(exc).__name__}: {exc}")
            return
        if response.status != 200 or b"choices" not in body:
            self._error(f"HTTP {response.status}: {body[:150]!r}")
            return
        self.out.rt_ms.append(elapsed * 1000)

    async def stream_probe(self) -> None:
        started = time.perf_counter()
        first: float | None = None
        buffer, tail = b"", b""
        try:
            async with self.session.post(
                self.job.url, data=self.streaming, headers=self.headers
            ) as response:
                if response.status != 200:
                    self._error(f"HTTP {response.status}: {(await response.read())[:150]!r}")
                    return
                async for chunk in response.content.iter_any():
                    if first is None:
                        now = time.perf_counter()
                        buffer += chunk
                        *events, buffer = buffer.split(b"\n\n")
                        if any(has_content(event) for event in events):
                            first = now
                    tail = (tail + chunk)[-64:]
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            self._error(f"{type(exc).__name__}: {exc}")
            return
        if first is None or not tail.rstrip().endswith(b"data: [DONE]"):
            self._error(f"incomplete stream: {tail!r}")
            return
        self.out.ttft_ms.append((first - started) * 1000)

    async def held_stream(self, index: int) -> None:
        rng = random.Random(index)
        await asyncio.sleep(index * 0.005)  # spread the starts
        while True:
            body = {
                "model": STREAM_MODEL,
                "messages": [{"role": "user", "content": PROMPT}],
                "max_tokens": rng.randint(*STREAM_TOKENS),
                "ignore_eos": True,
                "stream": True,
            }
            try:
                async with self.session.post(
                    self.job.url, data=orjson.dumps(body), headers=self.headers
                ) as response:
                    if response.status != 200:
                        await response.read()
                        raise aiohttp.ClientError(f"HTTP {response.status}")
                    self.open_streams += 1
                    try:
                        async for chunk in response.content.iter_any():
                            self.stream_events += chunk.count(b"data: ")
                    finally:
                        self.open_streams -= 1
            except (aiohttp.ClientError, TimeoutError, OSError):
                self.out.stream_errors += 1
                await asyncio.sleep(0.1)

    async def run(self) -> Outcome:
        job, out = self.job, self.out
        holders = [asyncio.create_task(self.held_stream(i)) for i in range(job.streams)]
        if holders:
            deadline = time.perf_counter() + 30
            while self.open_streams < job.streams and time.perf_counter() < deadline:
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)  # every stream open; a moment for the starts to spread
        events_before, started = self.stream_events, time.perf_counter()
        sampler = asyncio.create_task(self._sample_open())
        rng = random.Random(job.seed)
        probes: set[asyncio.Task[None]] = set()
        at, end = started, started + job.seconds
        while True:
            at += rng.expovariate(job.rate)
            if at >= end:
                break
            delay = at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                out.max_lag_ms = max(out.max_lag_ms, -delay * 1000)
            task = asyncio.create_task(self.stream_probe() if out.sent % 2 else self.plain_probe())
            probes.add(task)
            task.add_done_callback(probes.discard)
            out.sent += 1
        out.stream_events_per_s = (self.stream_events - events_before) / job.seconds
        sampler.cancel()
        if probes:
            _, late = await asyncio.wait(set(probes), timeout=10)
            for task in late:
                task.cancel()
                self._error("no answer within 10 s of the window's end")
        for task in holders:
            task.cancel()
        await asyncio.gather(*probes, *holders, sampler, return_exceptions=True)
        return out

    async def _sample_open(self) -> None:
        self.out.streams_min_open = self.open_streams
        while True:
            self.out.streams_min_open = min(self.out.streams_min_open, self.open_streams)
            await asyncio.sleep(0.05)


async def run_job(job: Job) -> Outcome:
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=120, sock_read=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        return await Load(session, job).run()


def load_generator(conn: Connection, cpus: set[int], nice: int) -> None:
    if cpus:
        os.sched_setaffinity(0, cpus)
    os.setpriority(os.PRIO_PROCESS, 0, nice)
    while (job := conn.recv()) is not None:
        conn.send(uvloop.run(run_job(job)))
