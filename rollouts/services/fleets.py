"""Fleets and their replicas: created, drained and removed by release managers (or their
pipelines), each change audited and, where the gateway routes by it, published after commit.

Nothing that serves traffic is removed: a replica must be drained first, and a fleet must have no
deployment left on it; the refusal names what still uses it.
"""

from __future__ import annotations

from decimal import Decimal

from django.db import IntegrityError, transaction

from core.audit import audit_record
from core.errors import Conflict, NotFound
from core.publication import gateway_snapshot_changed
from rollouts.choices import DeploymentState, Provider, ReplicaState
from rollouts.models import Deployment, Fleet, Replica
from rollouts.services.common import full_clean_or_raise, require_release_manager
from tenants.models import User

GONE = (DeploymentState.RETIRED, DeploymentState.FAILED)


def fleet_create(
    *,
    actor: User | None,
    name: str,
    provider: Provider = Provider.STATIC,
    gpu_type: str = "",
    gpus_per_replica: int = 1,
    dollars_per_gpu_hour: Decimal = Decimal("0"),
) -> Fleet:
    actor = require_release_manager(actor, "create fleets")
    fleet = Fleet(
        name=name,
        provider=provider,
        gpu_type=gpu_type,
        gpus_per_replica=gpus_per_replica,
        dollars_per_gpu_hour=dollars_per_gpu_hour,
    )
    full_clean_or_raise(fleet)
    try:
        with transaction.atomic():
            fleet.save()
            audit_record(
                actor=actor,
                action="fleet.created",
                target=fleet,
                data={
                    "provider": provider,
                    "gpu_type": gpu_type,
                    "price": str(fleet.dollars_per_gpu_hour),
                },
            )
    except IntegrityError as exc:
        raise Conflict(f"a fleet named {name!r} already exists") from exc
    return fleet


def fleet_delete(*, actor: User | None, name: str) -> None:
    actor = require_release_manager(actor, "delete fleets")
    with transaction.atomic():
        fleet = Fleet.objects.select_for_update().filter(name=name).first()
        if fleet is None:
            raise NotFound(f"no fleet named {name!r}")
        live = list(fleet.deployments.exclude(state__in=GONE))
        if live:
            raise Conflict(
                f"fleet {name} still has deployments: "
                + ", ".join(
                    f"{d.pk} ({d.artifact} as {d.served_model_name}, {d.state})" for d in live
                )
                + "; delete them first"
            )
        if fleet.deployments.exists():
            raise Conflict(
                f"fleet {name} keeps the history of {fleet.deployments.count()} retired "
                "deployments (their rollouts name it); it cannot be deleted, only left empty"
            )
        audit_record(actor=actor, action="fleet.deleted", target=fleet, data={"name": name})
        fleet.delete()
        gateway_snapshot_changed()


def replica_add(*, actor: User | None, fleet: Fleet, name: str, base_url: str) -> Replica:
    actor = require_release_manager(actor, "add replicas")
    replica = Replica(fleet=fleet, name=name, base_url=base_url)
    full_clean_or_raise(replica)
    try:
        with transaction.atomic():
            replica.save()
            audit_record(
                actor=actor, action="replica.added", target=replica, data={"base_url": base_url}
            )
            gateway_snapshot_changed()
    except IntegrityError as exc:
        raise Conflict(
            f"fleet {fleet.name} already has a replica named {name!r} or at {base_url}"
        ) from exc
    return replica


def replica_drain(*, actor: User | None, replica_id: int) -> Replica:
    """Takes the replica out of the gateway's routing (requests in flight finish)."""
    actor = require_release_manager(actor, "drain replicas")
    with transaction.atomic():
        replica = Replica.objects.select_for_update().select_related("fleet").get(pk=replica_id)
        if replica.state == ReplicaState.DRAINING:
            return replica
        others = replica.fleet.replicas.filter(state=ReplicaState.ACTIVE).exclude(pk=replica.pk)
        serving = Deployment.objects.in_use().filter(fleet=replica.fleet).exists()
        if serving and not others.select_for_update().exists():
            raise Conflict(
                f"replica {replica} is the last active one of a fleet that serves traffic; "
                "add another replica first"
            )
        previous = replica.state
        replica.state = ReplicaState.DRAINING
        replica.save(update_fields=["state"])
        audit_record(
            actor=actor, action="replica.draining", target=replica, data={"from": previous}
        )
        gateway_snapshot_changed()
    return replica


def replica_remove(*, actor: User | None, replica_id: int) -> None:
    actor = require_release_manager(actor, "remove replicas")
    with transaction.atomic():
        replica = Replica.objects.select_for_update().select_related("fleet").get(pk=replica_id)
        serving = list(
            Deployment.objects.in_use().filter(fleet=replica.fleet).select_related("artifact")
        )
        if replica.state == ReplicaState.ACTIVE and serving:
            raise Conflict(
                f"replica {replica} serves traffic for "
                + ", ".join(f"{d.artifact} ({d.served_model_name})" for d in serving)
                + "; drain it first"
            )
        audit_record(
            actor=actor,
            action="replica.removed",
            target=replica,
            data={"base_url": replica.base_url, "state": replica.state},
        )
        replica.delete()
        gateway_snapshot_changed()
