"""One Redis connection pool per process, with timeouts so a dead Redis fails fast."""

from __future__ import annotations

from functools import cache

import redis
from django.conf import settings


@cache
def get_redis() -> redis.Redis:
    return redis.Redis.from_url(
        settings.REDIS_URL,
        socket_connect_timeout=1.0,
        socket_timeout=2.0,
        health_check_interval=30,
        decode_responses=True,
    )
