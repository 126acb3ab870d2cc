"""Moving the gateway's request records from the Redis stream into Postgres.

A consumer group makes this safe with many workers and with workers that die: each entry goes to
one consumer, and is acknowledged only after the transaction that stored it has committed. An
entry whose consumer died stays pending and is claimed by another after `CLAIM_IDLE_MS`. Storing
is idempotent on the response id, so an entry processed twice (claimed after its first consumer
committed but before it acknowledged) is stored once.

Each sample is filed under the rollout step it arrived in, from the arrival time and the times
the rollout's steps started (their RUNNING events, and `step_started_at` for the current one),
not from the step that is current when the sample happens to be consumed: a consumer that lags,
or one that dies and leaves its entries to be claimed 30 s later, still files them correctly.
The one window this leaves: a sample that arrives while the transition to the next step is
being committed is filed under the step before (milliseconds; accepted).
"""

from __future__ import annotations

import bisect
import datetime as dt
from collections import defaultdict

from django.db.models import Min

from core import streams
from evaluation.models import RequestSample
from evaluation.services import request_samples_store
from gateway.sample import Sample
from rollouts.choices import RolloutState
from rollouts.models import Rollout, RolloutEvent

STREAM = streams.STREAM
GROUP = "tollgate-evaluation"
BATCH = 5000
CLAIM_IDLE_MS = 30_000
# The record fields a sample is stored from: those it must carry, and those an older gateway's
# record may lack.
REQUIRED = frozenset({"rid", "ts", "route", "arm", "dep", "tenant", "status", "pt", "ot", "e2e_ms"})
OPTIONAL = frozenset(
    {
        "rollout",
        "replica",
        "finish",
        "ttft_ms",
        "tpot_ms",
        "tool",
        "conc",
        "stream",
        "cost",
        "reason",
        "pe",
    }
)


def _request_sample(sample: Sample) -> RequestSample:
    return RequestSample(
        rid=sample.rid[:100],
        ts=dt.datetime.fromtimestamp(sample.ts, tz=dt.UTC),
        rollout_id=int(sample.rollout) if sample.rollout else None,
        route=sample.route[:100],
        arm=sample.arm[:100],
        deployment=sample.dep[:64],
        tenant=sample.tenant[:63],
        replica=sample.replica[:200],
        status=sample.status,
        finish=(sample.finish or "")[:16],
        prompt_tokens=sample.pt,
        prompt_estimate=max(sample.pe, 0),
        output_tokens=sample.ot,
        ttft_ms=sample.ttft_ms,
        tpot_ms=sample.tpot_ms,
        e2e_ms=sample.e2e_ms,
        tool=(sample.tool or "")[:16],
        concurrency=sample.conc,
        stream=sample.stream,
        cost=sample.cost,
        reason=(sample.reason or "")[:32],
    )


def step_starts(rollout_ids: set[int]) -> dict[int, list[tuple[dt.datetime, int]]]:
    """When each step of these rollouts started, in time order: (start, step index)."""
    starts: dict[int, dict[int, dt.datetime]] = defaultdict(dict)
    events = (
        RolloutEvent.objects.filter(rollout_id__in=rollout_ids, to_state=RolloutState.RUNNING)
        .values("rollout_id", "step_index")
        .annotate(start=Min("created_at"))
    )
    for event in events:
        starts[event["rollout_id"]][event["step_index"]] = event["start"]
    # The current step's own start time is set in the same transaction as its event, a moment
    # earlier; the guardrails count from it, so the judge's step does too.
    current = Rollout.objects.filter(pk__in=rollout_ids, step_started_at__isnull=False)
    for rollout_id, step, started in current.values_list("pk", "step_index", "step_started_at"):
        if started is not None:
            starts[rollout_id][step] = started
    return {
        rollout_id: sorted((start, step) for step, start in by_step.items())
        for rollout_id, by_step in starts.items()
    }


def file_under_steps(samples: list[RequestSample]) -> None:
    """Sets each sample's step: the last step of its rollout that had started when it arrived."""
    rollout_ids = {s.rollout_id for s in samples if s.rollout_id is not None}
    if not rollout_ids:
        return
    starts = step_starts(rollout_ids)
    for sample in samples:
        timeline = starts.get(sample.rollout_id or 0, [])
        at = bisect.bisect_right([start for start, _ in timeline], sample.ts)
        sample.step = timeline[at - 1][1] if at else None


def _store(entries: list[tuple[str, RequestSample | None]]) -> None:
    samples = [sample for _, sample in entries if sample is not None]
    file_under_steps(samples)
    request_samples_store(samples=samples)


_GROUP = streams.SampleGroup(
    group=GROUP, required=REQUIRED, optional=OPTIONAL, convert=_request_sample, store=_store
)
_ensure_group = _GROUP.ensure_group  # (the tests set the group up by hand)


def consume(*, consumer: str | None = None, count: int = BATCH) -> int:
    """Stores one batch (claimed stale entries first, then new ones); returns how many entries
    it took off the stream (malformed ones included)."""
    return _GROUP.consume(consumer=consumer, count=count, claim_idle_ms=CLAIM_IDLE_MS)
