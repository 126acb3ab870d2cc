"""Moving the gateway's request records into Postgres for the judge and the guardrails."""

from __future__ import annotations

from celery import shared_task

from evaluation.samples import consume as consume_samples


@shared_task(name="evaluation.consume_samples", time_limit=30, soft_time_limit=25)
def consume_samples_task() -> None:
    # Drain what is there now, a batch at a time, within the time limit.
    while consume_samples() > 0:
        pass
