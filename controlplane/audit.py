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
    target: models.Model | tuple[str, str],
    tenant: Tenant | None = None,
    reason: str = "",
    data: dict[str, Any] | None = None,
) -> AuditEvent:
    """Record a state change; call it inside the transaction that makes the change.

    `target` is the changed row, or (type, id) for things that are not one row (a family)."""
    target_type, target_id = (
        target if isinstance(target, tuple) else (target._meta.label_lower, str(target.pk))
    )
    return AuditEvent.objects.create(
        actor=actor,
        actor_name=actor.get_username() if actor is not None else "system",
        action=action,
        target_type=target_type,
        target_id=target_id,
        tenant=tenant,
        reason=reason,
        data=data or {},
    )
