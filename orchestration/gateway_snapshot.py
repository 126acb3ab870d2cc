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

A row the snapshot schema refuses (gateways would refuse the whole snapshot for it) is left out,
with what cannot stand without it, and the rest is published: one bad row must not freeze every
later change, key revocations and rollbacks included. Each row left out is logged at ERROR on
every publication, and the last publication's list is kept beside the snapshot for /readyz and
the home page.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections import defaultdict
from dataclasses import asdict, dataclass

from django.utils import timezone
from pydantic import ValidationError

from core.redis import get_redis
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

# The rows the published snapshot left out, as JSON: {"version": …, "rows": [LeftOut, …]}.
LEFT_OUT_KEY = "tollgate:gateway:snapshot:left-out"
# Written after the publication it describes, and only while that is still the published one: a
# newer publication that landed in between writes its own.
SET_LEFT_OUT_IF_CURRENT = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[2])
return 1
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


@dataclass(frozen=True)
class LeftOut:
    """A row the snapshot schema refused: published without it, logged, shown on /readyz and the
    home page. `effect` says what the gateways do meanwhile."""

    row: str
    error: str
    effect: str


def _error(exc: ValidationError) -> str:
    """Each failure with the field it concerns: "max_model_len: Input should be greater …"."""
    messages = []
    for error in exc.errors():
        field = ".".join(str(part) for part in error["loc"])
        messages.append(f"{field}: {error['msg']}" if field else error["msg"])
    return "; ".join(messages)


def _budget(budget: Budget | None) -> schema.Budget:
    if budget is None:
        return schema.Budget()
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
        soft_limit_route=budget.soft_limit_route or None,
    )


def build_snapshot(version: int, *, epoch: str = "") -> schema.Snapshot:
    return build_snapshot_leaving_out(version, epoch=epoch)[0]


def build_snapshot_leaving_out(
    version: int, *, epoch: str = ""
) -> tuple[schema.Snapshot, list[LeftOut]]:
    """The snapshot, and the rows left out of it.

    Each row is validated on its own, so that one the schema refuses (written past the forms'
    validation: by a script, a migration, an older release) costs only itself and what cannot
    stand without it, and every other change (a key revoked, a rollback) still reaches the
    gateways. A tenant left out takes its keys along, so its requests are refused rather than
    served under limits nobody set; a route whose baseline is left out goes too, while a canary
    or control deployment left out only drops its arm, and the baseline serves its share.
    """
    left_out: list[LeftOut] = []
    tenants = _tenants(left_out)
    keys = _keys(tenants, left_out)
    deployments = _Deployments(left_out)
    rules = _rules(deployments, tenants, left_out)
    routes = _routes(deployments, rules, left_out)
    snapshot = schema.Snapshot(
        version=version,
        epoch=epoch,
        generated_at=timezone.now(),
        tenants={key: _fallback_published(tenant, routes) for key, tenant in tenants.items()},
        keys=keys,
        routes=routes,
        deployments=deployments.published,
    )
    return snapshot, left_out


def _tenants(left_out: list[LeftOut]) -> dict[str, schema.Tenant]:
    tenants = {}
    for tenant in Tenant.objects.select_related("budget"):
        row = f"budget of tenant {tenant.slug}"
        try:
            budget = _budget(getattr(tenant, "budget", None))
            row = f"tenant {tenant.slug}"
            tenants[str(tenant.pk)] = schema.Tenant(
                id=str(tenant.pk),
                slug=tenant.slug,
                tier=tenant.tier,  # type: ignore[arg-type]
                fail_mode=tenant.fail_mode,  # type: ignore[arg-type]
                budget=budget,
                over_soft_limit=tenant.over_soft_limit,
            )
        except ValidationError as exc:
            left_out.append(
                LeftOut(
                    row=row,
                    error=_error(exc),
                    effect="the tenant's keys are refused until the row is corrected",
                )
            )
    return tenants


def _fallback_published(tenant: schema.Tenant, routes: dict[str, schema.Route]) -> schema.Tenant:
    # A fallback route deleted (or left out) since the budget named it would make the whole
    # snapshot invalid: leave it out, and the gateway refuses past the soft limit instead.
    fallback = tenant.budget.soft_limit_route
    if fallback is None or fallback in routes:
        return tenant
    budget = tenant.budget.model_copy(update={"soft_limit_route": None})
    return tenant.model_copy(update={"budget": budget})


def _keys(tenants: dict[str, schema.Tenant], left_out: list[LeftOut]) -> dict[str, schema.ApiKey]:
    keys = {}
    for key in ApiKey.objects.filter(revoked_at__isnull=True):
        tenant = tenants.get(str(key.tenant_id))
        if tenant is None:
            continue  # its tenant was left out, and says so
        row = f"key {key.prefix}… of tenant {tenant.slug}"
        if len(key.key_hash) != 64:
            left_out.append(
                LeftOut(
                    row=row,
                    error="key_hash: not a sha256 hex digest",
                    effect="the key is refused",
                )
            )
            continue
        try:
            keys[key.key_hash] = schema.ApiKey(
                id=str(key.pk),
                tenant_id=str(key.tenant_id),
                prefix=key.prefix,
                allowed_routes=tuple(key.allowed_routes),
                can_force_arm=key.can_force_arm,
                expires_at=key.expires_at,
            )
        except ValidationError as exc:
            left_out.append(LeftOut(row=row, error=_error(exc), effect="the key is refused"))
    return keys


class _Deployments:
    """The deployments that arms and rules name, each validated once when first named."""

    def __init__(self, left_out: list[LeftOut]) -> None:
        self.published: dict[str, schema.Deployment] = {}
        self._refused: set[str] = set()
        self._left_out = left_out

    def publish(self, deployment: Deployment) -> str | None:
        """The deployment's id in the snapshot, or None when it is left out."""
        key = str(deployment.pk)
        if key not in self.published and key not in self._refused:
            try:
                self.published[key] = self._build(deployment)
            except ValidationError as exc:
                self._refused.add(key)
                self._left_out.append(
                    LeftOut(
                        row=f"deployment {key} ({deployment.served_model_name} on "
                        f"{deployment.fleet.name})",
                        error=_error(exc),
                        effect="routes and rules that use it go without it",
                    )
                )
        return None if key in self._refused else key

    @staticmethod
    def _build(deployment: Deployment) -> schema.Deployment:
        replicas = tuple(
            schema.Replica(
                id=f"{deployment.fleet.name}/{r.name}", base_url=r.base_url, healthy=r.healthy
            )
            for r in deployment.fleet.replicas.all()
            if r.state == ReplicaState.ACTIVE
        )
        return schema.Deployment(
            id=str(deployment.pk),
            served_model_name=deployment.served_model_name,
            max_model_len=deployment.max_model_len,
            tokenizer_dir=deployment.tokenizer_dir or None,
            replicas=replicas,
            kv_cache_usage=deployment.kv_cache_usage,
            waiting_requests=deployment.waiting_requests,
            max_in_flight_per_replica=deployment.max_in_flight_per_replica,
            cost_per_million_tokens=deployment_unit_cost(deployment).dollars_per_million_tokens,
        )


def _routes(
    deployments: _Deployments,
    rules: dict[int, tuple[schema.RouteRule, ...]],
    left_out: list[LeftOut],
) -> dict[str, schema.Route]:
    routes: dict[str, schema.Route] = {}
    live_rollouts = dict(
        Rollout.objects.filter(state__in=LIVE_STATES).values_list("route_id", "pk")
    )
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
        baseline = deployments.publish(route.baseline)
        if baseline is None:
            left_out.append(
                LeftOut(
                    row=f"route {route.name}",
                    error=f"baseline: deployment {route.baseline_id} is left out",
                    effect="requests for the route are refused",
                )
            )
            continue
        control = control_weight(route.canary_weight) if route.control is not None else 0.0
        others: list[tuple[str, str, float]] = []
        for name, deployment, weight in (
            ("canary", route.canary, route.canary_weight),
            ("control", route.control, control),
        ):
            if deployment is None or (name == "control" and weight <= 0):
                continue
            deployment_id = deployments.publish(deployment)
            if deployment_id is None:
                left_out.append(
                    LeftOut(
                        row=f"{name} arm of route {route.name}",
                        error=f"{name}: deployment {deployment.pk} is left out",
                        effect="the baseline serves its share",
                    )
                )
                continue
            others.append((name, deployment_id, weight))
        share = 100.0 - sum(weight for _, _, weight in others)
        try:
            routes[route.name] = schema.Route(
                name=route.name,
                arms=tuple(
                    schema.Arm(name=name, deployment_id=deployment_id, weight=weight)
                    for name, deployment_id, weight in [("baseline", baseline, share), *others]
                ),
                stickiness=route.stickiness,  # type: ignore[arg-type]
                salt=route.salt,
                rollout_id=str(live_rollouts[route.pk]) if route.pk in live_rollouts else None,
                tenant_ids=tuple(str(t.pk) for t in route.tenants.all()),
                rules=rules.get(route.pk, ()),
            )
        except ValidationError as exc:
            left_out.append(
                LeftOut(
                    row=f"route {route.name}",
                    error=_error(exc),
                    effect="requests for the route are refused",
                )
            )
    return routes


def _rules(
    deployments: _Deployments, tenants: dict[str, schema.Tenant], left_out: list[LeftOut]
) -> dict[int, tuple[schema.RouteRule, ...]]:
    """Each route's rules, in order. A rule whose deployment is no longer ready is left out, so its
    requests go back to the route's split rather than to a deployment draining or gone; so is one
    whose only condition was tenants that have since been deleted (it matches nobody), and one
    whose tenants were all left out of the snapshot (it would match nobody there)."""
    by_route: defaultdict[int, list[schema.RouteRule]] = defaultdict(list)
    for rule in (
        RouteRule.objects.filter(target__state=DeploymentState.READY)
        .select_related("route", "target__fleet")
        .prefetch_related("tenants", "target__fleet__replicas")
        .order_by("route_id", "order")
    ):
        named = frozenset(str(t.pk) for t in rule.tenants.all())
        tenant_ids = named & tenants.keys()
        bounds = (rule.min_prompt_tokens, rule.max_prompt_tokens)
        if (named and not tenant_ids) or (not named and not rule.tiers and bounds == (None, None)):
            continue
        row = f"rule {rule.name} of route {rule.route.name}"
        target = deployments.publish(rule.target)
        if target is None:
            left_out.append(
                LeftOut(
                    row=row,
                    error=f"target: deployment {rule.target_id} is left out",
                    effect="its requests follow the route's split",
                )
            )
            continue
        try:
            by_route[rule.route_id].append(
                schema.RouteRule(
                    name=rule.name,
                    deployment_id=target,
                    tenant_ids=tenant_ids,
                    tiers=frozenset(rule.tiers),  # type: ignore[arg-type]
                    min_prompt_tokens=rule.min_prompt_tokens,
                    max_prompt_tokens=rule.max_prompt_tokens,
                )
            )
        except ValidationError as exc:
            left_out.append(
                LeftOut(row=row, error=_error(exc), effect="its requests follow the route's split")
            )
    return {route_id: tuple(route_rules) for route_id, route_rules in by_route.items()}


def publish_snapshot() -> int | None:
    """Publishes the current configuration; returns its version, or None if a newer one won."""
    client = get_redis()
    epoch, version = client.eval(NEXT_VERSION, 2, EPOCH_KEY, VERSION_KEY, secrets.token_hex(8))
    snapshot, left_out = build_snapshot_leaving_out(int(version), epoch=str(epoch))
    for entry in left_out:
        logger.error(
            "gateway snapshot: a row is left out",
            extra={"version": snapshot.version, **asdict(entry)},
        )
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
    if int(published) != 1:
        return None
    rows = json.dumps({"version": snapshot.version, "rows": [asdict(e) for e in left_out]})
    client.eval(
        SET_LEFT_OUT_IF_CURRENT, 2, PUBLISHED_VERSION_KEY, LEFT_OUT_KEY, snapshot.version, rows
    )
    return snapshot.version


def left_out_of_published() -> list[LeftOut]:
    """The rows the published snapshot left out (none before the first publication)."""
    raw = get_redis().get(LEFT_OUT_KEY)
    if raw is None:
        return []
    return [LeftOut(**row) for row in json.loads(raw)["rows"]]


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
