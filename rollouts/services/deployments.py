"""Deployment lifecycle writes that are not a rollout's transition: retiring what nothing uses."""

from __future__ import annotations

from django.db import transaction

from core.audit import audit_record
from rollouts.choices import DeploymentState
from rollouts.models import Deployment
from rollouts.providers import teardown


def deployment_retire(*, deployment_id: int) -> bool:
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
                actor=None,
                action="deployment.retired",
                target=deployment,
                reason="no route or rule uses it",
            )
    return bool(retired)
