"""The names of a tenant's budget counters and limiters in Redis, for all who read or rebuild them.

The gateway's admission script charges these keys (gateway/budgets.py); the control plane reads
them for the dashboards and raises them again from the usage rows after Redis lost its data
(tenants/budget_counters.py). Windows are UTC days and months. Every key of a tenant carries the
tenant in a hash tag, so all of them share one Redis Cluster slot.
"""

from __future__ import annotations

import datetime as dt
import math

# How long the admission script keeps a window's counter after its last charge: past the end of
# the window, so that a late settlement still finds it.
DAY_TTL_S = 2 * 86400
MONTH_TTL_S = 32 * 86400


def tenant_prefix(tenant_id: str) -> str:
    return f"tollgate:budget:{{{tenant_id}}}"


def day_key(tenant_id: str, now: dt.datetime) -> str:
    """The counter of the tokens reserved and used in the UTC day of `now` (an aware datetime)."""
    return f"{tenant_prefix(tenant_id)}:day:{now.astimezone(dt.UTC):%Y%m%d}"


def month_key(tenant_id: str, now: dt.datetime) -> str:
    """The counter of the tokens reserved and used in the UTC month of `now`."""
    return f"{tenant_prefix(tenant_id)}:month:{now.astimezone(dt.UTC):%Y%m}"


# The per-minute limits, each a GCRA limiter whose key holds its theoretical arrival time (ms).
PER_MINUTE = ("requests_per_minute", "input_tokens_per_minute", "output_tokens_per_minute")
_LIMITER_SUFFIX = {
    "requests_per_minute": "rpm",
    "input_tokens_per_minute": "itpm",
    "output_tokens_per_minute": "otpm",
}


def limiter_key(tenant_id: str, limit_name: str) -> str:
    """The GCRA state of one of a tenant's per-minute limits (`PER_MINUTE`)."""
    return f"{tenant_prefix(tenant_id)}:{_LIMITER_SUFFIX[limit_name]}"


def limiter_usage(tat_ms: float | None, now_ms: float, limit: int) -> int:
    """How much of a per-minute limit is in use: what the limiter holds ahead of now."""
    if tat_ms is None or limit <= 0:
        return 0
    return max(0, math.ceil(round((tat_ms - now_ms) * limit / 60000, 3)))
