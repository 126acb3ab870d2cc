"""The gateway's configuration snapshot: built from the control plane's rows, published to Redis.

Publication is compare-and-set on the version: the version is drawn from a Redis counter before
the rows are read, so of two concurrent publications the one that read later also carries the
higher version, and a stale one can never overwrite a newer one. Publishing is idempotent and
also runs on a schedule, so a lost announcement is repaired within one period.

Versions are ordered within an epoch, which lives beside the counter and names the Redis run that
made it. A Redis that lost its data (no persistence) counts from 1 again, and one restarted from
an older save counts again from that save: either way a new epoch begins with the first version
drawn from it, gateways take its snapshots as new, and a publication drawn in the old epoch is
refused. A beat task (every 2 s) publishes at once when Redis holds no snapshot of its run.
"""

from __future__ import annotations

import logging
import secrets
from collections import defaultdict

from django.utils import timezone

from controlplane.redis import get_redis
from evaluation.costs import deployment_unit_cost
from gateway import snapshot as schema
from rollouts.choices import LIVE_STATES, DeploymentState, ReplicaState
from rollouts.models import Deployment, Rollout, Route, RouteRule, control_weight
from tenants.models import ApiKey, Budget, Tenant

logger = logging.getLogger(__name__)

VERSION_KEY = "tollgate:gateway:snapshot:version"
PUBLISHED_VERSION_KEY = "tollgate:gateway:snapshot:published-version"
# Holds the run id of the Redis server that began the epoch, a colon and a random id.
EPOCH_KEY = "tollgate:gateway:snapshot:epoch"

# Redis's run id changes at every start, so a restarted server (data lost, or reloaded from a save
# older than its last versions) begins a new epoch; the random part tells apart two epochs of one
# run (a FLUSHALL). One script, so that the epoch and the version are drawn together.
NEXT_VERSION = """
local run = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
local epoch = redis.call('GET', KEYS[1])
if not epoch or string.sub(epoch, 1, #run + 1) ~= run .. ':' then
  epoch = run .. ':' .. ARGV[1]
  redis.call('SET', KEYS[1], epoch)
end
return {epoch, redis.call('INCR', KEYS[2])}
"""

# KEYS: 1 snapshot  2 published version  3 epoch.  ARGV: 1 version  2 JSON  3 channel  4 epoch
PUBLISH_IF_NEWER = """
if redis.call('GET', KEYS[3]) ~= ARGV[4] then return 0 end
if tonumber(ARGV[1]) <= tonumber(redis.call('GET', KEYS[2]) or '0') then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('SET', KEYS[2], ARGV[1])
redis.call('PUBLISH', ARGV[3], ARGV[1])
return 1
"""


def _budget(budget: Budget | None, route_names: set[str]) -> schema.Budget:
    if budget is None:
        return schema.Budget()
    # A fallback route deleted since the budget named it would make the whole snapshot invalid:
    # leave it out, and the gateway refuses past the soft limit instead of routing.
    fallback = budget.soft_limit_route if budget.soft_limit_route in route_names else None
    return schema.Budget(
        requests_per_minute=budget.requests_per_minute,
        input_tokens_per_minute=budget.input_tokens_per_minute,
        output_tokens_per_minute=budget.output_tokens_per_minute,
        tokens_per_day=budget.tokens_per_day,
        tokens_per_month=budget.tokens_per_month,
        max_concurrent_requests=budget.max_concurrent_requests,
        max_context_tokens=budget.max_context_tokens,
        max_output_tokens=budget.max_output_tokens,
        over_max_output=budget.over_max_output,  # type: ignore[arg-type]
        default_output_allowance=budget.default_output_allowance,
        soft_limit_action=budget.soft_limit_action,  # type: ignore[arg-type]
        soft_limit_route=fallback,
    )


def build_snapshot(version: int, *, epoch: str = "") -> schema.Snapshot:
    route_names = set(Route.objects.values_list("name", flat=True))
    tenants = {
        str(t.pk): schema.Tenant(
            id=str(t.pk),
            slug=t.slug,
            tier=t.tier,  # type: ignore[arg-type]
            fail_mode=t.fail_mode,  # type: ignore[arg-type]
            budget=_budget(getattr(t, "budget", None), route_names),
            over_soft_limit=t.over_soft_limit,
        )
        for t in Tenant.objects.select_related("budget")
    }
    keys = {
        k.key_hash: schema.ApiKey(
            id=str(k.pk),
            tenant_id=str(k.tenant_id),
            prefix=k.prefix,
            allowed_routes=tuple(k.allowed_routes),
            can_force_arm=k.can_force_arm,
            expires_at=k.expires_at,
        )
        for k in ApiKey.objects.filter(revoked_at__isnull=True)
    }
    routes: dict[str, schema.Route] = {}
    deployments: dict[str, schema.Deployment] = {}
    live_rollouts = dict(
        Rollout.objects.filter(state__in=LIVE_STATES).values_list("route_id", "pk")
    )
    rules = _rules(deployments)
    for route in Route.objects.select_related(
        "baseline__fleet",
        "canary__fleet",
        "control__fleet",
        "baseline__cost",
        "canary__cost",
        "control__cost",
    ).prefetch_related(
        "tenants",
        "baseline__fleet__replicas",
        "canary__fleet__replicas",
        "control__fleet__replicas",
    ):
        control = control_weight(route.canary_weight) if route.control is not None else 0.0
        baseline = 100.0 - route.canary_weight - control
        arms = [_arm("baseline", route.baseline, baseline, deployments)]
        if route.canary is not None:
            arms.append(_arm("canary", route.canary, route.canary_weight, deployments))
        if route.control is not None and control > 0:
            arms.append(_arm("control", route.control, control, deployments))
        routes[route.name] = schema.Route(
            name=route.name,
            arms=tuple(arms),
            stickiness=route.stickiness,  # type: ignore[arg-type]
            salt=route.salt,
            rollout_id=str(live_rollouts[route.pk]) if route.pk in live_rollouts else None,
            tenant_ids=tuple(str(t.pk) for t in route.tenants.all()),
            rules=rules.get(route.pk, ()),
        )
    return schema.Snapshot(
        version=version,
        epoch=epoch,
        generated_at=timezone.now(),
        tenants=tenants,
        keys=keys,
        routes=routes,
        deployments=deployments,
    )


def _rules(deployments: dict[str, schema.Deployment]) -> dict[int, tuple[schema.RouteRule, ...]]:
    """Each route's rules, in order. A rule whose deployment is no longer ready is left out, so its
    requests go back to the route's split rather than to a deployment draining or gone; so is one
    whose only condition was tenants that have since been deleted (it matches nobody)."""
    by_route: defaultdict[int, list[schema.RouteRule]] = defaultdict(list)
    for rule in (
        RouteRule.objects.filter(target__state=DeploymentState.READY)
        .select_related("target__fleet")
        .prefetch_related("tenants", "target__fleet__replicas")
        .order_by("route_id", "order")
    ):
        tenant_ids = frozenset(str(t.pk) for t in rule.tenants.all())
        bounds = (rule.min_prompt_tokens, rule.max_prompt_tokens)
        if not tenant_ids and not rule.tiers and bounds == (None, None):
            continue
        arm = _arm(rule.arm_name, rule.target, 100.0, deployments)
        by_route[rule.route_id].append(
            schema.RouteRule(
                name=rule.name,
                deployment_id=arm.deployment_id,
                tenant_ids=tenant_ids,
                tiers=frozenset(rule.tiers),  # type: ignore[arg-type]
                min_prompt_tokens=rule.min_prompt_tokens,
                max_prompt_tokens=rule.max_prompt_tokens,
            )
        )
    return {route_id: tuple(route_rules) for route_id, route_rules in by_route.items()}


def _arm(
    name: str, deployment: Deployment, weight: float, deployments: dict[str, schema.Deployment]
) -> schema.Arm:
    key = str(deployment.pk)
    if key not in deployments:
        replicas = tuple(
            schema.Replica(
                id=f"{deployment.fleet.name}/{r.name}", base_url=r.base_url, healthy=r.healthy
            )
            for r in deployment.fleet.replicas.all()
            if r.state == ReplicaState.ACTIVE
        )
        deployments[key] = schema.Deployment(
            id=key,
            served_model_name=deployment.served_model_name,
            max_model_len=deployment.max_model_len,
            replicas=replicas,
            kv_cache_usage=deployment.kv_cache_usage,
            waiting_requests=deployment.waiting_requests,
            max_in_flight_per_replica=deployment.max_in_flight_per_replica,
            cost_per_million_tokens=deployment_unit_cost(deployment).dollars_per_million_tokens,
        )
    return schema.Arm(name=name, deployment_id=key, weight=weight)


def publish_snapshot() -> int | None:
    """Publishes the current configuration; returns its version, or None if a newer one won."""
    client = get_redis()
    epoch, version = client.eval(NEXT_VERSION, 2, EPOCH_KEY, VERSION_KEY, secrets.token_hex(8))
    snapshot = build_snapshot(int(version), epoch=str(epoch))
    published = client.eval(
        PUBLISH_IF_NEWER,
        3,
        schema.SNAPSHOT_KEY,
        PUBLISHED_VERSION_KEY,
        EPOCH_KEY,
        snapshot.version,
        snapshot.model_dump_json(),
        schema.CHANGED_CHANNEL,
        snapshot.epoch,
    )
    return snapshot.version if int(published) == 1 else None


def publish_snapshot_if_lost() -> int | None:
    """Publishes when Redis holds no snapshot of its current run (it restarted without its data,
    or from an older save); returns the version published, or None. Three reads when nothing was
    lost, so a beat task can afford to ask every 2 s."""
    client = get_redis()
    pipe = client.pipeline(transaction=False)
    pipe.info("server")
    pipe.get(EPOCH_KEY)
    pipe.exists(schema.SNAPSHOT_KEY)
    info, epoch, present = pipe.execute()
    if present and epoch and str(epoch).startswith(f"{info['run_id']}:"):
        return None
    logger.warning("Redis holds no gateway snapshot of its current run: publishing one")
    return publish_snapshot()
