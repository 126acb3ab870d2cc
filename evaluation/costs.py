"""What a deployment's tokens cost to serve.

unit cost ($ per million tokens) = $/GPU-hour * GPUs per replica
                                   / (tokens/s per replica * utilisation * 3600) * 10^6

The price and GPU count are the fleet's. The throughput is entered on the deployment's
`DeploymentCost` (a benchmark's sustained tokens/s per replica, with the utilisation to plan
for), or else observed: the tokens per second a replica actually served, from vLLM's counters in
Prometheus, which already include the utilisation. An entered figure wins, because an observed
one on a lightly loaded canary would charge the candidate for idle GPUs that the baseline's busy
replicas do not have. For that reason the judge compares costs only when both deployments'
throughputs were entered (evaluation.selectors.Window.costs_comparable); observed costs are still
recorded, charged to tenants' usage and shown. Unknown throughput or an unpriced fleet gives 0
("not known"), never a guess.

The gateway multiplies the unit cost into each request record as (prompt + output tokens) * unit
cost / 10^6, so throughput here counts prompt and output tokens alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from rollouts.models import Deployment

SECONDS_PER_HOUR = 3600


@dataclass(frozen=True)
class UnitCost:
    dollars_per_million_tokens: float
    # Where the throughput came from: "entered", "observed" or "unknown".
    source: str
    tokens_per_s: float | None
    utilisation: float | None


def unit_cost_per_million(
    *, dollars_per_gpu_hour: float, gpus: int, tokens_per_s: float, utilisation: float
) -> float:
    served = tokens_per_s * utilisation * SECONDS_PER_HOUR  # tokens per replica-hour
    if served <= 0 or dollars_per_gpu_hour <= 0 or gpus <= 0:
        return 0.0
    return dollars_per_gpu_hour * gpus / served * 1e6


def deployment_unit_cost(deployment: Deployment) -> UnitCost:
    """Needs `fleet` and the reverse `cost` loaded (select_related) to stay one query."""
    fleet = deployment.fleet
    price, gpus = float(fleet.dollars_per_gpu_hour), fleet.gpus_per_replica
    cost = getattr(deployment, "cost", None)
    if cost is not None and cost.throughput_tokens_per_s:
        tokens_per_s, utilisation, source = (
            cost.throughput_tokens_per_s,
            cost.utilisation,
            "entered",
        )
    elif cost is not None and cost.observed_tokens_per_s:
        tokens_per_s, utilisation, source = cost.observed_tokens_per_s, 1.0, "observed"
    else:
        return UnitCost(0.0, "unknown", None, None)
    dollars = unit_cost_per_million(
        dollars_per_gpu_hour=price, gpus=gpus, tokens_per_s=tokens_per_s, utilisation=utilisation
    )
    return UnitCost(dollars, source if dollars else "unknown", tokens_per_s, utilisation)
