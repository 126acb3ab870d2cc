"""How full each deployment is, from Prometheus: the gateway sheds lower tiers above its limits.

Reads vLLM's own gauges (`vllm:kv_cache_usage_perc`, `vllm:num_requests_waiting`) for the
replicas of every deployment in a route, through prometheus-api-client, and stores the worst
KV-cache usage and the total waiting queue on the deployment. The gateway configuration is
republished when a figure moved enough to matter.
"""

from __future__ import annotations

import logging

from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from requests import RequestException

from core.publication import gateway_snapshot_changed
from rollouts.engine_gauges import instance, prometheus
from rollouts.models import Deployment

logger = logging.getLogger(__name__)
# Changes smaller than these are noise, not worth a new gateway configuration.
KV_STEP = 0.02
WAITING_STEP = 2


def _by_instance(prometheus: PrometheusConnect, query: str) -> dict[tuple[str, str], float]:
    return {
        (r["metric"].get("instance", ""), r["metric"].get("model_name", "")): float(r["value"][1])
        for r in prometheus.custom_query(query)
    }


def deployments_saturation_update() -> int:
    """Returns how many deployments changed enough to be republished."""
    client = prometheus(timeout=5)
    try:
        kv = _by_instance(client, "max by (instance, model_name) (vllm:kv_cache_usage_perc)")
        waiting = _by_instance(client, "sum by (instance, model_name) (vllm:num_requests_waiting)")
    except (PrometheusApiClientException, RequestException) as exc:
        logger.warning("saturation not updated, Prometheus did not answer: %s", exc)
        return 0
    changed = 0
    # Every deployment in use sheds the same way: rule targets and control copies take traffic too.
    for deployment in Deployment.objects.in_use().prefetch_related("fleet__replicas"):
        # The engine behind a LoRA adapter reports under its base model's name: match by replica.
        instances = {instance(r.base_url) for r in deployment.fleet.replicas.all()}
        kv_values = [v for (i, _), v in kv.items() if i in instances]
        waiting_values = [v for (i, _), v in waiting.items() if i in instances]
        usage = max(kv_values, default=0.0)
        queue = int(sum(waiting_values))
        if (
            abs(usage - deployment.kv_cache_usage) >= KV_STEP
            or abs(queue - deployment.waiting_requests) >= WAITING_STEP
        ):
            Deployment.objects.filter(pk=deployment.pk).update(
                kv_cache_usage=usage, waiting_requests=queue
            )
            changed += 1
    if changed:
        gateway_snapshot_changed()
    return changed
