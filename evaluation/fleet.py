"""What Prometheus says about the replicas behind each arm: the tokens they serve (for the
observed cost) and the fleet signals shown beside a verdict (KV-cache usage, waiting queue,
preemptions). Prometheus being away is an expected state, reported as None, never an error."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from rollouts.engine_gauges import UNAVAILABLE, instance, prometheus
from rollouts.models import Deployment

logger = logging.getLogger(__name__)

# Prompt and output tokens, read apart and added here: an engine that has not yet counted one
# of them has no series for it, and PromQL's `+` would then drop the instance altogether.
TOKENS_PER_S = (
    "sum by (instance) (rate(vllm:prompt_tokens_total[5m]))",
    "sum by (instance) (rate(vllm:generation_tokens_total[5m]))",
)
SIGNALS = {
    "kv_cache_usage": "max(vllm:kv_cache_usage_perc{{instance=~{instances}}})",
    "waiting_requests": "sum(vllm:num_requests_waiting{{instance=~{instances}}})",
    "preemptions_per_min": (
        "sum(rate(vllm:num_preemptions_total{{instance=~{instances}}}[1m])) * 60"
    ),
}


def deployment_instances(deployment: Deployment) -> set[str]:
    """The Prometheus `instance` labels of the deployment's active replicas (by address: a LoRA
    adapter's engine reports under its base model's name)."""
    return {instance(r.base_url) for r in deployment.fleet.replicas.all() if r.state == "active"}


def tokens_per_s_by_instance() -> dict[str, float] | None:
    """Prompt + output tokens per second each replica served over the last 5 minutes."""
    client = prometheus()
    rates: dict[str, float] = {}
    try:
        for query in TOKENS_PER_S:
            for r in client.custom_query(query):
                name = r["metric"].get("instance", "")
                rates[name] = rates.get(name, 0.0) + float(r["value"][1])
    except UNAVAILABLE as exc:
        logger.warning("observed throughput not read, Prometheus did not answer: %s", exc)
        return None
    return rates


@dataclass(frozen=True)
class FleetSignals:
    available: bool
    # name -> [(unix time, value)] over the window, per signal in SIGNALS.
    series: dict[str, list[tuple[float, float]]]

    def latest(self, name: str) -> float | None:
        points = self.series.get(name) or []
        return points[-1][1] if points else None


def fleet_signals(
    instances: Iterable[str], start: dt.datetime, end: dt.datetime, *, points: int = 60
) -> FleetSignals:
    """The signals over [start, end] for these replicas; unavailable when Prometheus is away."""
    names = sorted(instances)
    if not names:
        return FleetSignals(available=False, series={})
    pattern = '"' + "|".join(n.replace(".", "\\\\.") for n in names) + '"'
    step = max(1, int((end - start).total_seconds() / points))
    series: dict[str, list[tuple[float, float]]] = {}
    client = prometheus(timeout=2)
    try:
        for name, template in SIGNALS.items():
            result = client.custom_query_range(
                template.format(instances=pattern), start_time=start, end_time=end, step=str(step)
            )
            series[name] = [
                (float(t), float(v)) for t, v in (result[0]["values"] if result else [])
            ]
    except UNAVAILABLE as exc:
        logger.warning("fleet signals not read, Prometheus did not answer: %s", exc)
        return FleetSignals(available=False, series={})
    return FleetSignals(available=True, series=series)
