"""What each replica's engine says about itself, from Prometheus: vLLM's own gauges and counters
(KV-cache usage, requests running and waiting, preemptions), read by the replica's address (an
adapter's requests are reported under its base model's name). Shown on the fleet page; the
shedding thresholds read the same gauges (`services.saturation`).

Prometheus being away is an expected state: the readings are then None, never an error.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from requests import RequestException
from urllib3.util.retry import Retry

logger = logging.getLogger(__name__)
UNAVAILABLE = (PrometheusApiClientException, RequestException, ValueError, KeyError)

# The metric names of vLLM 0.32's /metrics (the real server's scrape, not a simulator's).
QUERIES = {
    "kv_cache_usage": "max by (instance) (vllm:kv_cache_usage_perc)",
    "running": "sum by (instance) (vllm:num_requests_running)",
    "waiting": "sum by (instance) (vllm:num_requests_waiting)",
    "preemptions_per_min": "sum by (instance) (rate(vllm:num_preemptions_total[1m])) * 60",
}


@dataclass(frozen=True)
class Gauges:
    kv_cache_usage: float | None = None  # 0..1
    running: float | None = None
    waiting: float | None = None
    preemptions_per_min: float | None = None


def instance(base_url: str) -> str:
    """The `instance` label Prometheus gives a replica it scrapes at this address."""
    parts = urlsplit(base_url)
    return f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"


def prometheus(timeout: float = 3) -> PrometheusConnect:
    return PrometheusConnect(
        url=settings.PROMETHEUS_URL, disable_ssl=True, retry=Retry(total=0), timeout=timeout
    )


def replica_gauges(base_urls: Iterable[str]) -> dict[str, Gauges] | None:
    """The latest readings by replica address (those Prometheus has no series for are absent);
    None when Prometheus did not answer."""
    wanted = {instance(url): url for url in base_urls}
    if not wanted:
        return {}
    readings: dict[str, dict[str, float]] = {}
    client = prometheus(timeout=2)
    try:
        for name, query in QUERIES.items():
            for row in client.custom_query(query):
                url = wanted.get(row["metric"].get("instance", ""))
                if url is not None:
                    readings.setdefault(url, {})[name] = float(row["value"][1])
    except UNAVAILABLE as exc:
        logger.warning("engine gauges not read, Prometheus did not answer: %s", exc)
        return None
    return {url: Gauges(**values) for url, values in readings.items()}
