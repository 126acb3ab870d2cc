"""The gateway's day and month budget counters, raised from the usage rows after Redis lost them.

Admission counts each tenant's tokens today and this month in Redis (gateway/budgets.py). A Redis
without persistence that restarts comes back without them, and every tenant could spend its whole
day and month again. The usage rows (tenants/usage.py) hold what the gateway served, so a beat task
asks every 2 s whether this Redis run has had its counters rebuilt, and if not raises each tenant's
day and month counters to the tokens its day rows show.

Raised, never lowered and never added to: a counter already above the rows (it also counts
reservations in flight and requests the usage consumer has not reached yet) is left as it is, so a
rebuild can run twice, or on a Redis that lost nothing, without charging anyone twice. What it
cannot bring back are the tokens of requests admitted after Redis came back and before the rebuild
(they are in the counter, which the rows then replace) and the records still on the lost stream.
"""

from __future__ import annotations

import datetime as dt
import logging

from django.db.models import F, Q, Sum
from django.utils import timezone

from core.redis import get_redis
from gateway.budget_keys import DAY_TTL_S, MONTH_TTL_S, day_key, month_key
from tenants.choices import Granularity
from tenants.models import UsageRollup

logger = logging.getLogger(__name__)

# The run id of the Redis server whose counters were last rebuilt (it changes at every start).
REBUILT_RUN_KEY = "tollgate:budget:rebuilt-run"

# KEYS: 1 day counter  2 month counter.  ARGV: 1 day tokens  2 month tokens  3, 4 their TTLs.
RAISE = """
local function raise(key, total, ttl)
  local held = tonumber(redis.call('GET', key) or '0')
  if total > held then
    redis.call('INCRBY', key, total - held)
    if redis.call('TTL', key) < 0 then redis.call('EXPIRE', key, ttl) end
  end
end
raise(KEYS[1], tonumber(ARGV[1]), ARGV[3])
raise(KEYS[2], tonumber(ARGV[2]), ARGV[4])
return 1
"""


def budget_counters_rebuild(*, now: dt.datetime | None = None) -> int:
    """Raises every tenant's counters for today and this month (UTC) to the tokens in its usage
    rows; returns how many tenants had usage this month. Safe to run at any time, and twice."""
    now = now or timezone.now()
    day = now.astimezone(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    month = day.replace(day=1)
    tokens = F("tokens_in") + F("tokens_out")
    totals = (
        UsageRollup.objects.filter(granularity=Granularity.DAY, bucket__gte=month, bucket__lte=day)
        .values("tenant_id")
        .annotate(month_tokens=Sum(tokens), day_tokens=Sum(tokens, filter=Q(bucket=day)))
        .order_by()
    )
    client = get_redis()
    pipe = client.pipeline(transaction=False)
    count = 0
    for row in totals:
        tenant_id = str(row["tenant_id"])
        pipe.eval(
            RAISE,
            2,
            day_key(tenant_id, now),
            month_key(tenant_id, now),
            int(row["day_tokens"] or 0),
            int(row["month_tokens"] or 0),
            DAY_TTL_S,
            MONTH_TTL_S,
        )
        count += 1
    pipe.execute()
    return count


def budget_counters_rebuild_if_lost(*, now: dt.datetime | None = None) -> bool:
    """Rebuilds the counters once per Redis run; True when it did. One run id and one key read
    when there is nothing to do.

    A run that restarts between the rebuild and the mark is simply rebuilt again: the mark names
    the run it was read from, not the one it lands in."""
    client = get_redis()
    run_id = str(client.info("server")["run_id"])
    if client.get(REBUILT_RUN_KEY) == run_id:
        return False
    tenants = budget_counters_rebuild(now=now)
    client.set(REBUILT_RUN_KEY, run_id)
    logger.warning(
        "budget counters of %s tenants rebuilt from the usage rows for Redis run %s",
        tenants,
        run_id,
    )
    return True
