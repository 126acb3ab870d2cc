"""Reads of rollouts, for the API and the UI. Everything a person may see passes through
`visible_routes`: the one place that decides which routes, rollouts and deployments a role reads.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from django.contrib.auth.models import AnonymousUser
from django.db.models import Exists, OuterRef, Q, QuerySet

from core.errors import NotFound
from rollouts.choices import LIVE_STATES, ReplicaState
from rollouts.models import Deployment, Fleet, PlanTemplate, Replica, Rollout, Route, RouteRule
from tenants.choices import Role
from tenants.models import Tenant, User

RouteTenant = Route.tenants.through
RuleTenant = RouteRule.tenants.through


def visible_routes(user: User | AnonymousUser) -> QuerySet[Route]:
    """Release managers and viewers read every route. A tenant admin reads the routes open to
    every tenant (no tenants named) and those naming their own tenant; a route restricted to
    other tenants does not exist for them (404, not 403, so its name does not leak)."""
    if not isinstance(user, User) or not user.is_active:
        return Route.objects.none()
    if user.role in (Role.RELEASE_MANAGER, Role.VIEWER):
        return Route.objects.all()
    if user.role == Role.TENANT_ADMIN and user.tenant_id is not None:
        restricted = RouteTenant.objects.filter(route_id=OuterRef("pk"))
        mine = restricted.filter(tenant_id=user.tenant_id)
        return Route.objects.filter(~Exists(restricted) | Exists(mine))
    # A role this function does not know sees nothing, rather than everything.
    return Route.objects.none()


def visible_rollouts(user: User | AnonymousUser) -> QuerySet[Rollout]:
    return Rollout.objects.filter(route__in=visible_routes(user))


def visible_deployments(user: User | AnonymousUser) -> QuerySet[Deployment]:
    """Deployments that serve, served or were tried on a route the user may see."""
    rollouts = visible_rollouts(user)
    tried = Deployment.objects.filter(
        Q(pk__in=rollouts.values("baseline")) | Q(pk__in=rollouts.values("candidate"))
    )
    return Deployment.objects.in_use(visible_routes(user)) | tried


def sees_infrastructure(user: User | AnonymousUser) -> bool:
    return (
        isinstance(user, User)
        and user.is_active
        and user.role in (Role.RELEASE_MANAGER, Role.VIEWER)
    )


def visible_fleets(user: User | AnonymousUser) -> QuerySet[Fleet]:
    """Fleets are the operators' business: release managers and viewers read them; a tenant
    admin reads none (404)."""
    if not sees_infrastructure(user):
        return Fleet.objects.none()
    return Fleet.objects.prefetch_related("replicas").order_by("name")


def replica_of(user: User | AnonymousUser, fleet_name: str, name: str) -> Replica:
    replica = fleet_for(user, fleet_name).replicas.filter(name=name).first()
    if replica is None:
        raise NotFound(f"fleet {fleet_name} has no replica named {name!r}")
    return replica


def deployment_list(user: User | AnonymousUser, *, state: str = "") -> QuerySet[Deployment]:
    """Every deployment for release managers and viewers (pending ones included); a tenant
    admin's visible ones."""
    queryset = Deployment.objects.all() if sees_infrastructure(user) else visible_deployments(user)
    queryset = queryset.select_related("artifact", "fleet").order_by("-created_at")
    return queryset.filter(state=state) if state else queryset


def deployment_for(user: User | AnonymousUser, deployment_id: int) -> Deployment:
    found = deployment_list(user).filter(pk=deployment_id).first()
    if found is None:
        raise NotFound(f"no deployment {deployment_id}")
    return found


def fleet_for(user: User | AnonymousUser, name: str) -> Fleet:
    found = visible_fleets(user).filter(name=name).first()
    if found is None:
        raise NotFound(f"no fleet named {name!r}")
    return found


def rollout_list(
    *, user: User | AnonymousUser, state: str = "", route: str = ""
) -> QuerySet[Rollout]:
    queryset = (
        visible_rollouts(user)
        .select_related("route", "candidate__artifact", "baseline__artifact", "control__artifact")
        .order_by("-created_at")
    )
    if state == "live":
        queryset = queryset.filter(state__in=LIVE_STATES)
    elif state:
        queryset = queryset.filter(state=state)
    if route:
        queryset = queryset.filter(route__name=route)
    return queryset


def route_for(user: User | AnonymousUser, name: str) -> Route:
    """The route named `name` if the user may see it; otherwise it does not exist for them."""
    route = visible_routes(user).select_related("baseline__artifact", "canary__artifact")
    found = route.filter(name=name).first()
    if found is None:
        raise NotFound(f"no route named {name!r}")
    return found


def visible_rules(user: User | AnonymousUser, route: Route) -> QuerySet[RouteRule]:
    """A route's rules in order. A tenant admin reads only those that can apply to their tenant
    (naming no tenant, or theirs), so other tenants' pins do not leak."""
    rules = (
        RouteRule.objects.filter(route=route)
        .select_related("target__artifact", "target__fleet")
        .prefetch_related("tenants")
        .order_by("order")
    )
    if isinstance(user, User) and user.role == Role.TENANT_ADMIN:
        if user.tenant_id is None:
            return rules.none()
        restricted = RuleTenant.objects.filter(routerule_id=OuterRef("pk"))
        mine = restricted.filter(tenant_id=user.tenant_id)
        rules = rules.filter(~Exists(restricted) | Exists(mine))
    return rules


def visible_tenant_slugs(user: User | AnonymousUser, tenants: Iterable[Tenant]) -> list[str]:
    """The tenants of a route or rule as the user may see them: a tenant admin sees only theirs."""
    if isinstance(user, User) and user.role == Role.TENANT_ADMIN:
        return sorted(t.slug for t in tenants if t.pk == user.tenant_id)
    return sorted(t.slug for t in tenants)


def plan_templates() -> QuerySet[PlanTemplate]:
    """Plan templates hold no tenant's data: every signed-in role reads them."""
    return PlanTemplate.objects.order_by("name")


def plan_template_named(name: str) -> PlanTemplate:
    template = PlanTemplate.objects.filter(name=name).first()
    if template is None:
        raise NotFound(f"no plan template named {name!r}")
    return template


def scrape_targets(user: User | AnonymousUser) -> list[dict[str, object]]:
    """Prometheus' HTTP service discovery: one target group per active replica of the fleets the
    user may see, labelled with its fleet, its name and the live deployments it serves, so a
    replica added in the admin or the API is scraped without editing Prometheus' configuration."""
    groups: list[dict[str, object]] = []
    fleets = visible_fleets(user).prefetch_related("deployments__artifact")
    for fleet in fleets:
        live = sorted(
            (d for d in fleet.deployments.all() if d.state not in ("retired", "failed")),
            key=lambda d: d.pk,
        )
        for replica in fleet.replicas.all():
            if replica.state != ReplicaState.ACTIVE:
                continue
            url = urlsplit(replica.base_url)
            groups.append(
                {
                    "targets": [url.netloc],
                    "labels": {
                        "__scheme__": url.scheme or "http",
                        "__metrics_path__": url.path.rstrip("/") + "/metrics",
                        "fleet": fleet.name,
                        "replica": replica.name,
                        "provider": fleet.provider,
                        "deployments": ",".join(str(d.pk) for d in live),
                        "served_models": ",".join(d.served_model_name for d in live),
                    },
                }
            )
    return groups
