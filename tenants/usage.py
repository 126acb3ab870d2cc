"""What one gateway request counts for in a tenant's usage: its record, and the minute, hour and
day rows it adds to. Reading the records off the stream and writing the rows is
`tenants.services.usage`.

Every request is added to its minute row, its hour row and its (UTC) day row, so each chart
reads at most a few dozen rows per route whatever its range: the last hour reads minutes, the
last day hours, the last 30 days days. Compaction is then just the removal of minute rows past
their retention: the hour and day rows already hold their totals, so there is nothing to merge
and nothing to get wrong twice.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field

from gateway.sample import Sample
from tenants.choices import Granularity

# The record fields usage is counted from: those it must carry, and those that may be missing
# (the others, latencies and the like, may hold anything).
REQUIRED = frozenset({"ts", "tenant", "status"})
OPTIONAL = frozenset({"rid", "route", "arm", "dep", "key", "finish", "pt", "ot", "cost", "reason"})


@dataclass(frozen=True)
class Record:
    """The fields of a gateway request record that usage accounting needs."""

    ts: dt.datetime
    tenant: str  # slug
    route: str
    arm: str
    deployment: str
    status: int
    finish: str
    prompt_tokens: int
    output_tokens: int
    cost: float
    reason: str
    request_id: str
    key_id: int | None  # present once the gateway names the key in its records

    @property
    def rejected(self) -> bool:
        return self.finish == "rejected"

    @property
    def failed(self) -> bool:
        # Served requests that the upstream or the gateway failed; client aborts are not errors.
        return not self.rejected and (self.finish == "error" or self.status >= 500)


def record_from_sample(sample: Sample) -> Record:
    return Record(
        ts=dt.datetime.fromtimestamp(sample.ts, tz=dt.UTC),
        tenant=sample.tenant,
        route=sample.route[:100],
        arm=sample.arm[:100],
        deployment=sample.dep[:64],
        status=sample.status,
        finish=sample.finish or "",
        prompt_tokens=max(0, sample.pt),
        output_tokens=max(0, sample.ot),
        cost=max(0.0, sample.cost),
        reason=(sample.reason or "unknown")[:64],
        request_id=sample.rid[:100],
        key_id=int(sample.key) if sample.key.isdigit() else None,
    )


@dataclass
class Counts:
    requests: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    errors: int = 0
    rejected: int = 0
    cost: float = 0.0
    rejections: dict[str, int] = field(default_factory=dict)

    def add(self, record: Record) -> None:
        if record.rejected:
            self.rejected += 1
            self.rejections[record.reason] = self.rejections.get(record.reason, 0) + 1
            return
        self.requests += 1
        self.tokens_in += record.prompt_tokens
        self.tokens_out += record.output_tokens
        self.cost += record.cost
        if record.failed:
            self.errors += 1


BucketKey = tuple[int, str, dt.datetime, str, str, str]


def aggregate(records: list[Record], tenant_ids: dict[str, int]) -> dict[BucketKey, Counts]:
    """Sums records into their minute, hour and day rows (unknown tenants' records skipped)."""
    rows: dict[BucketKey, Counts] = defaultdict(Counts)
    for record in records:
        tenant_id = tenant_ids.get(record.tenant)
        if tenant_id is None:
            continue
        minute = record.ts.replace(second=0, microsecond=0)
        hour = minute.replace(minute=0)
        day = hour.replace(hour=0)
        place = (record.route, record.arm, record.deployment)
        rows[(tenant_id, Granularity.MINUTE, minute, *place)].add(record)
        rows[(tenant_id, Granularity.HOUR, hour, *place)].add(record)
        rows[(tenant_id, Granularity.DAY, day, *place)].add(record)
    return rows
