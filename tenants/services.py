"""All writes to tenants, users and API tokens."""

from __future__ import annotations

import datetime as dt

from django.db import IntegrityError, transaction
from django.utils import timezone

from controlplane.audit import audit_record
from controlplane.errors import Conflict, DomainError, NotFound
from tenants.choices import FailMode, Role, Scope, SoftLimitAction, Tier
from tenants.models import ApiKey, ApiToken, Budget, Tenant, User
from tenants.tokens import TENANT_KEY_PREFIX, hash_secret, new_secret, visible_prefix


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
        _publish_gateway_config()
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


# --- gateway keys and budgets ---------------------------------------------------------------------


def _publish_gateway_config() -> None:
    """The gateway learns of the change within a second: publish once the change is committed."""
    from controlplane.celery import app as celery_app

    # robust: a broker outage must not fail the change; the scheduled publication repairs it.
    transaction.on_commit(lambda: celery_app.send_task("gateway.publish"), robust=True)


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
        _publish_gateway_config()
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
        _publish_gateway_config()
    return key


BUDGET_FIELDS = (
    "requests_per_minute",
    "input_tokens_per_minute",
    "output_tokens_per_minute",
    "tokens_per_day",
    "tokens_per_month",
    "max_concurrent_requests",
    "max_context_tokens",
    "max_output_tokens",
    "over_max_output",
    "default_output_allowance",
    "soft_limit_percent",
    "soft_limit_action",
    "soft_limit_route",
)


def _check_routes(tenant: Tenant, names: list[str], what: str) -> None:
    # Imported here: selectors look routes up through the app registry (rollouts imports
    # tenants, never the reverse).
    from tenants.selectors import routes_open_to

    unknown = sorted(set(names) - set(routes_open_to(tenant)))
    if unknown:
        raise DomainError(
            f"{what}: no route {', '.join(map(repr, unknown))} is open to tenant {tenant.slug}"
        )


def _check_soft_limit(budget: Budget) -> None:
    if budget.soft_limit_action == SoftLimitAction.ROUTE and not budget.soft_limit_route:
        raise DomainError("soft_limit_route: name the cheaper route to send requests to")
    if budget.soft_limit_route:
        _check_routes(budget.tenant, [budget.soft_limit_route], "soft_limit_route")
    if budget.soft_limit_percent is not None and not (
        budget.tokens_per_day or budget.tokens_per_month
    ):
        raise DomainError(
            "soft_limit_percent: a soft limit is a share of tokens_per_day or tokens_per_month; "
            "set one of them first"
        )


def budget_version(budget: Budget) -> str:
    """What a reviewer saw: the budget's last change, or "new" for a budget never saved."""
    return budget.updated_at.isoformat() if budget.pk and budget.updated_at else "new"


def budget_set(
    *, actor: User | None, tenant: Tenant, reason: str = "", **limits: int | str | None
) -> Budget:
    """Set some of a tenant's limits (the others stay); audited with the before and after."""
    return _budget_apply(actor, tenant, reason, None, limits)


def budget_set_confirmed(
    *,
    actor: User | None,
    tenant: Tenant,
    expected_version: str,
    limits: dict[str, int | str | None],
    reason: str = "",
) -> Budget:
    """budget_set as a compare-and-set on what the person confirmed (`budget_version` of the
    budget they reviewed): a budget someone else changed since is refused, not overwritten."""
    return _budget_apply(actor, tenant, reason, expected_version, limits)


def _budget_apply(
    actor: User | None,
    tenant: Tenant,
    reason: str,
    expected_version: str | None,
    limits: dict[str, int | str | None],
) -> Budget:
    unknown = set(limits) - set(BUDGET_FIELDS)
    if unknown:
        raise DomainError(f"unknown budget fields: {', '.join(sorted(unknown))}")
    with transaction.atomic():
        budget, created = Budget.objects.select_for_update().get_or_create(tenant=tenant)
        current = "new" if created else budget_version(budget)
        if expected_version is not None and expected_version != current:
            raise Conflict(
                f"the budget of {tenant.slug} was changed by someone else since you reviewed "
                "it; review the change again"
            )
        before = {name: getattr(budget, name) for name in limits}
        for name, value in limits.items():
            setattr(budget, name, "" if name == "soft_limit_route" and value is None else value)
        budget.full_clean()
        _check_soft_limit(budget)
        changed = {
            n: [before[n], getattr(budget, n)] for n in limits if before[n] != getattr(budget, n)
        }
        if not changed:
            return budget
        budget.save()
        audit_record(
            actor=actor,
            action="budget.changed",
            target=budget,
            tenant=tenant,
            reason=reason,
            data={"changes": changed},
        )
        _publish_gateway_config()
    return budget
