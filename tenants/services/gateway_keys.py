"""Gateway keys: issued with their secret shown once, revoked at once at every gateway."""

from __future__ import annotations

import datetime as dt

from django.db import IntegrityError, transaction
from django.utils import timezone

from core.audit import audit_record
from core.errors import Conflict, DomainError, NotFound
from core.publication import gateway_snapshot_changed
from tenants.models import ApiKey, Tenant, User
from tenants.tokens import TENANT_KEY_PREFIX, hash_secret, new_secret, visible_prefix


def api_key_create(
    *,
    actor: User | None,
    tenant: Tenant,
    name: str,
    allowed_routes: list[str] | None = None,
    can_force_arm: bool = False,
    expires_at: dt.datetime | None = None,
    secret: str | None = None,
) -> tuple[ApiKey, str]:
    """Issue a gateway key; the secret is returned once and never stored (`secret` is for the
    demo seed's reproducible keys only)."""
    # allowed_routes are not checked against the routes: a name only ever narrows what the key
    # may reach, and routes come and go independently of keys.
    if expires_at is not None and expires_at <= timezone.now():
        raise DomainError("expires_at: the expiry must be in the future")
    secret = secret or new_secret(TENANT_KEY_PREFIX)
    key = ApiKey(
        tenant=tenant,
        name=name,
        prefix=visible_prefix(secret),
        key_hash=hash_secret(secret),
        allowed_routes=sorted(set(allowed_routes or [])),
        can_force_arm=can_force_arm,
        expires_at=expires_at,
        created_by=actor,
    )
    key.full_clean(validate_constraints=False)
    with transaction.atomic():
        try:
            with transaction.atomic():
                key.save()
        except IntegrityError as exc:
            raise Conflict(f"tenant {tenant.slug} already has a key named {name!r}") from exc
        audit_record(
            actor=actor,
            action="api_key.created",
            target=key,
            tenant=tenant,
            data={"name": name, "prefix": key.prefix, "can_force_arm": can_force_arm},
        )
        gateway_snapshot_changed()
    return key, secret


def api_key_revoke(*, actor: User | None, key_id: int) -> ApiKey:
    with transaction.atomic():
        key = ApiKey.objects.select_for_update().filter(pk=key_id).first()
        if key is None:
            raise NotFound(f"API key {key_id} does not exist")
        if key.revoked_at is not None:
            return key
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
        audit_record(actor=actor, action="api_key.revoked", target=key, tenant=key.tenant)
        gateway_snapshot_changed()
    return key
