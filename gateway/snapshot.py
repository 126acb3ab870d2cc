"""The gateway's configuration: one versioned snapshot, published by the control plane to Redis.

This module is the single schema both sides use: the control plane validates what it publishes
with it, the gateway validates what it reads with it, and a snapshot that fails validation is
never applied (the gateway keeps serving from the last good one).
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

SNAPSHOT_KEY = "tollgate:gateway:snapshot"
CHANGED_CHANNEL = "tollgate:gateway:snapshot:changed"

NonNegative = Annotated[int, Field(ge=0)]


class Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Budget(Frozen):
    """A tenant's limits; None means unlimited. Token limits count prompt + output tokens."""

    requests_per_minute: NonNegative | None = None
    input_tokens_per_minute: NonNegative | None = None
    output_tokens_per_minute: NonNegative | None = None
    tokens_per_day: NonNegative | None = None
    tokens_per_month: NonNegative | None = None
    max_concurrent_requests: NonNegative | None = None
    max_context_tokens: NonNegative | None = None
    max_output_tokens: NonNegative | None = None
    # Past max_output_tokens: lower the request's max_tokens to the limit, or refuse it.
    over_max_output: Literal["clamp", "reject"] = "clamp"
    # Output allowance reserved when a request names no max_tokens.
    default_output_allowance: Annotated[int, Field(ge=1)] = 1024
    # Past the soft limit (the control plane sets Tenant.over_soft_limit): refuse requests, or
    # send them to a cheaper route.
    soft_limit_action: Literal["reject", "route"] = "reject"
    soft_limit_route: str | None = None


class Tenant(Frozen):
    id: str
    slug: str
    tier: Literal["critical", "standard", "batch"] = "standard"
    fail_mode: Literal["open", "closed"] = "closed"
    budget: Budget = Budget()
    # Set by the control plane while the tenant's day or month usage is past its soft limit.
    over_soft_limit: bool = False


class ApiKey(Frozen):
    id: str
    tenant_id: str
    prefix: str
    # Routes this key may use; empty means every route of its tenant.
    allowed_routes: tuple[str, ...] = ()
    can_force_arm: bool = False
    expires_at: dt.datetime | None = None


class Replica(Frozen):
    id: str
    base_url: str
    healthy: bool = True


class Deployment(Frozen):
    id: str
    # The model name the replicas serve (a base model or a LoRA adapter name).
    served_model_name: str
    # The replicas' context length, when known: caps the output allowance of requests that name
    # no max_tokens.
    max_model_len: Annotated[int, Field(ge=1)] | None = None
    # The served model's tokenizer, as a directory this gateway can read (tokenizer.json and
    # tokenizer_config.json): prompts are then counted exactly (gateway.tokens), not bounded.
    tokenizer_dir: str | None = None
    # Empty when every replica is draining or disabled: requests then get a clear 502.
    replicas: tuple[Replica, ...] = ()
    # Saturation seen by the control plane (from Prometheus): lower tiers are shed above these.
    kv_cache_usage: float = 0.0
    waiting_requests: NonNegative = 0
    max_kv_cache_usage: float = 0.95
    max_waiting_requests: NonNegative = 64
    # The gateway's own in-flight limit per replica before shedding begins.
    max_in_flight_per_replica: Annotated[int, Field(ge=1)] = 256
    # Dollars per million tokens, for the cost in request records (0 when unknown).
    cost_per_million_tokens: float = 0.0


# A route rule's name: its requests are recorded under the arm "rule:<name>".
RuleName = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,39}$")]
RULE_ARM_PREFIX = "rule:"


class Arm(Frozen):
    # A route splits its traffic between baseline and canary (and a control, a second copy of the
    # baseline at the canary's weight, when a rollout has one); "rule:<name>" is the arm of the
    # requests a route rule sent to its own deployment, outside that split.
    name: (
        Literal["baseline", "canary", "control"]
        | Annotated[str, Field(pattern=r"^rule:[a-z0-9_-]+$")]
    )
    deployment_id: str
    weight: Annotated[float, Field(ge=0.0, le=100.0)]


class RouteRule(Frozen):
    """Requests of the route matching every condition given go to `deployment_id`, and are not
    part of its baseline/canary split. Tenants and tiers match any of those listed; prompt tokens
    are the gateway's estimate, both bounds inclusive. A route tries its rules in order and the
    first match wins. Sets, so that matching a request costs a few lookups."""

    name: RuleName
    deployment_id: str
    tenant_ids: frozenset[str] = frozenset()
    tiers: frozenset[Literal["critical", "standard", "batch"]] = frozenset()
    min_prompt_tokens: NonNegative | None = None
    max_prompt_tokens: NonNegative | None = None
    # Built once when the snapshot is loaded, not per request.
    _arm: Arm = PrivateAttr()

    @model_validator(mode="after")
    def _matches_something(self) -> RouteRule:
        if not (
            self.tenant_ids
            or self.tiers
            or self.min_prompt_tokens is not None
            or self.max_prompt_tokens is not None
        ):
            raise ValueError(f"rule {self.name!r} matches every request")
        low, high = self.min_prompt_tokens, self.max_prompt_tokens
        if low is not None and high is not None and low > high:
            raise ValueError(f"rule {self.name!r} has min_prompt_tokens above max_prompt_tokens")
        return self

    def model_post_init(self, context: object, /) -> None:
        self._arm = Arm(
            name=RULE_ARM_PREFIX + self.name, deployment_id=self.deployment_id, weight=100.0
        )

    @property
    def arm(self) -> Arm:
        return self._arm


class Route(Frozen):
    name: str
    arms: tuple[Arm, ...] = Field(min_length=1, max_length=3)
    # What keeps a session on its arm: the request's `user`, the X-Session-Id header, or the
    # tenant itself. Falls back to the tenant when the chosen key is absent from a request.
    stickiness: Literal["user", "session", "tenant"] = "user"
    # Changes with each rollout, so a new rollout draws new cohorts.
    salt: str = ""
    rollout_id: str | None = None
    # Tenants that may use the route; empty means every tenant.
    tenant_ids: tuple[str, ...] = ()
    # Tried in order before the split; the first that matches a request takes it.
    rules: tuple[RouteRule, ...] = ()

    @model_validator(mode="after")
    def _one_arm_each(self) -> Route:
        names = [arm.name for arm in self.arms]
        if len(set(names)) != len(names):
            raise ValueError(f"route {self.name!r} has two arms named the same: {names}")
        if not set(names) <= {"baseline", "canary", "control"}:
            raise ValueError(
                f"route {self.name!r} arms must be baseline, canary and control: {names}"
            )
        rule_names = [rule.name for rule in self.rules]
        if len(set(rule_names)) != len(rule_names):
            raise ValueError(f"route {self.name!r} has two rules named the same: {rule_names}")
        if sum(arm.weight for arm in self.arms) <= 0:
            raise ValueError(f"route {self.name!r} has no weight on any arm")
        return self


class Snapshot(Frozen):
    version: Annotated[int, Field(ge=1)]
    # Versions are ordered only within an epoch. The epoch changes when the Redis that counts
    # versions lost its data or restarted (its counter may then start again below the versions
    # gateways hold), and a gateway takes a snapshot of another epoch as new whatever its version.
    epoch: str = ""
    generated_at: dt.datetime
    tenants: dict[str, Tenant] = Field(default_factory=dict)
    # Key hash (sha256 hex of the secret) -> key.
    keys: dict[str, ApiKey] = Field(default_factory=dict)
    routes: dict[str, Route] = Field(default_factory=dict)
    deployments: dict[str, Deployment] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _references_resolve(self) -> Snapshot:
        for key_hash, key in self.keys.items():
            if key.tenant_id not in self.tenants:
                raise ValueError(f"key {key.prefix}… names unknown tenant {key.tenant_id!r}")
            if len(key_hash) != 64:
                raise ValueError(f"key {key.prefix}… is not indexed by a sha256 hex digest")
        for tenant in self.tenants.values():
            fallback = tenant.budget.soft_limit_route
            if fallback is not None and fallback not in self.routes:
                raise ValueError(f"tenant {tenant.slug!r} soft-limit route {fallback!r} is unknown")
        for route in self.routes.values():
            for arm in route.arms:
                if arm.deployment_id not in self.deployments:
                    raise ValueError(
                        f"route {route.name!r} arm {arm.name} names unknown deployment "
                        f"{arm.deployment_id!r}"
                    )
            for rule in route.rules:
                if rule.deployment_id not in self.deployments:
                    raise ValueError(
                        f"route {route.name!r} rule {rule.name!r} names unknown deployment "
                        f"{rule.deployment_id!r}"
                    )
                if not rule.tenant_ids <= self.tenants.keys():
                    raise ValueError(
                        f"route {route.name!r} rule {rule.name!r} names an unknown tenant"
                    )
        return self
