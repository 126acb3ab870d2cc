"""The gateway's copy of the configuration snapshot, kept current from Redis.

A new snapshot is announced on pub/sub and applied at once; polling catches announcements missed
while disconnected. A snapshot that fails validation, or is older than the one in use, is ignored;
"older" means a lower version of the same epoch: after Redis lost its data the control plane counts
versions again from 1 in a new epoch, and those snapshots are newer than anything held.
A poll that finds the bytes it saw last time stops there: validating a snapshot with thousands of
keys takes milliseconds, and the event loop that serves requests would stall for it every poll.
A new snapshot is validated in slices of `SLICE` entries with a turn of the loop between them,
so that requests in flight wait for a slice (well under a millisecond), never for the whole.
When Redis is unreachable the last good snapshot stays in force: routing goes on, and budgets
follow each tenant's fail mode.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import orjson
import redis.asyncio as redis
from pydantic import TypeAdapter, ValidationError

from gateway import tokens
from gateway.snapshot import (
    CHANGED_CHANNEL,
    SNAPSHOT_KEY,
    ApiKey,
    Deployment,
    Route,
    Snapshot,
    Tenant,
)
from gateway.tokens import ChatTokenizer

logger = logging.getLogger("gateway.store")

SLICE = 200  # entries of a collection validated between two turns of the event loop
COLLECTIONS: dict[str, TypeAdapter[Any]] = {
    "tenants": TypeAdapter(dict[str, Tenant]),
    "keys": TypeAdapter(dict[str, ApiKey]),
    "routes": TypeAdapter(dict[str, Route]),
    "deployments": TypeAdapter(dict[str, Deployment]),
}


async def validate_in_slices(raw: bytes | str) -> Snapshot:
    """The snapshot in `raw`, validated a slice at a time (raises ValueError when invalid).

    Each collection's entries are validated `SLICE` at a time; the snapshot itself is then
    validated around the validated entries (which pydantic takes as they are), so its checks
    that references resolve run once, on the whole.
    """
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    for name, adapter in COLLECTIONS.items():
        entries = data.get(name)
        if not isinstance(entries, dict):
            continue  # absent (the default) or wrong: the snapshot's validation says which
        items = list(entries.items())
        validated: dict[str, object] = {}
        for start in range(0, len(items), SLICE):
            validated.update(adapter.validate_python(dict(items[start : start + SLICE])))
            await asyncio.sleep(0)
        data[name] = validated
    return Snapshot.model_validate(data)


class SnapshotStore:
    def __init__(self, client: redis.Redis, *, poll_s: float) -> None:
        self._client = client
        self._poll_s = poll_s
        self.current: Snapshot | None = None
        self.redis_ok = False
        self._task: asyncio.Task[None] | None = None
        self._seen: bytes | str | None = None  # the last published snapshot looked at
        self._tokenizers: dict[str, ChatTokenizer | None] = {}  # by directory

    async def refresh(self) -> bool:
        """Reads the published snapshot; True when a newer valid one was applied."""
        try:
            raw = await self._client.get(SNAPSHOT_KEY)
            self.redis_ok = True
        except (redis.RedisError, OSError) as exc:
            if self.redis_ok:
                logger.warning("Redis unreachable, keeping snapshot in force: %s", exc)
            self.redis_ok = False
            return False
        if raw is None or raw == self._seen:
            return False
        self._seen = raw
        try:
            snapshot = await validate_in_slices(raw)
        except ValidationError as exc:
            logger.error("ignoring an invalid snapshot: %s", exc.errors()[:3])
            return False
        except ValueError as exc:
            logger.error("ignoring an invalid snapshot: %s", exc)
            return False
        current = self.current
        if (
            current is not None
            and snapshot.epoch == current.epoch
            and snapshot.version <= current.version
        ):
            return False
        await self._load_tokenizers(snapshot)
        self.current = snapshot  # one assignment: requests see the old or the new, never a mix
        logger.info("applied snapshot version %s (epoch %s)", snapshot.version, snapshot.epoch)
        return True

    def tokenizer(self, directory: str | None) -> ChatTokenizer | None:
        return self._tokenizers.get(directory) if directory else None

    async def _load_tokenizers(self, snapshot: Snapshot) -> None:
        """Loads the tokenizers the snapshot names and this gateway does not hold yet, in a
        thread: a tokenizer file takes tens of milliseconds to parse, and the loop serves
        requests meanwhile."""
        wanted = {d.tokenizer_dir for d in snapshot.deployments.values() if d.tokenizer_dir}
        loaded = {d: self._tokenizers[d] for d in wanted if d in self._tokenizers}
        for directory in wanted - loaded.keys():
            loaded[directory] = await asyncio.to_thread(tokens.load, directory)
        self._tokenizers = loaded

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            try:
                async with self._client.pubsub() as pubsub:
                    await pubsub.subscribe(CHANGED_CHANNEL)
                    await self.refresh()  # anything published while we were not listening
                    while True:
                        # An announcement or a quiet poll interval: either way, look.
                        await pubsub.get_message(
                            ignore_subscribe_messages=True, timeout=self._poll_s
                        )
                        await self.refresh()
            except (redis.RedisError, OSError):
                self.redis_ok = False
                await asyncio.sleep(min(self._poll_s, 1.0))
