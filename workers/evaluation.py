"""Moving the gateway's request records into Postgres for the judge and the guardrails, keeping
them no longer than the retention policy says, and observing what deployments cost to serve."""

from __future__ import annotations

from celery import shared_task

from evaluation.samples import consume as consume_samples
from evaluation.services import deployment_costs_observe, samples_prune


@shared_task(name="evaluation.consume_samples", time_limit=30, soft_time_limit=25)
def consume_samples_task() -> None:
    # Drain what is there now, a batch at a time, within the time limit.
    while consume_samples() > 0:
        pass


@shared_task(name="evaluation.prune_samples", time_limit=300, soft_time_limit=280)
def prune_samples_task() -> None:
    # Batches are bounded per run; what is left waits for the next hour.
    samples_prune()


@shared_task(name="evaluation.observe_costs", time_limit=30, soft_time_limit=25)
def observe_costs_task() -> None:
    deployment_costs_observe()
