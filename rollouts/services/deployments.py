"""Deployment lifecycle writes that are not a rollout's transition: creating a deployment and
getting it ready (the provider's preparation, then a real inference on every active replica),
and retiring what nothing uses."""

from __future__ import annotations

import datetime as dt

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from core.audit import audit_record
from core.errors import Conflict
from core.publication import gateway_snapshot_changed
from core.tasks import task_enqueue_after_commit
from registry.models import ModelArtifact
from rollouts import providers
from rollouts.choices import LIVE_STATES, DeploymentKind, DeploymentState
from rollouts.models import Deployment, Fleet, Rollout, Route, RouteRule
from rollouts.providers import teardown
from rollouts.services.common import full_clean_or_raise, require_release_manager
from tenants.models import User

# How long a new deployment may take to become ready (weights to load, adapters to fetch) before
# it is marked failed with the problems seen.
PREPARE_DEADLINE = dt.timedelta(minutes=15)


def deployment_create(
    *,
    actor: User | None,
    artifact: ModelArtifact,
    fleet: Fleet,
    served_model_name: str,
    kind: DeploymentKind = DeploymentKind.FULL,
    max_model_len: int | None = None,
    tokenizer_dir: str = "",
) -> Deployment:
    """A pending deployment; the workers get it ready (`deployment_prepare`) within seconds.
    The same artifact already live under that name on that fleet is returned as it is, so that a
    pipeline's re-run deploys nothing twice."""
    actor = require_release_manager(actor, "create deployments")
    deployment = Deployment(
        artifact=artifact,
        fleet=fleet,
        served_model_name=served_model_name,
        kind=kind,
        max_model_len=max_model_len,
        tokenizer_dir=tokenizer_dir,
        state=DeploymentState.PENDING,
    )
    full_clean_or_raise(deployment)
    try:
        with transaction.atomic():
            deployment.save()
            audit_record(
                actor=actor,
                action="deployment.created",
                target=deployment,
                data={"artifact": str(artifact), "fleet": fleet.name, "kind": kind},
            )
            task_enqueue_after_commit("rollouts.prepare_deployment", deployment_id=deployment.pk)
    except IntegrityError as exc:
        live = (
            Deployment.objects.filter(fleet=fleet, served_model_name=served_model_name)
            .exclude(state__in=(DeploymentState.RETIRED, DeploymentState.FAILED))
            .select_related("artifact")
            .first()
        )
        if live is not None and live.artifact_id == artifact.pk and live.kind == kind:
            return live  # deployed already (a pipeline's re-run): the same deployment
        holder = f" by {live.artifact}" if live is not None else ""
        raise Conflict(
            f"fleet {fleet.name} already serves a live deployment as {served_model_name!r}"
            f"{holder}; delete it first or choose another served model name"
        ) from exc
    return deployment


def deployment_prepare(*, deployment_id: int, now: dt.datetime | None = None) -> str:
    """Loads what the provider must load and probes every active replica with a real inference:
    ready when all answer, failed past `PREPARE_DEADLINE`, else pending with its problems.
    Idempotent; network calls are made outside any transaction. Returns the state."""
    deployment = (
        Deployment.objects.select_related("fleet", "artifact").filter(pk=deployment_id).first()
    )
    if deployment is None or deployment.state != DeploymentState.PENDING:
        return deployment.state if deployment else "missing"
    problems = providers.prepare(deployment)
    ready, not_ready = providers.is_ready(deployment)
    problems = [] if ready else problems + not_ready
    late = (now or timezone.now()) - deployment.created_at > PREPARE_DEADLINE
    state = (
        DeploymentState.READY
        if ready
        else DeploymentState.FAILED
        if late
        else DeploymentState.PENDING
    )
    with transaction.atomic():
        changed = Deployment.objects.filter(pk=deployment_id, state=DeploymentState.PENDING).update(
            state=state, problems=problems
        )
        if changed and state != DeploymentState.PENDING:
            audit_record(
                actor=None,
                action=f"deployment.{state}",
                target=deployment,
                reason="every active replica answers a real inference"
                if ready
                else f"not ready after {PREPARE_DEADLINE}",
                data={"problems": problems},
            )
            gateway_snapshot_changed()
    if changed and state == DeploymentState.FAILED:
        teardown(deployment)  # what did load must not be served under this name later
    return state


def pending_deployments() -> list[int]:
    """The deployments the workers still have to get ready."""
    return list(
        Deployment.objects.filter(state=DeploymentState.PENDING).values_list("pk", flat=True)
    )


def deployment_users(deployment: Deployment) -> list[str]:
    """What sends it traffic, in words: routes, rules and live rollouts."""
    users = [
        f"route {route.name} ({role})"
        for role in ("baseline", "canary", "control")
        for route in Route.objects.filter(**{role: deployment})
    ]
    users += [
        f"rule {rule.name} of route {rule.route.name}"
        for rule in RouteRule.objects.filter(target=deployment).select_related("route")
    ]
    live = Rollout.objects.filter(state__in=LIVE_STATES).filter(
        Q(candidate=deployment) | Q(control=deployment)
    )
    users += [f"live rollout {rollout.pk}" for rollout in live]
    return users


def deployment_delete(*, actor: User | None, deployment_id: int) -> Deployment:
    """Retires a deployment nothing uses (unloading its adapter); refuses one in use, naming
    what uses it. Its row stays, with its rollouts' history."""
    actor = require_release_manager(actor, "delete deployments")
    deployment = Deployment.objects.select_related("fleet", "artifact").get(pk=deployment_id)
    users = deployment_users(deployment)
    if users:
        raise Conflict(
            f"deployment {deployment.pk} ({deployment}) serves traffic: used by " + ", ".join(users)
        )
    if deployment.state == DeploymentState.FAILED:
        teardown(deployment)  # best effort, again: a replica may have come back since
        return deployment
    if deployment.state == DeploymentState.RETIRED:
        return deployment
    deployment_retire(deployment_id=deployment.pk, actor=actor, reason="deleted")
    deployment.refresh_from_db()
    return deployment


def deployment_retire(
    *, deployment_id: int, actor: User | None = None, reason: str = "no route or rule uses it"
) -> bool:
    """Unloads a deployment that no route or rule uses any more and marks it retired; returns
    whether it did. Safe to run twice. The unload is a network call, made outside any
    transaction: a deployment put back in use during its few seconds is not caught here, and the
    replica probe then reports it unhealthy."""
    deployment = (
        Deployment.objects.select_related("fleet", "artifact").filter(pk=deployment_id).first()
    )
    if deployment is None or deployment.state == DeploymentState.RETIRED:
        return False
    if Deployment.objects.in_use().filter(pk=deployment.pk).exists():
        return False  # promoted again, back in a route, or a rule's target since: keep it
    teardown(deployment)
    with transaction.atomic():
        retired = (
            Deployment.objects.filter(pk=deployment_id)
            .exclude(state=DeploymentState.RETIRED)
            .update(state=DeploymentState.RETIRED)
        )
        if retired:
            audit_record(
                action="deployment.retired",
                target=deployment,
                actor=actor,
                reason=reason,
            )
    return bool(retired)
