"""Which arm serves a request, and which replica of that arm's deployment.

Arm assignment is a pure function of (route, rollout salt, session key): the same session always
lands on the same arm, on every gateway process and host. A session's position in [0, 100) is
fixed; the canary serves the positions below its weight, so as the weight grows the canary's
sessions stay on it and new ones join (monotone), and a new rollout (new salt) draws new cohorts.

A route's rules come first: a request one of them matches goes to the rule's deployment under the
arm "rule:<name>", and takes no part in the split. The judge compares baseline and canary samples
only, so a rule's requests (long prompts, a batch tier, a pinned tenant) never skew either arm,
and the canary's share of the remaining traffic stays the weight the plan asked for.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass, field

from gateway.snapshot import Arm, Deployment, Replica, Route, Tenant

# A system prompt at least this long is worth keeping on one replica (its KV prefix cache).
PREFIX_AFFINITY_MIN_CHARS = 512
# The preferred replica keeps its prefix traffic until it carries this much more than the least
# loaded one; beyond that, spreading load matters more than the cache hit.
AFFINITY_OVERLOAD_FACTOR = 1.5
AFFINITY_SLACK_TOKENS = 4096


def session_position(route: Route, session_key: str) -> float:
    digest = hashlib.sha256(f"{route.name}\0{route.salt}\0{session_key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 * 100.0


def match_rule(route: Route, tenant: Tenant, prompt_tokens: int) -> Arm | None:
    """The arm of the first rule the request matches, or None to split it. On the hot path: the
    rules were compiled into sets and a ready-made arm when the snapshot was loaded."""
    for rule in route.rules:
        if rule.tenant_ids and tenant.id not in rule.tenant_ids:
            continue
        if rule.tiers and tenant.tier not in rule.tiers:
            continue
        if rule.min_prompt_tokens is not None and prompt_tokens < rule.min_prompt_tokens:
            continue
        if rule.max_prompt_tokens is not None and prompt_tokens > rule.max_prompt_tokens:
            continue
        return rule.arm
    return None


def choose_arm(route: Route, session_key: str) -> Arm:
    """The canary serves the positions below its share, a control (when there is one) the next
    slice of the same size, the baseline the rest."""
    if len(route.arms) == 1:
        return route.arms[0]
    arms = {arm.name: arm for arm in route.arms}
    baseline = arms.get("baseline", route.arms[0])
    total = sum(arm.weight for arm in route.arms)
    position = session_position(route, session_key) / 100.0 * total
    for name in ("canary", "control"):
        arm = arms.get(name)
        if arm is not None:
            if position < arm.weight:
                return arm
            position -= arm.weight
    return baseline


@dataclass
class ReplicaLoad:
    """Tokens this gateway process has in flight to each replica (prompt + output allowance)."""

    outstanding: defaultdict[str, int] = field(default_factory=lambda: defaultdict(int))

    def add(self, replica_id: str, tokens: int) -> None:
        self.outstanding[replica_id] += tokens

    def remove(self, replica_id: str, tokens: int) -> None:
        self.outstanding[replica_id] = max(0, self.outstanding[replica_id] - tokens)

    def in_flight(self, deployment: Deployment) -> int:
        return sum(self.outstanding[r.id] for r in deployment.replicas)


def _rendezvous(prefix: str, replicas: list[Replica]) -> Replica:
    """The replica a prefix belongs to; stable when other replicas come and go."""
    return max(replicas, key=lambda r: hashlib.sha256(f"{r.id}\0{prefix}".encode()).digest())


def choose_replica(
    deployment: Deployment,
    load: ReplicaLoad,
    *,
    prefix: str | None,
    exclude: frozenset[str] = frozenset(),
) -> Replica | None:
    """A healthy replica: the prefix's own while it is not overloaded, else the least loaded."""
    candidates = [r for r in deployment.replicas if r.healthy and r.id not in exclude]
    if not candidates:
        return None
    least = min(candidates, key=lambda r: load.outstanding[r.id])
    if prefix is None or len(prefix) < PREFIX_AFFINITY_MIN_CHARS:
        return least
    preferred = _rendezvous(prefix, candidates)
    limit = load.outstanding[least.id] * AFFINITY_OVERLOAD_FACTOR + AFFINITY_SLACK_TOKENS
    return preferred if load.outstanding[preferred.id] <= limit else least
