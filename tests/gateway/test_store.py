"""The gateway's copy of the snapshot: what a poll applies, and what it leaves alone."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator

import orjson
import pytest
import redis.asyncio as redis

from gateway import store as store_module
from gateway.snapshot import SNAPSHOT_KEY, ApiKey, Snapshot
from gateway.store import SLICE, SnapshotStore
from tests.gateway.conftest import make_snapshot, publish

UPSTREAM = "http://127.0.0.1:9"


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[redis.Redis]:
    connection = redis.Redis.from_url(redis_url)
    yield connection
    await connection.aclose()


async def test_a_poll_that_finds_the_same_bytes_validates_nothing(
    redis_url: str, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    validated: list[int] = []
    validate = store_module.validate_in_slices

    async def counting(raw: bytes) -> Snapshot:
        validated.append(len(raw))
        return await validate(raw)

    monkeypatch.setattr(store_module, "validate_in_slices", counting)
    store = SnapshotStore(client, poll_s=1.0)
    first = make_snapshot([UPSTREAM])
    publish(redis_url, first)
    assert await store.refresh() is True
    assert [await store.refresh() for _ in range(5)] == [False] * 5
    assert len(validated) == 1  # the unchanged bytes were not parsed again
    assert store.current is not None
    assert store.current.version == first.version

    publish(redis_url, make_snapshot([UPSTREAM, UPSTREAM]))
    assert await store.refresh() is True
    assert len(validated) == 2
    assert len(store.current.deployments["base"].replicas) == 2


async def test_an_invalid_or_older_snapshot_keeps_the_one_in_force(
    redis_url: str, client: redis.Redis
) -> None:
    store = SnapshotStore(client, poll_s=1.0)
    current = make_snapshot([UPSTREAM])
    publish(redis_url, current)
    assert await store.refresh() is True

    await client.set(SNAPSHOT_KEY, b'{"version": "not a number"}')
    assert await store.refresh() is False
    older = current.model_copy(update={"version": current.version - 1})
    await client.set(SNAPSHOT_KEY, older.model_dump_json())
    assert await store.refresh() is False
    assert store.current is not None
    assert store.current.version == current.version

    # A newer one after them applies as usual.
    publish(redis_url, current.model_copy(update={"version": current.version + 1}))
    assert await store.refresh() is True
    assert store.current.version == current.version + 1


async def test_a_snapshot_of_another_epoch_applies_whatever_its_version(
    redis_url: str, client: redis.Redis
) -> None:
    store = SnapshotStore(client, poll_s=1.0)
    held = make_snapshot([UPSTREAM]).model_copy(update={"epoch": "run-a:1"})
    publish(redis_url, held)
    assert await store.refresh() is True

    # Redis lost its data: the control plane counts from 1 again, in a new epoch.
    restarted = make_snapshot([UPSTREAM, UPSTREAM]).model_copy(
        update={"epoch": "run-b:2", "version": 1}
    )
    publish(redis_url, restarted)
    assert await store.refresh() is True
    assert store.current is not None
    assert (store.current.epoch, store.current.version) == ("run-b:2", 1)

    # Within the new epoch, versions are ordered as before.
    await client.set(SNAPSHOT_KEY, held.model_copy(update={"epoch": "run-b:2"}).model_dump_json())
    assert await store.refresh() is True
    stale = restarted.model_copy(update={"version": 2})
    await client.set(SNAPSHOT_KEY, stale.model_dump_json())
    assert await store.refresh() is False


async def test_a_large_snapshot_is_validated_in_slices_between_which_requests_run(
    redis_url: str, client: redis.Redis
) -> None:
    base = make_snapshot([UPSTREAM])
    keys = {
        hashlib.sha256(f"key-{i}".encode()).hexdigest(): ApiKey(
            id=f"k{i}", tenant_id="acme", prefix=f"tk_{i}"
        )
        for i in range(5 * SLICE)
    }
    large = base.model_copy(update={"keys": {**base.keys, **keys}})
    publish(redis_url, large)
    store = SnapshotStore(client, poll_s=1.0)
    turns = 0

    async def other_work() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    other = asyncio.create_task(other_work())
    await asyncio.sleep(0)
    assert await store.refresh() is True
    other.cancel()
    assert store.current == large  # the same snapshot as validated in one piece
    assert turns >= 5  # the loop ran other work between the slices of the keys

    # A bad entry in a late slice rejects the whole snapshot, and the one in force stays.
    broken = large.model_dump(mode="json")
    broken["keys"][next(reversed(keys))]["tenant_id"] = 7
    await client.set(SNAPSHOT_KEY, orjson.dumps(broken))
    assert await store.refresh() is False
    assert store.current == large
