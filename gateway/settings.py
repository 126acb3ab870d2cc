"""The gateway's settings, from environment variables only (no Django here)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit


class SettingsError(Exception):
    """A variable is wrong; the message names it and the form it expects."""


def _float(name: str, default: float) -> float:
    raw = os.environ.get(name) or str(default)
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name}: expected a number of seconds, got {raw!r}") from None
    if value <= 0:
        raise SettingsError(f"{name}: expected a positive number of seconds, got {raw!r}")
    return value


def _int(name: str, default: int, low: int, high: int) -> int:
    raw = os.environ.get(name) or str(default)
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise SettingsError(f"{name}: expected an integer from {low} to {high}, got {raw!r}")
    return int(raw)


@dataclass(frozen=True)
class Settings:
    redis_url: str
    host: str
    port: int
    metrics_host: str
    metrics_port: int
    workers: int
    connect_timeout_s: float
    first_token_timeout_s: float
    total_timeout_s: float
    drain_timeout_s: float
    snapshot_poll_s: float
    max_body_bytes: int
    body_timeout_s: float
    header_timeout_s: float
    max_connections: int
    samples_stream: str
    samples_max_len: int

    @classmethod
    def from_env(cls) -> Settings:
        redis_url = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
        if urlsplit(redis_url).scheme not in {"redis", "rediss"}:
            raise SettingsError(f"REDIS_URL: expected redis://HOST[:PORT][/DB], got {redis_url!r}")
        port = _int("GATEWAY_PORT", 8080, 1, 65535)
        metrics_port = _int("GATEWAY_METRICS_PORT", 8081, 1, 65535)
        if metrics_port == port:
            raise SettingsError(
                f"GATEWAY_METRICS_PORT: expected a port other than GATEWAY_PORT, got {metrics_port}"
            )
        return cls(
            redis_url=redis_url,
            host=os.environ.get("GATEWAY_HOST") or "127.0.0.1",
            port=port,
            # The metrics name every tenant: their own listener, local unless said otherwise
            # (gateway.metrics_listener).
            metrics_host=os.environ.get("GATEWAY_METRICS_HOST") or "127.0.0.1",
            metrics_port=metrics_port,
            workers=_int("GATEWAY_WORKERS", 1, 1, 64),
            connect_timeout_s=_float("GATEWAY_CONNECT_TIMEOUT_S", 2.0),
            first_token_timeout_s=_float("GATEWAY_FIRST_TOKEN_TIMEOUT_S", 60.0),
            total_timeout_s=_float("GATEWAY_TOTAL_TIMEOUT_S", 600.0),
            drain_timeout_s=_float("GATEWAY_DRAIN_TIMEOUT_S", 30.0),
            snapshot_poll_s=_float("GATEWAY_SNAPSHOT_POLL_S", 5.0),
            max_body_bytes=_int("GATEWAY_MAX_BODY_BYTES", 4 * 1024 * 1024, 1024, 64 * 1024 * 1024),
            # Slow clients (gateway.server, GatewayApp._read_body): headers and body must arrive
            # within these, and one process holds at most this many sockets.
            body_timeout_s=_float("GATEWAY_BODY_TIMEOUT_S", 30.0),
            header_timeout_s=_float("GATEWAY_HEADER_TIMEOUT_S", 10.0),
            max_connections=_int("GATEWAY_MAX_CONNECTIONS", 10_000, 1, 1_000_000),
            samples_stream=os.environ.get("GATEWAY_SAMPLES_STREAM") or "tollgate:samples",
            samples_max_len=_int("GATEWAY_SAMPLES_MAX_LEN", 1_000_000, 1000, 100_000_000),
        )
