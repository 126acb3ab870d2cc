"""What happens after a response: settling the budget reservation and recording the request.

Neither is on the client's path, so neither needs its own round trip to Redis. Finished requests
are queued here and one writer task sends whatever has queued up as a single pipeline: under
light load that is one request at a time, written at once; under heavy load hundreds share one
network write, which is what keeps the gateway's CPU per request flat as traffic grows.

If Redis is away, a batch is dropped with a warning: an unsettled reservation expires and is
refunded by a later admission, and a lost sample only thins the statistics. The queue is bounded
so that an outage cannot grow the process without limit.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import asdict, dataclass

import orjson
import redis.asyncio as redis
from redis.exceptions import NoScriptError, RedisError

from gateway.budgets import SETTLE, Reservation, settle_args
from gateway.measure import Sample

logger = logging.getLogger(__name__)

MAX_BATCH = 500
MAX_QUEUED = 100_000


@dataclass(frozen=True)
class Settlement:
    reservation: Reservation
    prompt_tokens: int
    output_tokens: int


class Ledger:
    def __init__(self, client: redis.Redis, *, stream: str, max_len: int) -> None:
        self._client = client
        self._stream = stream
        self._max_len = max_len
        self._settle_sha = client.register_script(SETTLE).sha
        self._queue: deque[tuple[Settlement | None, Sample]] = deque()
        self._wake = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._closing = False

    def record(self, settlement: Settlement | None, sample: Sample) -> None:
        if len(self._queue) >= MAX_QUEUED:
            logger.warning("the ledger queue is full: request %s goes unrecorded", sample.rid)
            return
        self._queue.append((settlement, sample))
        self._wake.set()

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

    async def _write_forever(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                batch = [self._queue.popleft() for _ in range(min(MAX_BATCH, len(self._queue)))]
                await self._write(batch)
            if self._closing:
                return

    async def _write(self, batch: list[tuple[Settlement | None, Sample]]) -> None:
        try:
            missing = await self._send(batch)
            if missing:
                # Redis restarted and forgot the script: load it and settle those again.
                await self._client.script_load(SETTLE)
                await self._send(missing, samples=False)
        except (RedisError, OSError) as exc:
            logger.warning("could not write %d finished requests: %s", len(batch), exc)

    async def _send(
        self, batch: list[tuple[Settlement | None, Sample]], *, samples: bool = True
    ) -> list[tuple[Settlement | None, Sample]]:
        """One pipeline for the batch; returns the entries whose settlement met NOSCRIPT."""
        pipe = self._client.pipeline(transaction=False)
        settling: list[tuple[Settlement | None, Sample] | None] = []  # per command: whose
        for entry in batch:
            settlement, sample = entry
            if settlement is not None:
                keys, args = settle_args(
                    settlement.reservation, settlement.prompt_tokens, settlement.output_tokens
                )
                pipe.evalsha(self._settle_sha, len(keys), *keys, *args)
                settling.append(entry)
            if samples:
                record = orjson.dumps(asdict(sample))
                pipe.xadd(self._stream, {"r": record}, maxlen=self._max_len, approximate=True)
                settling.append(None)
        replies = await pipe.execute(raise_on_error=False)
        missing: list[tuple[Settlement | None, Sample]] = []
        failed = 0
        for owner, reply in zip(settling, replies, strict=True):
            if owner is not None and isinstance(reply, NoScriptError):
                missing.append(owner)
            elif isinstance(reply, Exception):
                failed += 1
        if failed:
            first = next(reply for reply in replies if isinstance(reply, Exception))
            logger.warning("%d of %d ledger writes failed, first: %s", failed, len(replies), first)
        return missing
