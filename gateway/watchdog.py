"""A watchdog of the gateway's event loop: how often it stalls on work that is not a request's.

A timer is asked to fire every `INTERVAL_S`; when it fires more than `STALL_S` late, something
held the loop that long (a snapshot applied in one piece, a big batch of records, a collection),
and every request in flight waited for it. Counted in `tollgate_gateway_loop_stalls`, with the
lateness in a histogram, so that a tail a user feels can be traced to the loop.
"""

from __future__ import annotations

import asyncio

from gateway import measure

INTERVAL_S = 0.05
STALL_S = 0.005


class LoopWatchdog:
    def __init__(self) -> None:
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._due = loop.time() + INTERVAL_S
        self._handle = loop.call_at(self._due, self._tick, loop)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        now = loop.time()
        late = now - self._due
        if late > STALL_S:
            measure.LOOP_STALLS.inc()
            measure.LOOP_STALL_SECONDS.observe(late)
        self._due = now + INTERVAL_S
        self._handle = loop.call_at(self._due, self._tick, loop)
