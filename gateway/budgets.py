"""Tenant budgets, enforced atomically in Redis: one Lua script admits, another settles.

Admission checks every limit against what is already *reserved*, not what was already used, and
reserves the request's prompt tokens plus its whole output allowance in the same atomic step; the
end of the request gives back what was not used. So no number of concurrent requests, gateway
processes or hosts can together exceed a limit: they all go through the same script on the same
keys. A reservation that is never settled (a gateway died mid-request) expires after its deadline
and is refunded by the next admission of that tenant.

Windows are fixed (per minute, UTC day, UTC month). Every key of a tenant carries the tenant in a
hash tag, so a tenant's keys share one Redis Cluster slot and one script can touch them all.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass

from gateway.snapshot import Budget
from gateway.wire import Arg, RedisWire

ADMIT = """
-- KEYS: 1 requests/min  2 input tokens/min  3 output tokens/min  4 tokens/day  5 tokens/month
--       6 in-flight zset (member: request id, score: expiry ms)  7 reservations hash
-- ARGV: 1 now ms  2 request id  3 prompt tokens  4 output allowance  5 reservation ttl ms
--       6..11 limits (rpm, input tpm, output tpm, day, month, concurrency; -1 = none)
--       12 seconds to next minute  13 to next day  14 to next month  15 day key  16 month key
local now = tonumber(ARGV[1])
local prompt = tonumber(ARGV[3])
local allowance = tonumber(ARGV[4])

-- Refund reservations whose gateway never settled them (crashed), a few per call.
local stale = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now, 'LIMIT', 0, 20)
for _, rid in ipairs(stale) do
  local held = redis.call('HGET', KEYS[7], rid)
  if held then
    local p, a, day, month = string.match(held, '^(%d+)|(%d+)|([^|]*)|([^|]*)$')
    if day == ARGV[15] then redis.call('DECRBY', KEYS[4], tonumber(p) + tonumber(a)) end
    if month == ARGV[16] then redis.call('DECRBY', KEYS[5], tonumber(p) + tonumber(a)) end
    redis.call('HDEL', KEYS[7], rid)
  end
  redis.call('ZREM', KEYS[6], rid)
end

local function over(key, add, limit)
  limit = tonumber(limit)
  if limit < 0 then return false end
  return tonumber(redis.call('GET', key) or '0') + add > limit
end

if over(KEYS[1], 1, ARGV[6]) then return {0, 'requests_per_minute', ARGV[12]} end
if over(KEYS[2], prompt, ARGV[7]) then return {0, 'input_tokens_per_minute', ARGV[12]} end
if over(KEYS[3], allowance, ARGV[8]) then return {0, 'output_tokens_per_minute', ARGV[12]} end
if over(KEYS[4], prompt + allowance, ARGV[9]) then return {0, 'tokens_per_day', ARGV[13]} end
if over(KEYS[5], prompt + allowance, ARGV[10]) then return {0, 'tokens_per_month', ARGV[14]} end
local concurrency = tonumber(ARGV[11])
if concurrency >= 0 and redis.call('ZCARD', KEYS[6]) >= concurrency then
  return {0, 'max_concurrent_requests', '1'}
end

local function charge(key, amount, ttl)
  redis.call('INCRBY', key, amount)
  redis.call('EXPIRE', key, ttl)
end
charge(KEYS[1], 1, 120)
charge(KEYS[2], prompt, 120)
charge(KEYS[3], allowance, 120)
charge(KEYS[4], prompt + allowance, 2 * 86400)
charge(KEYS[5], prompt + allowance, 32 * 86400)
local ttl = tonumber(ARGV[5])
redis.call('ZADD', KEYS[6], now + ttl, ARGV[2])
redis.call('PEXPIRE', KEYS[6], ttl * 2)
local held = prompt .. '|' .. allowance .. '|' .. ARGV[15] .. '|' .. ARGV[16]
redis.call('HSET', KEYS[7], ARGV[2], held)
redis.call('PEXPIRE', KEYS[7], ttl * 2)
return {1, '', '0'}
"""

SETTLE = """
-- KEYS: as ADMIT, with the minute windows of the admission.
-- ARGV: 1 request id  2 actual prompt tokens  3 actual output tokens
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
-- Adjust only windows that still exist: an expired window has nothing left to correct.
local function adjust(key, delta)
  if delta ~= 0 and redis.call('EXISTS', key) == 1 then redis.call('INCRBY', key, delta) end
end
adjust(KEYS[2], d_in)
adjust(KEYS[3], d_out)
adjust(KEYS[4], d_in + d_out)
adjust(KEYS[5], d_in + d_out)
if held then return 1 end
return 0
"""


@dataclass(frozen=True)
class Refusal:
    limit: str
    retry_after_s: int


@dataclass(frozen=True)
class Reservation:
    """What admission reserved, and the keys to settle it against."""

    request_id: str
    keys: tuple[str, ...]
    prompt_tokens: int
    output_allowance: int


def _limit(value: int | None) -> int:
    return -1 if value is None else value


def _keys(tenant_id: str, now: dt.datetime) -> tuple[tuple[str, ...], str, str]:
    minute = int(now.timestamp() // 60)
    day = now.strftime("%Y%m%d")
    month = now.strftime("%Y%m")
    prefix = f"tollgate:budget:{{{tenant_id}}}"
    keys = (
        f"{prefix}:rpm:{minute}",
        f"{prefix}:itpm:{minute}",
        f"{prefix}:otpm:{minute}",
        f"{prefix}:day:{day}",
        f"{prefix}:month:{month}",
        f"{prefix}:inflight",
        f"{prefix}:reservations",
    )
    return keys, day, month


def _seconds_to_next(now: dt.datetime) -> tuple[int, int, int]:
    minute = 60 - now.second
    next_day = (now + dt.timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    first = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    next_month = (first + dt.timedelta(days=32)).replace(day=1)
    return (
        max(1, minute),
        max(1, math.ceil((next_day - now).total_seconds())),
        max(1, math.ceil((next_month - now).total_seconds())),
    )


class Budgets:
    def __init__(self, wire: RedisWire) -> None:
        self._wire = wire

    async def admit(
        self,
        *,
        tenant_id: str,
        budget: Budget,
        request_id: str,
        prompt_tokens: int,
        output_allowance: int,
        deadline_s: float,
        now: dt.datetime | None = None,
    ) -> Reservation | Refusal:
        now = now or dt.datetime.now(dt.UTC)
        keys, day, month = _keys(tenant_id, now)
        to_minute, to_day, to_month = _seconds_to_next(now)
        args: list[Arg] = [
            int(now.timestamp() * 1000),
            request_id,
            prompt_tokens,
            output_allowance,
            int(deadline_s * 1000),
            _limit(budget.requests_per_minute),
            _limit(budget.input_tokens_per_minute),
            _limit(budget.output_tokens_per_minute),
            _limit(budget.tokens_per_day),
            _limit(budget.tokens_per_month),
            _limit(budget.max_concurrent_requests),
            to_minute,
            to_day,
            to_month,
            day,
            month,
        ]
        admitted, limit, retry_after = await self._wire.run_script(ADMIT, list(keys), args)
        if int(admitted) == 1:
            return Reservation(request_id, keys, prompt_tokens, output_allowance)
        name = limit.decode() if isinstance(limit, bytes) else str(limit)
        return Refusal(limit=name, retry_after_s=int(retry_after))

    async def settle(
        self, reservation: Reservation, *, prompt_tokens: int, output_tokens: int
    ) -> None:
        """Charges what was used instead of what was reserved, and frees the concurrency slot."""
        keys, args = settle_args(reservation, prompt_tokens, output_tokens)
        await self._wire.run_script(SETTLE, keys, args)


def settle_args(
    reservation: Reservation, prompt_tokens: int, output_tokens: int
) -> tuple[list[str], list[Arg]]:
    """The keys and arguments of the SETTLE script for one reservation."""
    return list(reservation.keys), [reservation.request_id, prompt_tokens, output_tokens]
