"""A tenant's budget: its limits, set outright or as a compare-and-set on what a person saw."""

from __future__ import annotations

from django.db import transaction

from core.audit import audit_record
from core.errors import Conflict, DomainError
from core.publication import gateway_snapshot_changed
from tenants.choices import SoftLimitAction
from tenants.models import Budget, Tenant, User

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
        gateway_snapshot_changed()
    return budget
