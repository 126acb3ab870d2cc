"""Replica health: every replica serving traffic probed with a real inference, outside any
transaction."""

from __future__ import annotations

from django.utils import timezone

from core.publication import gateway_snapshot_changed
from rollouts.models import Deployment, Replica


def replicas_probe() -> int:
    """Probes every active replica serving a route with a real inference and records the
    outcome; publishes the gateway configuration when a replica's health changed. Returns how
    many changed. Network calls happen outside any transaction."""
    from rollouts.providers import probe

    changed = 0
    for deployment in Deployment.objects.in_use().select_related("fleet"):
        for replica in deployment.fleet.replicas.filter(state="active"):
            result = probe(replica, deployment.served_model_name)
            row = Replica.objects.filter(pk=replica.pk)
            changed += row.exclude(healthy=result.ok).update(healthy=result.ok)
            row.update(last_probe_at=timezone.now())
    if changed:
        gateway_snapshot_changed()
    return changed
