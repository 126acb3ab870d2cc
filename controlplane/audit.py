"""The one write path for the audit log."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db import models

from controlplane.models import AuditEvent

if TYPE_CHECKING:
    from tenants.models import Tenant, User


def audit_record(
    *,
    actor: User | None,
    action: str,
    target: models.Model,
    tenant: Tenant | None = None,
    reason: str = "",
    data: dict[str, Any] | None = None,
) -> AuditEvent:
    """Record a state change; call it inside the transaction that makes the change."""
    return AuditEvent.objects.create(
        actor=actor,
        actor_name=actor.get_username() if actor is not None else "system",
        action=action,
        target_type=target._meta.label_lower,
        target_id=str(target.pk),
        tenant=tenant,
        reason=reason,
        data=data or {},
    )
