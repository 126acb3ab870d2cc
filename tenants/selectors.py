"""Reads of tenants, keys, budgets and usage. Every read that crosses the tenant boundary takes
the user: a tenant admin sees their own tenant and nothing of the others (the others are "not
found", never "forbidden", so their names cannot be probed)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from django.apps import apps
from django.contrib.auth.models import AnonymousUser
from django.db.models import F, Q, QuerySet, Sum
from django.db.models.functions import Coalesce, Trunc
from django.utils import timezone

from core.errors import NotFound
from tenants.choices import Granularity, Role
from tenants.models import ApiKey, ApiToken, Budget, RecentRejection, Tenant, UsageRollup, User

# --- who sees which tenant ------------------------------------------------------------------------


def visible_tenants(user: User | AnonymousUser) -> QuerySet[Tenant]:
    if not isinstance(user, User) or not user.is_active:
        return Tenant.objects.none()
    if user.role == Role.TENANT_ADMIN:
        return Tenant.objects.filter(pk=user.tenant_id or 0)
    return Tenant.objects.all()


def tenant_get(user: User | AnonymousUser, slug: str) -> Tenant:
    tenant = visible_tenants(user).select_related("budget").filter(slug=slug).first()
    if tenant is None:
        raise NotFound(f"no tenant {slug!r}")
    return tenant


def may_manage_keys(user: User | AnonymousUser, tenant: Tenant) -> bool:
    """Release managers manage every tenant's keys, tenant admins their own; viewers none."""
    if not isinstance(user, User):
        return False
    return user.is_release_manager or (user.is_tenant_admin and user.tenant_id == tenant.pk)


def may_edit_budgets(user: User | AnonymousUser) -> bool:
    return isinstance(user, User) and user.is_release_manager


def api_tokens_of(user: User) -> QuerySet[ApiToken]:
    """A person's own API tokens, newest first: nobody lists anyone else's."""
    return ApiToken.objects.filter(user=user).order_by("-created_at")


def api_token_of(user: User, token_id: int) -> ApiToken:
    token = api_tokens_of(user).filter(pk=token_id).first()
    if token is None:
        raise NotFound(f"you have no API token {token_id}")
    return token


def api_keys(tenant: Tenant) -> QuerySet[ApiKey]:
    return ApiKey.objects.filter(tenant=tenant).order_by("revoked_at", "-created_at")


def api_key_get(tenant: Tenant, key_id: int) -> ApiKey:
    key = ApiKey.objects.filter(tenant=tenant, pk=key_id).first()
    if key is None:
        raise NotFound(f"tenant {tenant.slug} has no API key {key_id}")
    return key


def routes_open_to(tenant: Tenant) -> list[str]:
    """Names of the routes the tenant may use (a route open to no tenant in particular is open
    to all). Looked up by name: rollouts imports tenants, so tenants may not import rollouts."""
    route_model = apps.get_model("rollouts", "Route")
    routes = route_model.objects.filter(Q(tenants=None) | Q(tenants=tenant)).distinct()
    return sorted(routes.values_list("name", flat=True))


def budget_of(tenant: Tenant) -> Budget:
    """The tenant's budget, or an unsaved one with no limits when none was ever set."""
    budget = Budget.objects.filter(tenant=tenant).first()
    return budget if budget is not None else Budget(tenant=tenant)


# --- usage over time ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """A chart range: which rollup rows it reads, how it buckets them, how far back."""

    name: str
    label: str
    granularity: str
    trunc: str
    step: dt.timedelta
    buckets: int

    def start(self, now: dt.datetime) -> dt.datetime:
        end = _floor(now, self.trunc)
        return end - self.step * (self.buckets - 1)


WINDOWS = {
    w.name: w
    for w in (
        Window("hour", "Last hour", Granularity.MINUTE, "minute", dt.timedelta(minutes=1), 60),
        Window("day", "Last day", Granularity.HOUR, "hour", dt.timedelta(hours=1), 24),
        Window("month", "Last 30 days", Granularity.DAY, "day", dt.timedelta(days=1), 30),
    )
}
DEFAULT_WINDOW = "day"


def _floor(moment: dt.datetime, unit: str) -> dt.datetime:
    moment = moment.astimezone(dt.UTC).replace(second=0, microsecond=0)
    if unit in ("hour", "day"):
        moment = moment.replace(minute=0)
    if unit == "day":
        moment = moment.replace(hour=0)
    return moment


@dataclass
class Totals:
    requests: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    errors: int = 0
    rejected: int = 0
    cost: float = 0.0

    @property
    def tokens(self) -> int:
        return self.tokens_in + self.tokens_out


@dataclass
class Series:
    """Per-bucket sums over a window, every bucket present (zeros where nothing happened)."""

    window: Window
    buckets: list[dt.datetime]
    totals: list[Totals]
    # reason -> count per bucket
    rejections: dict[str, list[int]] = field(default_factory=dict)

    def column(self, name: str) -> list[float]:
        return [float(getattr(t, name)) for t in self.totals]

    @property
    def overall(self) -> Totals:
        total = Totals()
        for t in self.totals:
            for name in ("requests", "tokens_in", "tokens_out", "errors", "rejected", "cost"):
                setattr(total, name, getattr(total, name) + getattr(t, name))
        return total


SUMS = {
    "requests": Sum("requests"),
    "tokens_in": Sum("tokens_in"),
    "tokens_out": Sum("tokens_out"),
    "errors": Sum("errors"),
    "rejected": Sum("rejected"),
    "cost": Sum("cost"),
}


def usage_series(tenant: Tenant, window: Window, now: dt.datetime | None = None) -> Series:
    now = now or timezone.now()
    start = window.start(now)
    buckets = [start + window.step * i for i in range(window.buckets)]
    index = {b: i for i, b in enumerate(buckets)}
    totals = [Totals() for _ in buckets]
    rows = (
        UsageRollup.objects.filter(tenant=tenant, granularity=window.granularity, bucket__gte=start)
        .annotate(b=Trunc("bucket", window.trunc, tzinfo=dt.UTC))
        .values("b")
        .annotate(**SUMS)
        .order_by()
    )
    row: dict[str, Any]
    for row in rows:  # type: ignore[assignment]  # values() rows, typed by their keys
        i = index.get(row["b"])
        if i is not None:
            totals[i] = Totals(**{name: row[name] or 0 for name in SUMS})
    series = Series(window, buckets, totals)
    # Summed here rather than with jsonb_each in SQL: the reasons are a handful of small
    # objects per row, and the SQL form costs a sort (and parallel workers) per page view.
    rejected = UsageRollup.objects.filter(
        tenant=tenant, granularity=window.granularity, bucket__gte=start, rejected__gt=0
    ).values_list("bucket", "rejections")
    for bucket, reasons in rejected:
        i = index.get(_floor(bucket, window.trunc))
        if i is None:
            continue
        for reason, count in reasons.items():
            series.rejections.setdefault(reason, [0] * len(buckets))[i] += int(count)
    return series


@dataclass(frozen=True)
class RouteUsage:
    route: str
    arm: str
    deployment: str
    model: str  # the artifact the deployment serves, e.g. "support-chat v2"
    totals: Totals


def usage_by_route(
    tenant: Tenant, window: Window, now: dt.datetime | None = None
) -> list[RouteUsage]:
    start = window.start(now or timezone.now())
    rows: list[dict[str, Any]] = [
        dict(r)
        for r in UsageRollup.objects.filter(
            tenant=tenant, granularity=window.granularity, bucket__gte=start
        )
        .values("route", "arm", "deployment")
        .annotate(**SUMS)
        .order_by("route", "arm", "deployment")
    ]
    models = _deployment_models({row["deployment"] for row in rows})
    return [
        RouteUsage(
            route=row["route"],
            arm=row["arm"],
            deployment=row["deployment"],
            model=models.get(row["deployment"], f"deployment {row['deployment']}"),
            totals=Totals(**{name: row[name] or 0 for name in SUMS}),
        )
        for row in rows
    ]


def _deployment_models(ids: set[str]) -> dict[str, str]:
    # Looked up by name: the tenants app does not import rollouts (which imports tenants).
    deployment_model = apps.get_model("rollouts", "Deployment")
    numeric = [int(i) for i in ids if i.isdigit()]
    found = deployment_model.objects.filter(pk__in=numeric).select_related("artifact")
    return {str(d.pk): str(d.artifact) for d in found}


EXPORT_COLUMNS = (
    "bucket",
    "route",
    "arm",
    "deployment",
    "requests",
    "tokens_in",
    "tokens_out",
    "errors",
    "rejected",
    "cost",
)


def usage_rows(tenant: Tenant, since: dt.datetime) -> QuerySet[UsageRollup, tuple[Any, ...]]:
    """The tenant's hour rows since `since`, as tuples of EXPORT_COLUMNS."""
    return (
        UsageRollup.objects.filter(tenant=tenant, granularity=Granularity.HOUR, bucket__gte=since)
        .order_by("bucket", "route", "arm", "deployment")
        .values_list(*EXPORT_COLUMNS)
    )


def recent_rejections(tenant: Tenant, limit: int = 20) -> QuerySet[RecentRejection]:
    return RecentRejection.objects.filter(tenant=tenant).order_by("-at", "-id")[:limit]


# --- all tenants, for release managers ------------------------------------------------------------

OVERVIEW_SORTS = {"usage": "tokens", "rejections": "rejected"}


@dataclass(frozen=True)
class TenantUsage:
    tenant: Tenant
    totals: Totals


def tenants_overview(
    user: User | AnonymousUser,
    *,
    sort: str = "usage",
    search: str = "",
    since: dt.timedelta = dt.timedelta(days=1),
) -> list[TenantUsage]:
    """Every visible tenant (whose slug or name has `search`) with its usage over the last
    day, the heaviest first."""
    start = _floor(timezone.now() - since, "hour")
    sums: dict[int, dict[str, Any]] = {
        row["tenant_id"]: dict(row)
        for row in UsageRollup.objects.filter(granularity=Granularity.HOUR, bucket__gte=start)
        .values("tenant_id")
        .annotate(**SUMS)
        .order_by()
    }
    rows = [
        TenantUsage(
            tenant=tenant,
            totals=Totals(**{name: (sums.get(tenant.pk) or {}).get(name) or 0 for name in SUMS}),
        )
        for tenant in visible_tenants(user)
        .filter(Q(slug__icontains=search) | Q(name__icontains=search))
        .select_related("budget")
    ]
    key = OVERVIEW_SORTS.get(sort, "tokens")
    rows.sort(key=lambda row: (-getattr(row.totals, key), row.tenant.slug))
    return rows


def tenant_tokens_since(tenant_ids: list[int], start: dt.datetime) -> dict[int, int]:
    """Tokens in and out per tenant since `start`, from the hour rows."""
    rows = (
        UsageRollup.objects.filter(
            tenant_id__in=tenant_ids, granularity=Granularity.HOUR, bucket__gte=start
        )
        .values("tenant_id")
        .annotate(tokens=Coalesce(Sum(F("tokens_in") + F("tokens_out")), 0))
        .order_by()
    )
    return {row["tenant_id"]: int(row["tokens"]) for row in rows}
