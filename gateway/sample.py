"""The record the gateway leaves of every finished request, one per entry on the samples stream.

Its own module, with no metrics: the control plane's stream consumers parse records with it, and
importing gateway.measure would register the gateway's Prometheus metrics in their processes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sample:
    """One finished request, as appended to the samples stream (short keys keep it compact)."""

    ts: float  # unix time at arrival
    rid: str
    route: str
    arm: str
    dep: str
    rollout: str | None
    tenant: str
    key: str  # the API key's id, for its last-used time
    replica: str
    status: int
    finish: str | None  # stop, length, tool_calls, abort (client left), error
    pt: int  # prompt tokens (from the upstream's usage)
    ot: int  # output tokens
    ttft_ms: float | None
    tpot_ms: float | None
    e2e_ms: float
    tool: str | None  # None (no tools), no_call, valid, invalid_json, invalid_schema, unchecked
    conc: int  # requests this gateway process had in flight to the deployment at start
    stream: bool
    cost: float  # dollars, from the deployment's unit cost
    # Why the gateway refused the request before it reached a replica (finish "rejected"): the
    # budget limit that fired, "shed" or "budget_store"; None for requests that were served.
    reason: str | None = None
    # The gateway's estimate of the prompt's tokens from what the client sent, made before an arm
    # was chosen (gateway.requests.estimate_prompt_tokens): unlike pt, which each arm's model
    # counts its own way, the same whatever arm serves the request, so the judge may adjust for it.
    pe: int = 0
