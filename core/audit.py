"""The one write path for the audit log."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import models

from core.models import AuditEvent


def audit_record(
    *,
    actor: AbstractBaseUser | None,
    action: str,
    target: models.Model | tuple[str, str],
    tenant: models.Model | None = None,
    reason: str = "",
    data: dict[str, Any] | None = None,
) -> AuditEvent:
    """Record a state change; call it inside the transaction that makes the change.

    `target` is the changed row, or (type, id) for things that are not one row (a family)."""
    target_type, target_id = (
        target if isinstance(target, tuple) else (target._meta.label_lower, str(target.pk))
    )
    # By id: the users and tenants are the tenants app's, which sits above this one.
    return AuditEvent.objects.create(
        actor_id=actor.pk if actor is not None else None,
        actor_name=actor.get_username() if actor is not None else "system",
        action=action,
        target_type=target_type,
        target_id=target_id,
        tenant_id=tenant.pk if tenant is not None else None,
        reason=reason,
        data=data or {},
    )
