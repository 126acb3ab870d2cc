"""A tenant's usage right now against each limit, read from the gateway's budget counters.

The gateway admits requests against counters in Redis (gateway/budgets.py); the same counters
are the only up-to-the-second picture of this minute, today and this month, so the dashboard
reads them rather than the rollups, which lag by a consumer tick. They count what admission
*reserved*: a request in flight holds its whole output allowance until it settles.
The key names come from gateway/budget_keys.py. Per-minute limits are GCRA limiters: their
"used" is how much of the minute's allowance they hold ahead of now.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

import redis

from core.redis import get_redis
from gateway import budget_keys as keys
from tenants.models import Budget, Tenant

logger = logging.getLogger(__name__)


def budget_keys(tenant_id: int, now: dt.datetime) -> dict[str, str]:
    """The gateway's counter of each limit (gateway/budget_keys.py names them)."""
    tenant = str(tenant_id)
    return {
        **{name: keys.limiter_key(tenant, name) for name in keys.PER_MINUTE},
        "tokens_per_day": keys.day_key(tenant, now),
        "tokens_per_month": keys.month_key(tenant, now),
        "max_concurrent_requests": f"{keys.tenant_prefix(tenant)}:inflight",
    }


LABELS = {
    "requests_per_minute": "Requests this minute",
    "input_tokens_per_minute": "Input tokens this minute",
    "output_tokens_per_minute": "Output tokens this minute (reserved)",
    "tokens_per_day": "Tokens today (UTC)",
    "tokens_per_month": "Tokens this month (UTC)",
    "max_concurrent_requests": "Requests in flight",
}


@dataclass(frozen=True)
class Gauge:
    limit_name: str
    label: str
    used: int
    limit: int | None

    @property
    def percent(self) -> float | None:
        if self.limit is None:
            return None
        if self.limit == 0:
            return 100.0
        return min(100.0, 100.0 * self.used / self.limit)

    @property
    def level(self) -> str:
        percent = self.percent
        if percent is None or percent < 75:
            return "ok"
        return "warn" if percent < 95 else "full"


def current_usage(
    tenant_id: int, now: dt.datetime | None = None, *, budget: Budget | None = None
) -> dict[str, int]:
    """Raises redis.RedisError when the budget store is unreachable. The per-minute figures need
    the `budget` (a limiter holds time, which its limit turns into units); without it they are 0.
    """
    now = now or dt.datetime.now(dt.UTC)
    names = budget_keys(tenant_id, now)
    client = get_redis()
    pipe = client.pipeline(transaction=False)
    counters = [name for name in names if name != "max_concurrent_requests"]
    for name in counters:
        pipe.get(names[name])
    # Reservations past their deadline (a gateway died) are still members until the next
    # admission refunds them: count only the live ones.
    pipe.zcount(names["max_concurrent_requests"], int(now.timestamp() * 1000), "+inf")
    pipe.time()  # the limiters' clock is Redis's
    *values, in_flight, (seconds, micros) = pipe.execute()
    now_ms = seconds * 1000 + micros / 1000
    raw = dict(zip(counters, values, strict=True))
    used = {name: max(0, int(raw[name] or 0)) for name in ("tokens_per_day", "tokens_per_month")}
    for name in keys.PER_MINUTE:
        limit = getattr(budget, name, None) if budget is not None else None
        tat = float(raw[name]) if raw[name] is not None else None
        used[name] = keys.limiter_usage(tat, now_ms, limit or 0)
    used["max_concurrent_requests"] = int(in_flight)
    return used


def gauges(tenant: Tenant, budget: Budget) -> list[Gauge] | None:
    """None when the budget store cannot be read (the page says so instead of failing)."""
    try:
        used = current_usage(tenant.pk, budget=budget)
    except (redis.RedisError, OSError) as exc:
        logger.warning("budget counters of %s unreadable: %s", tenant.slug, exc)
        return None
    return [Gauge(name, LABELS[name], used[name], getattr(budget, name)) for name in LABELS]
