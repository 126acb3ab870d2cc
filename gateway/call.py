"""One request on its way through the gateway, and the record it leaves when it ends.

`GatewayApp` (gateway/app.py) plans a `Call` from what the client sent and the snapshot, then
admits, proxies and measures it; what it settles and what it writes on the samples stream are
built here from the call and what came back (gateway.proxy.Progress).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from gateway.budgets import Reservation
from gateway.ledger import Settlement
from gateway.proxy import Progress
from gateway.sample import Sample
from gateway.snapshot import Arm, Deployment, Route, Tenant


@dataclass
class Call:
    request_id: str
    arrival: float
    started: float
    chat: bool
    payload: dict[str, Any]
    tenant: Tenant
    route: Route
    arm: Arm
    deployment: Deployment
    key_id: str
    prompt_estimate: int  # the deployment's count, or a rough one (gateway.requests)
    prompt_reserved: int  # never below the real count (gateway.tokens)
    prompt_size: int  # the estimate made before an arm was chosen (Sample.pe)
    allowance: int
    client_streams: bool
    client_wants_usage: bool
    concurrency: int
    send_max_tokens: bool = True  # False: the replica fills in what its context leaves
    replica_id: str = ""
    reservation: Reservation | None = None

    def rejection(self, status: int, reason: str) -> Sample:
        """The record of a request refused before it reached a replica."""
        return Sample(
            ts=self.arrival,
            rid=self.request_id,
            route=self.route.name,
            arm=self.arm.name,
            dep=self.deployment.id,
            rollout=self.route.rollout_id,
            tenant=self.tenant.slug,
            key=self.key_id,
            replica="",
            status=status,
            finish="rejected",
            pt=self.prompt_estimate,
            ot=0,
            ttft_ms=None,
            tpot_ms=None,
            e2e_ms=_ms(time.monotonic() - self.started),
            tool=None,
            conc=self.concurrency,
            stream=self.client_streams,
            cost=0.0,
            reason=reason,
            pe=self.prompt_size,
        )

    def outcome(self, progress: Progress, tool: str | None) -> tuple[Settlement | None, Sample]:
        """What a request that was admitted settles (the replica's usage, or what it produced)
        and its record."""
        usage = progress.usage or {}
        client_left = progress.client_left
        reached = bool(self.replica_id) and progress.status not in (0, 502)
        prompt_tokens = int(usage.get("prompt_tokens") or (self.prompt_estimate if reached else 0))
        output_tokens = int(usage.get("completion_tokens") or progress.token_events)
        settlement = None
        if self.reservation is not None:
            settlement = Settlement(self.reservation, prompt_tokens, output_tokens)
        first, last = progress.first_token_at, progress.last_token_at
        ttft = first - self.started if first else None
        tpot = None
        if first and last and progress.token_events > 1:
            tpot = (last - first) / (progress.token_events - 1)
        sample = Sample(
            ts=self.arrival,
            rid=progress.response_id or self.request_id,
            route=self.route.name,
            arm=self.arm.name,
            dep=self.deployment.id,
            rollout=self.route.rollout_id,
            tenant=self.tenant.slug,
            key=self.key_id,
            replica=self.replica_id,
            status=499 if client_left else (progress.status or 502),
            finish="abort" if client_left else progress.finish_reason,
            pt=prompt_tokens,
            ot=output_tokens,
            ttft_ms=_ms(ttft) if ttft is not None else None,
            tpot_ms=_ms(tpot) if tpot is not None else None,
            e2e_ms=_ms(time.monotonic() - self.started),
            tool=tool,
            conc=self.concurrency,
            stream=self.client_streams,
            cost=(prompt_tokens + output_tokens) * self.deployment.cost_per_million_tokens / 1e6,
            pe=self.prompt_size,
        )
        return settlement, sample


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)
