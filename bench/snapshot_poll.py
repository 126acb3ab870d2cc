"""What a gateway's snapshot poll stalls its event loop for, when nothing has changed.

    .venv/bin/python bench/snapshot_poll.py [--tenants 1000] [--keys 5000] [--repeat 20]

Publishes a snapshot of `--tenants` tenants (each with a budget) and `--keys` API keys, 20 routes
and 20 deployments of 8 replicas, to a Redis database of its own (REDIS_URL, default database 13,
flushed), then times `SnapshotStore.refresh()` — the gateway's poll, which runs on the event loop
that serves requests — two ways in one run: validating what it read every time (what the gateway
did before) and stopping when the bytes are those it saw last (what it does now). The Redis GET
is in both.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import hashlib
import os
import statistics
import sys
import time
from pathlib import Path

import redis
import redis.asyncio as aredis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.snapshot import (  # after the path above
    SNAPSHOT_KEY,
    ApiKey,
    Arm,
    Budget,
    Deployment,
    Replica,
    Route,
    Snapshot,
    Tenant,
)
from gateway.store import SnapshotStore


def big_snapshot(tenants: int, keys: int) -> Snapshot:
    return Snapshot(
        version=time.time_ns() // 1000,
        generated_at=dt.datetime.now(dt.UTC),
        tenants={
            f"t{i}": Tenant(id=f"t{i}", slug=f"tenant-{i}", budget=Budget(requests_per_minute=600))
            for i in range(tenants)
        },
        keys={
            hashlib.sha256(f"key-{i}".encode()).hexdigest(): ApiKey(
                id=f"k{i}", tenant_id=f"t{i % tenants}", prefix=f"tk_{i:06d}"
            )
            for i in range(keys)
        },
        routes={
            f"route-{i}": Route(
                name=f"route-{i}", arms=(Arm(name="baseline", deployment_id=f"d{i}", weight=100),)
            )
            for i in range(20)
        },
        deployments={
            f"d{i}": Deployment(
                id=f"d{i}",
                served_model_name=f"model-{i}",
                replicas=tuple(
                    Replica(id=f"d{i}-{j}", base_url=f"http://10.0.{i}.{j}:8000") for j in range(8)
                ),
            )
            for i in range(20)
        },
    )


async def poll_times(url: str, repeat: int, *, skip_unchanged: bool) -> list[float]:
    client = aredis.Redis.from_url(url)
    store = SnapshotStore(client, poll_s=5.0)
    await store.refresh()  # the first read applies it
    times = []
    for _ in range(repeat):
        if not skip_unchanged:
            store._seen = None  # forgets the bytes: every poll validates, as before
        started = time.perf_counter()
        await store.refresh()
        times.append((time.perf_counter() - started) * 1000)
    await client.aclose()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description="the cost of an unchanged snapshot poll")
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--keys", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/13")
    raw = big_snapshot(args.tenants, args.keys).model_dump_json()
    client = redis.Redis.from_url(url)
    client.flushdb()
    client.set(SNAPSHOT_KEY, raw)
    try:
        before = asyncio.run(poll_times(url, args.repeat, skip_unchanged=False))
        now = asyncio.run(poll_times(url, args.repeat, skip_unchanged=True))
    finally:
        client.flushdb()
        client.close()
    print(
        f"snapshot: {args.tenants:,} tenants, {args.keys:,} keys, {len(raw) / 1e6:.1f} MB; "
        f"an unchanged poll, {args.repeat} times, ms:"
    )
    for label, times in (("validate every poll", before), ("stop on the same bytes", now)):
        print(f"  {label:<24} median {statistics.median(times):7.2f}  worst {max(times):7.2f}")
    print(f"  ratio (median): {statistics.median(before) / statistics.median(now):.1f}x")


if __name__ == "__main__":
    main()
