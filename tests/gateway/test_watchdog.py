"""The event loop's watchdog: work that holds the loop over 5 ms is counted, and nothing else."""

from __future__ import annotations

import asyncio
import time

from gateway import measure
from gateway.watchdog import LoopWatchdog


def stalls() -> tuple[float, float]:
    count = measure.LOOP_STALLS._value.get()
    total = measure.LOOP_STALL_SECONDS._sum.get()
    return count, total


async def test_a_loop_held_for_80_ms_is_one_stall_of_at_least_30_ms() -> None:
    watchdog = LoopWatchdog()
    watchdog.start()
    try:
        await asyncio.sleep(0.01)
        before = stalls()
        # The watchdog's timer falls due within 50 ms: held 80 ms, it runs at least 30 ms late.
        time.sleep(0.08)
        await asyncio.sleep(0.01)
        count, seconds = stalls()
        assert count == before[0] + 1
        assert 0.03 <= seconds - before[1] <= 0.2
    finally:
        watchdog.stop()
