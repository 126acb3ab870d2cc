"""Route rule writes: requests sent to a deployment of their own, outside the A/B split. A change
holds its route's row lock and reaches the gateway after commit."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import transaction
from django.db.models import Max

from core.audit import audit_record
from core.errors import Conflict, DomainError, NotFound
from core.publication import gateway_snapshot_changed
from rollouts.choices import DeploymentState
from rollouts.models import Deployment, Route, RouteRule
from rollouts.services.common import (
    full_clean_or_raise,
    require_release_manager,
)
from tenants.models import Tenant, User


def _check_rule(rule: RouteRule, route: Route, tenants: list[Tenant]) -> None:
    target = rule.target
    if not (tenants or rule.tiers or rule.min_prompt_tokens or rule.max_prompt_tokens is not None):
        # A rule matching everything would take the whole route out of its split.
        raise DomainError("a rule must match on something: tenants, tiers, or a prompt-token bound")
    low, high = rule.min_prompt_tokens, rule.max_prompt_tokens
    if low is not None and high is not None and low > high:
        raise DomainError(
            f"min_prompt_tokens ({low}) is above max_prompt_tokens ({high}): no prompt matches"
        )
    if target.state != DeploymentState.READY:
        raise DomainError(
            f"deployment {target.pk} ({target}) is {target.state}: a rule may only send traffic "
            "to a ready deployment"
        )
    if low is not None and target.max_model_len is not None and low >= target.max_model_len:
        raise DomainError(
            f"deployment {target.pk} serves a context of {target.max_model_len} tokens; prompts "
            f"of {low} or more would all fail there"
        )
    allowed = set(route.tenants.values_list("pk", flat=True))
    outsiders = sorted(t.slug for t in tenants if allowed and t.pk not in allowed)
    if outsiders:
        raise DomainError(
            f"route {route.name} is closed to {', '.join(outsiders)}: the rule could never match"
        )


def _rule_audit_data(rule: RouteRule, tenants: list[Tenant]) -> dict[str, Any]:
    return {
        "route": rule.route.name,
        "order": rule.order,
        "tenants": sorted(t.slug for t in tenants),
        "tiers": list(rule.tiers),
        "min_prompt_tokens": rule.min_prompt_tokens,
        "max_prompt_tokens": rule.max_prompt_tokens,
        "target": rule.target_id,
    }


def route_rule_create(
    *,
    actor: User | None,
    route: Route,
    name: str,
    target: Deployment,
    tenants: Iterable[Tenant] = (),
    tiers: Iterable[str] = (),
    min_prompt_tokens: int | None = None,
    max_prompt_tokens: int | None = None,
    order: int | None = None,
) -> RouteRule:
    """A rule at `order` (by default after the route's last one), published after commit."""
    actor = require_release_manager(actor, "change route rules")
    tenant_list = list(tenants)
    with transaction.atomic():
        # The route's row lock serialises rule changes on it (names and orders stay unique).
        route = Route.objects.select_for_update().get(pk=route.pk)
        rules = RouteRule.objects.filter(route=route)
        if order is None:
            order = (rules.aggregate(last=Max("order"))["last"] or 0) + 1
        rule = RouteRule(
            route=route,
            name=name,
            order=order,
            tiers=sorted(set(tiers)),
            min_prompt_tokens=min_prompt_tokens,
            max_prompt_tokens=max_prompt_tokens,
            target=target,
            created_by=actor,
        )
        full_clean_or_raise(rule)
        _check_rule(rule, route, tenant_list)
        if rules.filter(name=name).exists():
            raise Conflict(f"route {route.name} already has a rule named {name!r}")
        if rules.filter(order=order).exists():
            raise Conflict(f"route {route.name} already has a rule at order {order}")
        rule.save()
        rule.tenants.set(tenant_list)
        audit_record(
            actor=actor,
            action="route_rule.created",
            target=rule,
            data=_rule_audit_data(rule, tenant_list),
        )
        gateway_snapshot_changed()
    return rule


def route_rule_update(
    *,
    actor: User | None,
    rule_id: int,
    target: Deployment,
    tenants: Iterable[Tenant] = (),
    tiers: Iterable[str] = (),
    min_prompt_tokens: int | None = None,
    max_prompt_tokens: int | None = None,
    order: int | None = None,
) -> RouteRule:
    """Replaces what the rule matches and where it sends it (its name stays: past samples carry
    it as their arm)."""
    actor = require_release_manager(actor, "change route rules")
    tenant_list = list(tenants)
    with transaction.atomic():
        rule = RouteRule.objects.filter(pk=rule_id).select_related("route").first()
        if rule is None:
            raise NotFound(f"route rule {rule_id} does not exist")
        route = Route.objects.select_for_update().get(pk=rule.route_id)
        before = _rule_audit_data(rule, list(rule.tenants.all()))
        rule.target = target
        rule.tiers = sorted(set(tiers))
        rule.min_prompt_tokens, rule.max_prompt_tokens = min_prompt_tokens, max_prompt_tokens
        if order is not None:
            taken = RouteRule.objects.filter(route=route, order=order).exclude(pk=rule.pk)
            if taken.exists():
                raise Conflict(f"route {route.name} already has a rule at order {order}")
            rule.order = order
        full_clean_or_raise(rule)
        _check_rule(rule, route, tenant_list)
        rule.save()
        rule.tenants.set(tenant_list)
        audit_record(
            actor=actor,
            action="route_rule.updated",
            target=rule,
            data={"before": before, "after": _rule_audit_data(rule, tenant_list)},
        )
        gateway_snapshot_changed()
    return rule


def route_rule_delete(*, actor: User | None, rule_id: int, reason: str = "") -> None:
    actor = require_release_manager(actor, "change route rules")
    with transaction.atomic():
        rule = RouteRule.objects.filter(pk=rule_id).select_related("route").first()
        if rule is None:
            raise NotFound(f"route rule {rule_id} does not exist")
        Route.objects.select_for_update().get(pk=rule.route_id)
        data = _rule_audit_data(rule, list(rule.tenants.all()))
        audit_record(
            actor=actor,
            action="route_rule.deleted",
            target=("rollouts.routerule", str(rule.pk)),
            reason=reason,
            data=data | {"name": rule.name},
        )
        rule.delete()
        gateway_snapshot_changed()
