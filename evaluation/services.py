"""All writes of the evaluation app: samples and their retention, feedback, deployment costs,
verdicts."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.audit import audit_record
from core.errors import NotFound, PermissionDenied
from core.publication import gateway_snapshot_changed
from evaluation import fleet
from evaluation.choices import FeedbackValue
from evaluation.costs import deployment_unit_cost
from evaluation.models import DeploymentCost, Feedback, RequestSample, Verdict
from rollouts.choices import LIVE_STATES
from rollouts.models import Deployment, Rollout, Route
from tenants.models import ApiKey, User

logger = logging.getLogger(__name__)

# How long after its response a sample can still be missing: the consumer runs every second,
# a dead consumer's entries are claimed after 30 s.
FEEDBACK_RETRY_AFTER_S = 5


def feedback_record(
    *,
    rid: str,
    value: FeedbackValue,
    note: str = "",
    key: ApiKey | None = None,
    actor: User | None = None,
) -> Feedback:
    """Stores what an application reported about the response `rid`; a second report on the
    same response replaces the first (applications retry). Sent with a tenant's gateway key, it
    may only concern that tenant's responses on the routes the key may use; a release manager
    may report on any.

    Feedback on a response whose sample has not been stored yet is refused with a 404 that says
    to retry, rather than kept for later: an id that is never seen (a typo, another system's id)
    would otherwise sit forever, and it could not be checked against the caller's tenant.

    Not audited: like the samples it describes, feedback is measurement, not a change to anything
    a person controls, and one audit row per thumbs would drown the audit log."""
    if key is None and not (actor is not None and actor.is_release_manager):
        raise PermissionDenied("feedback needs a tenant's gateway key or a release manager")
    sample = RequestSample.objects.filter(rid=rid).first()
    visible = sample is not None and (
        key is None
        or (
            sample.tenant == key.tenant.slug
            and (not key.allowed_routes or sample.route in key.allowed_routes)
        )
    )
    if sample is None or not visible:
        # The same answer for another tenant's response as for an unknown one: ids do not leak.
        raise NotFound(
            f"response {rid!r} has not been seen yet: the gateway's records reach the control "
            f"plane within seconds of the response; retry after {FEEDBACK_RETRY_AFTER_S} s"
        )
    feedback = Feedback(sample=sample, value=value, note=note)
    feedback.full_clean(exclude=["sample"], validate_unique=False)
    with transaction.atomic():
        feedback, _ = Feedback.objects.update_or_create(
            sample=sample, defaults={"value": value, "note": note}
        )
    return feedback


def request_samples_store(*, samples: list[RequestSample]) -> None:
    """Stores the gateway's request records, in one transaction. A response id already stored
    is skipped: the stream hands an entry out again when its consumer died after committing
    and before acknowledging it.

    Not audited, like feedback: samples are measurement."""
    with transaction.atomic():
        RequestSample.objects.bulk_create(samples, ignore_conflicts=True)


def samples_prune(*, now: dt.datetime | None = None, batch: int = 5000, batches: int = 20) -> int:
    """Deletes samples older than SAMPLE_RETENTION_DAYS, in batches (short transactions, no long
    lock on a busy table), keeping every sample of a live rollout whatever its age. Feedback goes
    with its sample; verdicts stay, with their reports, but can no longer be recomputed."""
    cutoff = (now or timezone.now()) - dt.timedelta(days=settings.SAMPLE_RETENTION_DAYS)
    live = list(Rollout.objects.filter(state__in=LIVE_STATES).values_list("pk", flat=True))
    deleted = 0
    for _ in range(batches):
        ids = list(
            RequestSample.objects.filter(ts__lt=cutoff)
            .exclude(rollout_id__in=live)
            .order_by("ts")
            .values_list("pk", flat=True)[:batch]
        )
        if not ids:
            break
        with transaction.atomic():
            count, _ = RequestSample.objects.filter(pk__in=ids).delete()
            deleted += len(ids)
            audit_record(
                actor=None,
                action="evaluation.samples_pruned",
                target=("evaluation.requestsample", "retention"),
                data={"deleted": len(ids), "rows": count, "before": cutoff.isoformat()},
            )
        if len(ids) < batch:
            break
    return deleted


def deployment_cost_set(
    *,
    actor: User | None,
    deployment: Deployment,
    throughput_tokens_per_s: float | None,
    utilisation: float,
) -> DeploymentCost:
    """Enters a deployment's sustained throughput per replica (None: use the observed one) and
    the utilisation to plan for; the gateway's unit cost follows after commit."""
    if actor is not None and not actor.is_release_manager:
        raise PermissionDenied("only release managers may set a deployment's cost")
    with transaction.atomic():
        cost, _ = DeploymentCost.objects.select_for_update().get_or_create(deployment=deployment)
        cost.throughput_tokens_per_s = throughput_tokens_per_s
        cost.utilisation = utilisation
        cost.full_clean()
        cost.save()
        audit_record(
            actor=actor,
            action="evaluation.cost_set",
            target=deployment,
            data={"throughput_tokens_per_s": throughput_tokens_per_s, "utilisation": utilisation},
        )
        gateway_snapshot_changed()
    return cost


def deployment_costs_observe(*, now: dt.datetime | None = None) -> int:
    """Reads the tokens per second each routed deployment's replicas served (Prometheus) and
    stores it; republishes the gateway configuration when a unit cost moved by 5% or more.
    Returns how many unit costs moved. The Prometheus read happens outside any transaction."""
    rates = fleet.tokens_per_s_by_instance()
    if rates is None:
        return 0
    in_routes = Route.objects.values_list("baseline", flat=True).union(
        Route.objects.exclude(canary=None).values_list("canary", flat=True)
    )
    moved = 0
    deployments = Deployment.objects.filter(pk__in=in_routes).select_related("fleet", "cost")
    for deployment in deployments.prefetch_related("fleet__replicas"):
        instances = fleet.deployment_instances(deployment)
        served = [rates[i] for i in instances if i in rates]
        if not served:
            continue
        per_replica = sum(served) / len(served)
        before = deployment_unit_cost(deployment).dollars_per_million_tokens
        with transaction.atomic():
            cost, _ = DeploymentCost.objects.select_for_update().get_or_create(
                deployment=deployment
            )
            cost.observed_tokens_per_s = per_replica if per_replica > 0 else None
            cost.observed_at = now or timezone.now()
            cost.save(update_fields=["observed_tokens_per_s", "observed_at", "updated_at"])
        deployment.cost = cost
        after = deployment_unit_cost(deployment).dollars_per_million_tokens
        if abs(after - before) > 0.05 * max(before, 1e-12):
            moved += 1
    if moved:
        gateway_snapshot_changed()
    return moved


def verdict_record(
    *,
    rollout: Rollout,
    step: int,
    looked_at: dt.datetime,
    final: bool,
    decision: str,
    reason: str,
    report: dict[str, Any],
    window: dict[str, Any],
) -> Verdict:
    verdict = Verdict(
        rollout=rollout,
        step=step,
        looked_at=looked_at,
        final=final,
        decision=decision,
        reason=reason,
        report=report,
        window=window,
    )
    verdict.full_clean(exclude=["rollout"])
    with transaction.atomic():
        verdict.save()
        if final:
            audit_record(
                actor=None,
                action=f"evaluation.verdict.{decision}",
                target=rollout,
                reason=reason,
                data={"step": step, "verdict": verdict.pk},
            )
    return verdict
