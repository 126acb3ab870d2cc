"""Reading the gateway's request records off its Redis stream, for each app that consumes them.

The gateway appends one `gateway.sample.Sample` per finished request to the samples stream
(compact JSON under the field `r`). The evaluation app stores them for the judge and the tenants
app counts them as usage, each through a consumer group of its own, so each sees every entry.
Both read the same way, here:

- A batch is first the entries that another consumer of the group took and left pending for
  longer than the claim idle time (that consumer died), then new ones; each entry goes to one
  consumer of the group.
- The app's store runs, and commits, before the batch is acknowledged: a crash in between leaves
  the entries pending, to be claimed again, so a store must be idempotent.
- A record that does not parse is handed to the store as `None` and acknowledged with the rest:
  retrying it would never succeed, and it must not hold up the others. Each app names the fields
  it reads, so that only those can make a record malformed for it: a field it ignores may hold
  anything.
"""

from __future__ import annotations

import logging
import socket
import typing
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import orjson
import redis

from core.redis import get_redis
from gateway.sample import Sample

logger = logging.getLogger(__name__)

# The gateway's default stream (GATEWAY_SAMPLES_STREAM).
STREAM = "tollgate:samples"


# How a record's value becomes a `Sample` field, by the field's type: (a required field's, an
# optional one's). A required field must be there and convert as it is; an optional one may be
# missing or empty (null, 0, "") and then takes its type's empty value, the value every field
# that the app does not read takes too. A text field that may be None is None whenever empty.
_CONVERTERS: dict[object, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    str: (str, lambda value: str(value or "")),
    int: (int, lambda value: int(value or 0)),
    float: (float, lambda value: float(value or 0.0)),
    bool: (bool, bool),
    str | None: ((lambda value: str(value) if value else None),) * 2,
    float | None: ((lambda value: None if value is None else float(value)),) * 2,
}
# Resolved once, so that a field the gateway adds with a type not listed above fails here, at
# import, rather than making every record look malformed.
_TYPES = typing.get_type_hints(Sample)
_FIELDS = {field.name: _CONVERTERS[_TYPES[field.name]] for field in fields(Sample)}


def sample_parse(raw: str | bytes, *, required: frozenset[str], optional: frozenset[str]) -> Sample:
    """The gateway's record with the fields a reader takes from it (`required` and `optional`);
    every other field holds its empty value, and names the record has that a `Sample` has not
    are ignored (a newer gateway may add some). Raises KeyError, TypeError, ValueError or
    orjson.JSONDecodeError when the record lacks a required field, or a field read has a value
    of the wrong kind."""
    record = orjson.loads(raw)
    if not isinstance(record, dict):
        raise TypeError(f"a record is a JSON object, not {type(record).__name__}")
    values = {}
    for name, (strict, lenient) in _FIELDS.items():
        if name in required:
            values[name] = strict(record[name])
        else:
            values[name] = lenient(record.get(name) if name in optional else None)
    return Sample(**values)


def entry_id(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


@dataclass(frozen=True)
class SampleGroup[T]:
    """One app's consumer group on the samples stream: the record fields it reads (`required`:
    without them a record is dropped; `optional`: may be missing), what it makes of the `Sample`
    (`convert` may raise ValueError, TypeError or KeyError on values it cannot use; the record is
    then dropped too), and how it stores a batch."""

    group: str
    required: frozenset[str]
    optional: frozenset[str]
    convert: Callable[[Sample], T]
    store: Callable[[list[tuple[str, T | None]]], object]

    def __post_init__(self) -> None:
        unknown = (self.required | self.optional) - set(_FIELDS)
        if unknown:
            raise ValueError(f"not fields of a gateway record: {sorted(unknown)}")
        if self.required & self.optional:
            raise ValueError(f"both required and optional: {sorted(self.required & self.optional)}")

    def ensure_group(self, client: redis.Redis) -> None:
        try:
            client.xgroup_create(STREAM, self.group, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def parse(self, entry: dict[Any, Any]) -> T | None:
        """The entry's record as this app takes it, or None (logged) when it is malformed."""
        try:
            raw = entry[b"r"] if b"r" in entry else entry["r"]
            sample = sample_parse(raw, required=self.required, optional=self.optional)
            return self.convert(sample)
        except (KeyError, TypeError, ValueError, orjson.JSONDecodeError) as exc:
            logger.warning("dropping a malformed sample (%s): %s", self.group, exc)
            return None

    def consume(self, *, consumer: str | None, count: int, claim_idle_ms: int) -> int:
        """Stores one batch (claimed stale entries first, then new ones) and acknowledges it;
        returns how many entries it took off the stream (malformed ones included)."""
        client = get_redis()
        self.ensure_group(client)
        name = consumer or socket.gethostname()
        # (redis-py's stubs do not describe these replies; their shapes are Redis's documented
        # ones.)
        claimed: Any = client.xautoclaim(
            STREAM, self.group, name, claim_idle_ms, "0-0", count=count
        )
        raw: list[tuple[Any, dict[Any, Any]]] = list(claimed[1])
        if len(raw) < count:
            response: Any = client.xreadgroup(
                self.group, name, {STREAM: ">"}, count=count - len(raw)
            )
            for _, items in response or []:
                raw.extend(items)
        if not raw:
            return 0
        entries = [(entry_id(raw_id), self.parse(entry)) for raw_id, entry in raw]
        self.store(entries)
        # After the commit: a crash before this line leaves the entries pending, to be claimed
        # again.
        client.xack(STREAM, self.group, *[id_ for id_, _ in entries])
        return len(entries)
