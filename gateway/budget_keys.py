"""The names of a tenant's day and month budget counters in Redis, for all who read or rebuild them.

The gateway's admission script charges these keys (gateway/budgets.py); the control plane reads
them for the dashboards and raises them again from the usage rows after Redis lost its data
(tenants/budget_counters.py). Windows are UTC days and months. Every key of a tenant carries the
tenant in a hash tag, so all of them share one Redis Cluster slot.
"""

from __future__ import annotations

import datetime as dt

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

