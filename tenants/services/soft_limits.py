"""Soft limits: flag the tenants whose tokens today or this month are past their budget's soft
limit, so the gateway applies the budget's soft-limit action (refuse, or use a cheaper route).

The usage is read from the gateway's own budget counters (tenants.gauges), so the flag follows
the same numbers admission enforces, within one beat tick. The flag is stored on the tenant and
changed by compare-and-set, audited, and the gateway snapshot is published only when a flag
actually changed.
"""

from __future__ import annotations

import datetime as dt
import logging

import redis
from django.db import transaction
from django.db.models import Q

from core.audit import audit_record
from core.publication import gateway_snapshot_changed
from tenants.gauges import current_usage
from tenants.models import Budget, Tenant

logger = logging.getLogger(__name__)


def is_over(budget: Budget, day_tokens: int, month_tokens: int) -> bool:
    if budget.soft_limit_percent is None:
        return False
    share = budget.soft_limit_percent / 100
    over_day = budget.tokens_per_day is not None and day_tokens >= budget.tokens_per_day * share
    over_month = (
        budget.tokens_per_month is not None and month_tokens >= budget.tokens_per_month * share
    )
    return over_day or over_month


def soft_limits_check(*, now: dt.datetime | None = None) -> list[str]:
    """Sets each tenant's over_soft_limit from its current usage; returns the slugs that
    changed. Safe to run concurrently: a flag changes only from the value this run read."""
    now = now or dt.datetime.now(dt.UTC)
    candidates = Tenant.objects.filter(
        Q(budget__soft_limit_percent__isnull=False) | Q(over_soft_limit=True)
    ).select_related("budget")
    changed = []
    for tenant in candidates:
        budget = getattr(tenant, "budget", None)
        over = False
        if budget is not None and budget.soft_limit_percent is not None:
            try:
                used = current_usage(tenant.pk, now)
            except (redis.RedisError, OSError) as exc:
                # Unknown usage changes nothing: the gateway keeps the last published flag.
                logger.warning("soft limit of %s not checked: %s", tenant.slug, exc)
                continue
            over = is_over(budget, used["tokens_per_day"], used["tokens_per_month"])
        if over == tenant.over_soft_limit:
            continue
        with transaction.atomic():
            updated = Tenant.objects.filter(pk=tenant.pk, over_soft_limit=not over).update(
                over_soft_limit=over
            )
            if not updated:
                continue  # another check got there first
            tenant.over_soft_limit = over
            audit_record(
                actor=None,
                action="tenant.soft_limit_crossed" if over else "tenant.soft_limit_cleared",
                target=tenant,
                tenant=tenant,
                data={
                    "soft_limit_percent": budget.soft_limit_percent if budget else None,
                    "action": budget.soft_limit_action if budget else None,
                },
            )
            gateway_snapshot_changed()
        changed.append(tenant.slug)
    return changed
