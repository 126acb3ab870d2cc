"""Tenant budgets, enforced atomically in Redis: one Lua script admits, another settles.

Admission checks every limit against what is already *reserved*, not what was already used, and
reserves the request's prompt tokens plus its whole output allowance in the same atomic step; the
end of the request gives back what was not used. So no number of concurrent requests, gateway
processes or hosts can together exceed a limit: they all go through the same script on the same
keys. A reservation that is never settled (a gateway died mid-request) expires after its deadline
and is refunded by the next admission of that tenant.

Per-minute limits are GCRA limiters (the generic cell rate algorithm): a limit of L a minute
spaces units 60/L s apart and lets at most L through at once, so there is no minute boundary to
pass 2L across and a refused client is told when capacity for *its* request is back, not to
return at :00. Their clock is Redis's own (`TIME`), the same for every gateway. Days and months
are calendar windows (UTC).

Settling is idempotent, keyed by the request id: a settlement retried after a lost reply, or sent
for an admission whose reply was lost, charges exactly once. Every key of a tenant carries the
tenant in a hash tag, so a tenant's keys share one Redis Cluster slot and one script can touch
them all.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import time
from dataclasses import dataclass

from gateway import budget_keys
from gateway.snapshot import Budget
from gateway.wire import Arg, RedisWire

ADMIT = """
-- KEYS: 1 requests/min  2 input tokens/min  3 output tokens/min (GCRA: the theoretical arrival
--       time in ms)  4 tokens/day  5 tokens/month  6 in-flight zset (member: request id, score:
--       expiry ms)  7 reservations hash  8 settled zset (request id, settled at ms)
-- ARGV: 1 clock ms (0: Redis TIME)  2 request id  3 prompt tokens  4 output allowance
--       5 reservation ttl ms  6..11 limits (rpm, input tpm, output tpm, day, month, concurrency;
--       -1 = none)  12 seconds to next day  13 to next month  14 day key  15 month key
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local prompt = tonumber(ARGV[3])
local allowance = tonumber(ARGV[4])

-- Refund reservations whose gateway never settled them (crashed), a few per call.
local stale = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now, 'LIMIT', 0, 20)
for _, rid in ipairs(stale) do
  local held = redis.call('HGET', KEYS[7], rid)
  if held then
    local p, a, day, month = string.match(held, '^(%d+)|(%d+)|([^|]*)|([^|]*)$')
    if day == ARGV[14] then redis.call('DECRBY', KEYS[4], tonumber(p) + tonumber(a)) end
    if month == ARGV[15] then redis.call('DECRBY', KEYS[5], tonumber(p) + tonumber(a)) end
    redis.call('HDEL', KEYS[7], rid)
  end
  redis.call('ZREM', KEYS[6], rid)
end

-- GCRA: the new theoretical arrival time, or nil and the ms until the request would fit.
local function gcra(key, cost, limit)
  limit = tonumber(limit)
  if limit < 0 then return now, 0 end
  if limit == 0 then return nil, 60000 end
  local tat = math.max(tonumber(redis.call('GET', key) or '0'), now)
  local new_tat = tat + cost * 60000 / limit
  if new_tat - now > 60000 then return nil, math.min(new_tat - now - 60000, 60000) end
  return new_tat, 0
end

local function refusal(name, wait_ms)
  return {0, name, tostring(math.max(1, math.ceil(wait_ms / 1000)))}
end

local rpm, wait = gcra(KEYS[1], 1, ARGV[6])
if not rpm then return refusal('requests_per_minute', wait) end
local itpm, wait_in = gcra(KEYS[2], prompt, ARGV[7])
if not itpm then return refusal('input_tokens_per_minute', wait_in) end
local otpm, wait_out = gcra(KEYS[3], allowance, ARGV[8])
if not otpm then return refusal('output_tokens_per_minute', wait_out) end

local function over(key, add, limit)
  limit = tonumber(limit)
  if limit < 0 then return false end
  return tonumber(redis.call('GET', key) or '0') + add > limit
end
if over(KEYS[4], prompt + allowance, ARGV[9]) then
  return {0, 'tokens_per_day', ARGV[12]}
end
if over(KEYS[5], prompt + allowance, ARGV[10]) then
  return {0, 'tokens_per_month', ARGV[13]}
end
local concurrency = tonumber(ARGV[11])
if concurrency >= 0 and redis.call('ZCARD', KEYS[6]) >= concurrency then
  return {0, 'max_concurrent_requests', '1'}
end

-- A limiter's state outlives its theoretical arrival time by the minute it looks back on.
local function store(key, tat, limit)
  if tonumber(limit) > 0 then
    redis.call('SET', key, string.format('%.3f', tat), 'PX', math.ceil(tat - now) + 60000)
  end
end
store(KEYS[1], rpm, ARGV[6])
store(KEYS[2], itpm, ARGV[7])
store(KEYS[3], otpm, ARGV[8])
local function charge(key, amount, ttl)
  redis.call('INCRBY', key, amount)
  redis.call('EXPIRE', key, ttl)
end
charge(KEYS[4], prompt + allowance, 2 * 86400)
charge(KEYS[5], prompt + allowance, 32 * 86400)
local ttl = tonumber(ARGV[5])
redis.call('ZADD', KEYS[6], now + ttl, ARGV[2])
redis.call('PEXPIRE', KEYS[6], ttl * 2)
local held = prompt .. '|' .. allowance .. '|' .. ARGV[14] .. '|' .. ARGV[15]
redis.call('HSET', KEYS[7], ARGV[2], held)
redis.call('PEXPIRE', KEYS[7], ttl * 2)
return {1, '', '0'}
"""

SETTLE = """
-- KEYS: as ADMIT.
-- ARGV: 1 request id  2 actual prompt tokens  3 actual output tokens  4 input tpm limit
--       5 output tpm limit (-1 = none)  6 clock ms (0: Redis TIME)
-- Returns 1 when it settled a held reservation, 2 when it charged a request that held none (its
-- reservation expired, or its admission's reply was lost and it may never have been admitted),
-- 0 when the request was settled before (a retry): nothing changes twice.
local now = tonumber(ARGV[6])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
if redis.call('ZSCORE', KEYS[8], ARGV[1]) then return 0 end
local held = redis.call('HGET', KEYS[7], ARGV[1])
local used_in = tonumber(ARGV[2])
local used_out = tonumber(ARGV[3])
local reserved_in, reserved_out = 0, 0
if held then
  local p, a = string.match(held, '^(%d+)|(%d+)|')
  reserved_in, reserved_out = tonumber(p), tonumber(a)
  redis.call('HDEL', KEYS[7], ARGV[1])
end
redis.call('ZREM', KEYS[6], ARGV[1])
local d_in = used_in - reserved_in
local d_out = used_out - reserved_out

-- A limiter moves by the difference: what was reserved and not used is capacity again now.
local function shift(key, delta, limit)
  limit = tonumber(limit)
  if delta == 0 or limit <= 0 then return end
  local tat = tonumber(redis.call('GET', key) or '0')
  if delta > 0 then tat = math.max(tat, now) end
  local new_tat = tat + delta * 60000 / limit
  if new_tat > now then
    redis.call('SET', key, string.format('%.3f', new_tat), 'PX', math.ceil(new_tat - now) + 60000)
  else
    redis.call('DEL', key)
  end
end
shift(KEYS[2], d_in, ARGV[4])
shift(KEYS[3], d_out, ARGV[5])

-- Calendar windows: adjust a reservation's windows while they exist (an expired one has nothing
-- left to correct); a request that held nothing is charged in full.
local function adjust(key, delta, ttl)
  if delta == 0 then return end
  if held then
    if redis.call('EXISTS', key) == 1 then redis.call('INCRBY', key, delta) end
  else
    redis.call('INCRBY', key, delta)
    redis.call('EXPIRE', key, ttl)
  end
end
adjust(KEYS[4], d_in + d_out, 2 * 86400)
adjust(KEYS[5], d_in + d_out, 32 * 86400)

-- Settled ids are remembered for 15 minutes, longer than any retry.
redis.call('ZADD', KEYS[8], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[8], '-inf', now - 900000)
redis.call('PEXPIRE', KEYS[8], 1800000)
if held then return 1 end
return 2
"""


@dataclass(frozen=True)
class Refusal:
    limit: str
    retry_after_s: int


@dataclass(frozen=True)
class Reservation:
    """What admission reserves (see `Budgets.reservation`), and how to settle it."""

    request_id: str
    keys: tuple[str, ...]
    prompt_tokens: int
    output_allowance: int
    # The per-minute token limits the reservation was made under: settling moves their limiters.
    input_tokens_per_minute: int = -1
    output_tokens_per_minute: int = -1
    clock_ms: int = 0  # a test's clock; 0 is Redis's own


def _limit(value: int | None) -> int:
    return -1 if value is None else value


def _keys(tenant_id: str, now: dt.datetime) -> tuple[tuple[str, ...], str, str]:
    return _keys_of_day(tenant_id, now.astimezone(dt.UTC).date())


# Every request names its tenant's keys and the calendar around now: formatted once per tenant
# and day, and once per second, not per request.
@functools.lru_cache(maxsize=4096)
def _keys_of_day(tenant_id: str, day: dt.date) -> tuple[tuple[str, ...], str, str]:
    now = dt.datetime.combine(day, dt.time(), dt.UTC)
    prefix = budget_keys.tenant_prefix(tenant_id)
    keys = (
        *(budget_keys.limiter_key(tenant_id, name) for name in budget_keys.PER_MINUTE),
        budget_keys.day_key(tenant_id, now),
        budget_keys.month_key(tenant_id, now),
        f"{prefix}:inflight",
        f"{prefix}:reservations",
        f"{prefix}:settled",
    )
    return keys, now.strftime("%Y%m%d"), now.strftime("%Y%m")


@functools.lru_cache(maxsize=4)
def _calendar(second: int) -> tuple[int, int, str, str]:
    """For a Unix second: the seconds to the next UTC day and month, the day and the month."""
    now = dt.datetime.fromtimestamp(second, dt.UTC)
    return *_seconds_to_next(now), now.strftime("%Y%m%d"), now.strftime("%Y%m")


def _seconds_to_next(now: dt.datetime) -> tuple[int, int]:
    next_day = (now + dt.timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    first = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    next_month = (first + dt.timedelta(days=32)).replace(day=1)
    return (
        max(1, math.ceil((next_day - now).total_seconds())),
        max(1, math.ceil((next_month - now).total_seconds())),
    )


class Budgets:
    def __init__(self, wire: RedisWire) -> None:
        self._wire = wire

    def reservation(
        self,
        *,
        tenant_id: str,
        budget: Budget,
        request_id: str,
        prompt_tokens: int,
        output_allowance: int,
        now: dt.datetime | None = None,
    ) -> Reservation:
        """What admitting the request reserves, before it is admitted. Settling it is right
        whether or not the admission ran: when an admission's reply is lost (a timeout after
        Redis ran the script), the request settles it anyway, with what it used (nothing, when
        it is refused). `now` is for tests: by default the limiters read Redis's clock."""
        keys, _, _ = _keys(tenant_id, now or dt.datetime.now(dt.UTC))
        return Reservation(
            request_id,
            keys,
            prompt_tokens,
            output_allowance,
            input_tokens_per_minute=_limit(budget.input_tokens_per_minute),
            output_tokens_per_minute=_limit(budget.output_tokens_per_minute),
            clock_ms=int(now.timestamp() * 1000) if now is not None else 0,
        )

    async def admit(
        self, reservation: Reservation, *, budget: Budget, deadline_s: float
    ) -> Reservation | Refusal:
        """Makes the reservation, or says which limit refuses it and when to retry."""
        clock = reservation.clock_ms
        if clock:
            day_at = dt.datetime.fromtimestamp(clock / 1000, dt.UTC)
            to_day, to_month = _seconds_to_next(day_at)
            day, month = day_at.strftime("%Y%m%d"), day_at.strftime("%Y%m")
        else:
            to_day, to_month, day, month = _calendar(int(time.time()))
        args: list[Arg] = [
            clock,
            reservation.request_id,
            reservation.prompt_tokens,
            reservation.output_allowance,
            int(deadline_s * 1000),
            _limit(budget.requests_per_minute),
            _limit(budget.input_tokens_per_minute),
            _limit(budget.output_tokens_per_minute),
            _limit(budget.tokens_per_day),
            _limit(budget.tokens_per_month),
            _limit(budget.max_concurrent_requests),
            to_day,
            to_month,
            day,
            month,
        ]
        admitted, limit, retry_after = await self._wire.run_script(
            ADMIT, list(reservation.keys), args
        )
        if int(admitted) == 1:
            return reservation
        name = limit.decode() if isinstance(limit, bytes) else str(limit)
        return Refusal(limit=name, retry_after_s=int(retry_after))

    async def settle(
        self, reservation: Reservation, *, prompt_tokens: int, output_tokens: int
    ) -> int:
        """Charges what was used instead of what was reserved and frees the concurrency slot;
        safe to repeat. Returns the SETTLE script's answer (1 settled, 2 charged without a
        reservation, 0 settled before)."""
        keys, args = settle_args(reservation, prompt_tokens, output_tokens)
        return int(await self._wire.run_script(SETTLE, keys, args))


def settle_args(
    reservation: Reservation, prompt_tokens: int, output_tokens: int
) -> tuple[list[str], list[Arg]]:
    """The keys and arguments of the SETTLE script for one reservation."""
    return list(reservation.keys), [
        reservation.request_id,
        prompt_tokens,
        output_tokens,
        reservation.input_tokens_per_minute,
        reservation.output_tokens_per_minute,
        reservation.clock_ms,
    ]
