"""Routes: the model names clients ask for, created on a ready baseline for the tenants that may
use them, and deleted only when nothing is on them."""

from __future__ import annotations

import datetime as dt
import re
import secrets

from django.db import IntegrityError, transaction
from django.utils import timezone

from core.audit import audit_record
from core.errors import Conflict, DomainError, NotFound
from core.publication import gateway_snapshot_changed
from rollouts.choices import LIVE_STATES, DeploymentState, Stickiness
from rollouts.models import Deployment, Rollout, Route
from rollouts.services.common import require_release_manager
from tenants.models import Tenant, UsageRollup, User

ROUTE_NAME = re.compile(r"[A-Za-z0-9._:-]+(/[A-Za-z0-9._:-]+)*")
# /rollouts/routes/new/ is the page that creates routes.
RESERVED_NAMES = frozenset({"new"})
# A route that served requests this recently is in use, whoever its tenants are.
RECENT_TRAFFIC = dt.timedelta(minutes=15)


def _tenants(slugs: list[str]) -> list[Tenant]:
    tenants = list(Tenant.objects.filter(slug__in=slugs))
    missing = sorted(set(slugs) - {t.slug for t in tenants})
    if missing:
        raise DomainError(f"tenants: no tenant {', '.join(missing)}")
    return tenants


def route_create(
    *,
    actor: User | None,
    name: str,
    baseline: Deployment,
    stickiness: Stickiness = Stickiness.USER,
    tenant_slugs: list[str] | None = None,
) -> Route:
    """A route on a ready baseline; `tenant_slugs` empty opens it to every tenant."""
    actor = require_release_manager(actor, "create routes")
    if len(name) > 100 or not ROUTE_NAME.fullmatch(name) or name.rsplit("/", 1)[-1] == "rules":
        raise DomainError(
            "name: the model name clients send: 1 to 100 letters, digits and . _ : - in parts "
            "separated by / (e.g. support-chat or acme/llama-3-8b), not ending in /rules"
        )
    if name in RESERVED_NAMES:
        raise DomainError(f"name: {name!r} is reserved (a page's address); choose another")
    if baseline.state != DeploymentState.READY:
        raise DomainError(
            f"baseline: deployment {baseline.pk} is {baseline.state}; a route starts on a ready "
            "deployment"
        )
    tenants = _tenants(tenant_slugs or [])
    try:
        with transaction.atomic():
            route = Route.objects.create(
                name=name, baseline=baseline, stickiness=stickiness, salt=secrets.token_hex(8)
            )
            route.tenants.set(tenants)
            audit_record(
                actor=actor,
                action="route.created",
                target=route,
                data={
                    "baseline": baseline.pk,
                    "stickiness": stickiness,
                    "tenants": sorted(t.slug for t in tenants),
                },
            )
            gateway_snapshot_changed()
    except IntegrityError as exc:
        raise Conflict(f"a route named {name!r} already exists") from exc
    return route


def route_delete(*, actor: User | None, name: str) -> None:
    """Refuses a route with a live rollout, recent traffic or a rollout history (its rollouts
    name it), saying which."""
    actor = require_release_manager(actor, "delete routes")
    with transaction.atomic():
        route = Route.objects.select_for_update().filter(name=name).first()
        if route is None:
            raise NotFound(f"no route named {name!r}")
        live = list(Rollout.objects.filter(route=route, state__in=LIVE_STATES))
        if live:
            raise Conflict(
                f"route {name} has a live rollout ({', '.join(str(r.pk) for r in live)}); "
                "end it first"
            )
        since = timezone.now() - RECENT_TRAFFIC
        recent = sorted(
            set(
                UsageRollup.objects.filter(route=name, bucket__gte=since).values_list(
                    "tenant__slug", flat=True
                )
            )
        )
        if recent:
            raise Conflict(
                f"route {name} served requests in the last {RECENT_TRAFFIC.seconds // 60} "
                f"minutes (tenants {', '.join(recent)}); move them to another route first"
            )
        if Rollout.objects.filter(route=route).exists():
            raise Conflict(f"route {name} keeps the history of its rollouts; it cannot be deleted")
        audit_record(actor=actor, action="route.deleted", target=route, data={"name": name})
        route.delete()
        gateway_snapshot_changed()
