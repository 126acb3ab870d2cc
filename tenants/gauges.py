"""A tenant's usage right now against each limit, read from the gateway's budget counters.

The gateway admits requests against counters in Redis (gateway/budgets.py); the same counters
are the only up-to-the-second picture of this minute, today and this month, so the dashboard
reads them rather than the rollups, which lag by a consumer tick. They count what admission
*reserved*: a request in flight holds its whole output allowance until it settles.
The key names must stay those of gateway/budgets.py `_keys` (a test holds them together).
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

import redis

from controlplane.redis import get_redis
from tenants.models import Budget, Tenant

logger = logging.getLogger(__name__)


def budget_keys(tenant_id: int, now: dt.datetime) -> dict[str, str]:
    minute = int(now.timestamp() // 60)
    prefix = f"tollgate:budget:{{{tenant_id}}}"
    return {
        "requests_per_minute": f"{prefix}:rpm:{minute}",
        "input_tokens_per_minute": f"{prefix}:itpm:{minute}",
        "output_tokens_per_minute": f"{prefix}:otpm:{minute}",
        "tokens_per_day": f"{prefix}:day:{now:%Y%m%d}",
        "tokens_per_month": f"{prefix}:month:{now:%Y%m}",
        "max_concurrent_requests": f"{prefix}:inflight",
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


def current_usage(tenant_id: int, now: dt.datetime | None = None) -> dict[str, int]:
    """Raises redis.RedisError when the budget store is unreachable."""
    now = now or dt.datetime.now(dt.UTC)
    keys = budget_keys(tenant_id, now)
    client = get_redis()
    pipe = client.pipeline(transaction=False)
    counters = [name for name in keys if name != "max_concurrent_requests"]
    for name in counters:
        pipe.get(keys[name])
    # Reservations past their deadline (a gateway died) are still members until the next
    # admission refunds them: count only the live ones.
    pipe.zcount(keys["max_concurrent_requests"], int(now.timestamp() * 1000), "+inf")
    *values, in_flight = pipe.execute()
    used = {name: max(0, int(value or 0)) for name, value in zip(counters, values, strict=True)}
    used["max_concurrent_requests"] = int(in_flight)
    return used


def gauges(tenant: Tenant, budget: Budget) -> list[Gauge] | None:
    """None when the budget store cannot be read (the page says so instead of failing)."""
    try:
        used = current_usage(tenant.pk)
    except (redis.RedisError, OSError) as exc:
        logger.warning("budget counters of %s unreadable: %s", tenant.slug, exc)
        return None
    return [Gauge(name, LABELS[name], used[name], getattr(budget, name)) for name in LABELS]
