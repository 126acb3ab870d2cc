"""What happens after a response: settling the budget reservation and recording the request.

Neither is on the client's path, so neither needs its own round trip to Redis. Finished requests
are queued here and one writer task sends whatever has queued up as a single pipeline: under
light load that is one request at a time, written at once; under heavy load hundreds share one
network write, which is what keeps the gateway's CPU per request flat as traffic grows.

If Redis is away, a batch's settlements are retried with backoff (settling is idempotent, keyed
by the request id, so a retry after a lost reply charges once): a Redis hiccup must not hold a
tenant's concurrency slot and tokens until the reservation's deadline. Its samples are dropped
with a warning (appending one again could count it twice; a lost sample only thins the
statistics). The queue is bounded so that an outage cannot grow the process without limit.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from collections import deque
from dataclasses import dataclass

import orjson
from redis.exceptions import NoScriptError, RedisError

from gateway.budgets import SETTLE, Reservation, settle_args
from gateway.sample import Sample
from gateway.wire import Arg, RedisWire, script_sha

logger = logging.getLogger(__name__)

MAX_BATCH = 200  # a batch is built on the event loop: ~1.5 ms at this size
MAX_QUEUED = 100_000
# Retries of a settlement: backoff from 0.2 s doubling to 30 s, about 5 minutes in all; past
# that the reservation's own deadline refunds it.
MAX_ATTEMPTS = 14

Entry = tuple["Settlement | None", Sample | None]


@dataclass(frozen=True)
class Settlement:
    reservation: Reservation
    prompt_tokens: int
    output_tokens: int
    attempt: int = 0


class Ledger:
    def __init__(self, wire: RedisWire, *, stream: str, max_len: int) -> None:
        # A connection of its own (gateway.wire, not admission's): a batch of hundreds of
        # writes must not queue ahead of a request's admission.
        self._wire = wire
        self._stream = stream
        self._max_len = max_len
        self._settle_sha = script_sha(SETTLE)
        self._queue: deque[Entry] = deque()
        self._wake = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._closing = False

    def record(self, settlement: Settlement | None, sample: Sample | None) -> None:
        if len(self._queue) >= MAX_QUEUED:
            rid = sample.rid if sample else settlement.reservation.request_id if settlement else ""
            logger.warning("the ledger queue is full: request %s goes unrecorded", rid)
            return
        self._queue.append((settlement, sample))
        self._wake.set()

    def _retry(self, settlements: list[Settlement]) -> None:
        for settlement in settlements:
            if settlement.attempt >= MAX_ATTEMPTS:
                logger.warning(
                    "gave up settling request %s; its reservation's deadline will refund it",
                    settlement.reservation.request_id,
                )
                continue
            delay = min(30.0, 0.2 * 2**settlement.attempt) * random.uniform(0.8, 1.2)  # noqa: S311
            again = dataclasses.replace(settlement, attempt=settlement.attempt + 1)
            asyncio.get_running_loop().call_later(delay, self.record, again, None)

    def start(self) -> None:
        self._writer = asyncio.get_running_loop().create_task(self._write_forever())

    async def close(self, timeout_s: float = 5.0) -> None:
        """Writes what is queued (within the timeout), then stops the writer."""
        self._closing = True
        self._wake.set()
        if self._writer is not None:
            try:
                await asyncio.wait_for(self._writer, timeout_s)
            except TimeoutError:
                logger.warning("%d finished requests left unwritten at shutdown", len(self._queue))
        await self._wire.close()

    async def _write_forever(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                batch = [self._queue.popleft() for _ in range(min(MAX_BATCH, len(self._queue)))]
                await self._write(batch)
            if self._closing:
                return

    async def _write(self, batch: list[Entry]) -> None:
        settlements = [settlement for settlement, _ in batch if settlement is not None]
        try:
            missing, failed = await self._send(batch)
            if missing:
                # Redis restarted and forgot the script: load it and settle those again.
                await self._wire.call("SCRIPT", "LOAD", SETTLE)
                missing, failed_again = await self._send([(s, None) for s in missing])
                failed += failed_again + missing
            self._retry(failed)
        except (RedisError, OSError) as exc:
            logger.warning("could not write %d finished requests: %s", len(batch), exc)
            self._retry(settlements)

    async def _send(self, batch: list[Entry]) -> tuple[list[Settlement], list[Settlement]]:
        """One write for the batch; returns the settlements that met NOSCRIPT and those that
        failed otherwise."""
        commands: list[tuple[Arg, ...]] = []
        settling: list[Settlement | None] = []  # per command: whose settlement, if any
        for settlement, sample in batch:
            if settlement is not None:
                keys, args = settle_args(
                    settlement.reservation, settlement.prompt_tokens, settlement.output_tokens
                )
                commands.append(("EVALSHA", self._settle_sha, len(keys), *keys, *args))
                settling.append(settlement)
            if sample is not None:
                record = orjson.dumps(sample)  # 1 µs; 8 through asdict
                commands.append(
                    ("XADD", self._stream, "MAXLEN", "~", self._max_len, "*", "r", record)
                )
                settling.append(None)
        replies = await self._wire.call_many(commands)
        missing: list[Settlement] = []
        failed: list[Settlement] = []
        errors = 0
        for owner, reply in zip(settling, replies, strict=True):
            if not isinstance(reply, Exception):
                continue
            errors += 1
            if owner is not None:
                (missing if isinstance(reply, NoScriptError) else failed).append(owner)
        if errors > len(missing):
            first = next(r for r in replies if isinstance(r, Exception))
            logger.warning("%d of %d ledger writes failed, first: %s", errors, len(replies), first)
        return missing, failed
