"""Writes to tenants, their users and the API tokens people and pipelines use."""

from __future__ import annotations

import datetime as dt

from django.db import IntegrityError, transaction
from django.utils import timezone

from core.audit import audit_record
from core.errors import Conflict, DomainError, NotFound, PermissionDenied
from core.publication import gateway_snapshot_changed
from tenants.choices import ROLE_SCOPES, FailMode, Role, Scope, Tier
from tenants.models import ApiToken, Tenant, User
from tenants.services.budgets import budget_set
from tenants.tokens import hash_secret, new_secret, visible_prefix


def tenant_create(
    *,
    actor: User | None,
    slug: str,
    name: str,
    tier: Tier = Tier.STANDARD,
    fail_mode: FailMode = FailMode.CLOSED,
) -> Tenant:
    tenant = Tenant(slug=slug, name=name, tier=tier, fail_mode=fail_mode)
    tenant.full_clean()
    with transaction.atomic():
        tenant.save()
        audit_record(actor=actor, action="tenant.created", target=tenant, tenant=tenant)
    return tenant


TENANT_FIELDS = ("name", "tier", "fail_mode")


def tenant_update(*, actor: User | None, tenant_id: int, reason: str = "", **fields: str) -> Tenant:
    """Change a tenant's name, tier or fail mode; audited with before and after, and published
    to the gateway (the tier orders shedding, the fail mode decides outages)."""
    unknown = set(fields) - set(TENANT_FIELDS)
    if unknown:
        raise DomainError(f"unknown tenant fields: {', '.join(sorted(unknown))}")
    with transaction.atomic():
        tenant = Tenant.objects.select_for_update().filter(pk=tenant_id).first()
        if tenant is None:
            raise NotFound(f"tenant {tenant_id} does not exist")
        before = {name: getattr(tenant, name) for name in fields}
        for name, value in fields.items():
            setattr(tenant, name, value)
        tenant.full_clean()
        changed = {n: [before[n], v] for n, v in fields.items() if before[n] != v}
        if not changed:
            return tenant
        tenant.save(update_fields=list(changed))
        audit_record(
            actor=actor,
            action="tenant.changed",
            target=tenant,
            tenant=tenant,
            reason=reason,
            data={"changes": changed},
        )
        gateway_snapshot_changed()
    return tenant


# /tenants/new/ is the page that creates tenants.
RESERVED_SLUGS = frozenset({"new"})


def tenant_onboard(
    *,
    actor: User,
    slug: str,
    name: str,
    tier: Tier = Tier.STANDARD,
    fail_mode: FailMode = FailMode.CLOSED,
    limits: dict[str, int | str | None] | None = None,
) -> Tenant:
    """A new tenant with its first budget, both or neither (release managers only)."""
    if not actor.is_release_manager:
        raise PermissionDenied("only release managers create tenants")
    if slug in RESERVED_SLUGS:
        raise DomainError(f"slug: {slug!r} is reserved (a page's address); choose another")
    taken = Conflict(f"a tenant with the slug {slug!r} already exists")
    if Tenant.objects.filter(slug=slug).exists():
        raise taken
    try:
        with transaction.atomic():
            tenant = tenant_create(
                actor=actor, slug=slug, name=name, tier=tier, fail_mode=fail_mode
            )
            budget_set(actor=actor, tenant=tenant, reason="onboarding", **(limits or {}))
    except IntegrityError as exc:  # the same slug, created at the same moment
        raise taken from exc
    return tenant


def user_create(
    *,
    actor: User | None,
    username: str,
    role: Role,
    tenant: Tenant | None = None,
    password: str | None = None,
    email: str = "",
) -> User:
    """Create a person or service account. Only release managers may use the Django admin."""
    user = User(
        username=username,
        email=email,
        role=role,
        tenant=tenant,
        is_staff=role == Role.RELEASE_MANAGER,
    )
    if password is None:
        user.set_unusable_password()
    else:
        user.set_password(password)
    user.full_clean()
    with transaction.atomic():
        user.save()
        audit_record(
            actor=actor, action="user.created", target=user, tenant=tenant, data={"role": role}
        )
    return user


def api_token_create(
    *,
    actor: User | None,
    user: User,
    name: str,
    scopes: list[Scope],
    expires_at: dt.datetime | None = None,
    secret: str | None = None,
) -> tuple[ApiToken, str]:
    """Issue a token and return it with its secret, which is never stored and never shown again.

    `secret` lets the demo seed reproduce the same well-known token on every run; real callers
    leave it out.
    """
    allowed = ROLE_SCOPES.get(user.role, frozenset())
    beyond = sorted(set(scopes) - allowed)
    if beyond:
        raise DomainError(
            f"scopes: {user.get_username()} is a {user.get_role_display().lower()}, whose tokens "
            f"may hold only {', '.join(sorted(allowed)) or 'no scope'}; "
            f"not {', '.join(beyond)}"
        )
    if not scopes:
        raise DomainError("scopes: give the token at least one scope")
    if expires_at is not None and expires_at <= timezone.now():
        raise DomainError("expires_at: the expiry must be in the future")
    secret = secret or new_secret()
    token = ApiToken(
        user=user,
        name=name,
        prefix=visible_prefix(secret),
        token_hash=hash_secret(secret),
        scopes=sorted(set(scopes)),
        expires_at=expires_at,
    )
    # Uniqueness is left to the database: a check here would race with a concurrent create.
    token.full_clean(validate_constraints=False)
    with transaction.atomic():
        try:
            with transaction.atomic():
                token.save()
        except IntegrityError as exc:
            raise Conflict(f"{user.get_username()} already has a token named {name!r}") from exc
        audit_record(
            actor=actor,
            action="api_token.created",
            target=token,
            tenant=user.tenant,
            data={"name": name, "scopes": token.scopes, "prefix": token.prefix},
        )
    return token, secret


def api_token_revoke(*, actor: User | None, token_id: int) -> ApiToken:
    with transaction.atomic():
        token = ApiToken.objects.select_for_update().filter(pk=token_id).first()
        if token is None:
            raise NotFound(f"API token {token_id} does not exist")
        if token.revoked_at is not None:
            return token  # already revoked: nothing changes, nothing to audit
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        audit_record(
            actor=actor, action="api_token.revoked", target=token, tenant=token.user.tenant
        )
    return token


# Writing last_used_at on every API call would turn each read into a write; a minute of
# precision is all people need to spot an unused token.
LAST_USED_PRECISION = dt.timedelta(seconds=60)


def api_token_touch(*, token: ApiToken) -> None:
    now = timezone.now()
    if token.last_used_at is not None and now - token.last_used_at < LAST_USED_PRECISION:
        return
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    token.last_used_at = now
